#include "program_gen.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo_text_builder.h"
#include "program_gen_internal.h"

namespace weave::fuzz {

std::string GroupsListText(const std::vector<std::vector<int64_t>>& groups) {
  std::vector<std::string> parts;
  for (const auto& g : groups) parts.push_back(absl::StrCat("{", IntList(g), "}"));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string Groups::ShiftPairs(int64_t shift) const {
  std::vector<std::string> pairs;
  for (const auto& g : groups) {
    const int64_t m = static_cast<int64_t>(g.size());
    for (int64_t i = 0; i < m; ++i) {
      const int64_t j = ((i + shift) % m + m) % m;
      pairs.push_back(absl::StrCat("{", g[static_cast<size_t>(i)], ",", g[static_cast<size_t>(j)], "}"));
    }
  }
  return absl::StrCat("{", absl::StrJoin(pairs, ","), "}");
}

std::string Groups::PositionTable(int64_t num_partitions) const {
  std::vector<int64_t> pos(static_cast<size_t>(num_partitions), 0);
  bool identity = groups.size() == 1;
  for (const auto& g : groups) {
    for (size_t i = 0; i < g.size(); ++i) {
      pos[static_cast<size_t>(g[i])] = static_cast<int64_t>(i);
      identity &= g[i] == static_cast<int64_t>(i);
    }
  }
  return identity ? "" : absl::StrCat("{", IntList(pos), "}");
}

namespace {

// ---------------------------------------------------------------------------------------------
// Replica groups.

// iota(prod(dims)) reshaped to dims, transposed by perm, flattened.
std::vector<int64_t> IotaTransposed(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& perm) {
  const size_t r = dims.size();
  std::vector<int64_t> out_dims(r), strides(r, 1);
  for (size_t i = r; i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  for (size_t j = 0; j < r; ++j) out_dims[j] = dims[static_cast<size_t>(perm[j])];
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> out;
  std::vector<int64_t> idx(r, 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t src = 0;
    for (size_t j = 0; j < r; ++j) src += idx[j] * strides[static_cast<size_t>(perm[j])];
    out.push_back(src);
    for (size_t j = r; j-- > 0;) {
      if (++idx[j] < out_dims[j]) break;
      idx[j] = 0;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Dots.

enum class Role { kContract, kFree, kBatch };

struct DimClass {
  Role role = Role::kFree;
  int64_t size = 1;
};

// A dot as classes of dims: a batch or contracting class appears on both sides, a free class on
// one side. lhs/rhs list the class of each operand dim in order.
struct DotPlan {
  std::vector<DimClass> cls;
  std::vector<int> side[2];
  std::vector<int> batch_order;     // batch classes in the order of *_batch_dims
  std::vector<int> contract_order;  // contracting classes in the order of *_contracting_dims

  std::vector<int64_t> Dims(int s) const {
    std::vector<int64_t> d;
    for (int c : side[s]) d.push_back(cls[static_cast<size_t>(c)].size);
    return d;
  }
  int64_t Pos(int s, int c) const {
    for (size_t i = 0; i < side[s].size(); ++i) {
      if (side[s][i] == c) return static_cast<int64_t>(i);
    }
    return -1;
  }
  // Output dims: batch classes (in batch_order), then lhs free, then rhs free (operand order).
  std::vector<int> OutClasses() const {
    std::vector<int> o = batch_order;
    for (int s = 0; s < 2; ++s) {
      for (int c : side[s]) {
        if (cls[static_cast<size_t>(c)].role == Role::kFree) o.push_back(c);
      }
    }
    return o;
  }
  std::vector<int64_t> OutDims() const {
    std::vector<int64_t> d;
    for (int c : OutClasses()) d.push_back(cls[static_cast<size_t>(c)].size);
    return d;
  }
  std::string Attrs() const {
    std::vector<int64_t> lb, rb, lc, rc;
    for (int c : batch_order) {
      lb.push_back(Pos(0, c));
      rb.push_back(Pos(1, c));
    }
    for (int c : contract_order) {
      lc.push_back(Pos(0, c));
      rc.push_back(Pos(1, c));
    }
    std::string s;
    if (!lb.empty()) absl::StrAppend(&s, "lhs_batch_dims={", IntList(lb), "}, ");
    absl::StrAppend(&s, "lhs_contracting_dims={", IntList(lc), "}, ");
    if (!rb.empty()) absl::StrAppend(&s, "rhs_batch_dims={", IntList(rb), "}, ");
    absl::StrAppend(&s, "rhs_contracting_dims={", IntList(rc), "}");
    return s;
  }
};

const char* RoleName(Role r) {
  switch (r) {
    case Role::kContract: return "contracting";
    case Role::kFree: return "free";
    case Role::kBatch: return "batch";
  }
  return "?";
}

int64_t Product(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// ---------------------------------------------------------------------------------------------
// The generator.

class Gen : public MotifContext {
 public:
  Gen(ChoiceSource& c, const GenOptions& o) : c_(c), o_(o) {}

  // MotifContext.
  ChoiceSource& choices() override { return c_; }
  HloTextBuilder& builder() override { return b_; }
  const GenOptions& options() const override { return o_; }
  int64_t num_partitions() const override { return P_; }
  Val Operand(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
              int view_percent, std::string* desc) override {
    return Operand(wide, dims, fp8_percent, view_percent, desc, 0);
  }
  void AddOutput(const Val& v) override { outputs_.push_back(v); }
  void AddMotif(const std::string& line) override { motifs_.push_back(line); }

  GeneratedProgram Run(const std::string& name) {
    // P: rings of 2, 3, 4, 5 and 8, and 6 for sub-groups of 2 and 3.
    static const int64_t kParts[] = {4, 2, 3, 5, 6, 8};
    P_ = kParts[c_.Weighted({25, 14, 12, 10, 9, 30})];
    const int motifs = 1 + static_cast<int>(c_.Below(static_cast<uint64_t>(o_.max_motifs)));
    for (int m = 0; m < motifs; ++m) {
      b_.set_prefix(motifs == 1 ? "" : absl::StrCat("m", m, "."));
      fp8_model_ = c_.Percent(35);
      switch (c_.Weighted({36, 27, 6, 9, 5, 4, 3, o_.xla_loops ? 14 : 0})) {
        case 0: MotifAllGather(); break;
        case 1: MotifReduceScatter(); break;
        case 2: MotifAllReduce(); break;
        case 3: MotifAllToAll(); break;
        case 4: MotifPermute(); break;
        case 5: MotifDotMerger(); break;
        case 6: MotifElementwise(); break;
        default: MotifXlaLoop(*this); break;
      }
    }
    b_.set_prefix("");
    fp8_model_ = false;
    const bool tuple_root = outputs_.size() > 1 || c_.Percent(20);
    GeneratedProgram p;
    p.name = name;
    p.num_partitions = P_;
    p.motifs = motifs_;
    p.text = b_.Module(name, P_, outputs_, tuple_root,
                       absl::StrCat("weave-fuzz program: ", absl::StrJoin(motifs_, "; ")));
    return p;
  }

 private:
  // ---- sizes and types ----
  int64_t Size() override {
    static const int64_t kSizes[] = {4, 2, 8, 3, 1, 6, 16, 5, 12};
    return kSizes[c_.Weighted({20, 16, 16, 10, 6, 10, 8, 6, 8})];
  }
  int64_t Block() override {
    static const int64_t kBlocks[] = {2, 1, 4, 3, 8};
    return kBlocks[c_.Weighted({30, 15, 30, 15, 10})];
  }
  std::string Wide() override {
    static const char* kWide[] = {"bf16", "f32", "f16"};
    return kWide[c_.Weighted({55, 30, 15})];
  }
  std::string Fp8() { return c_.Weighted({70, 30}) == 0 ? "f8e4m3fn" : "f8e5m2"; }
  // The dot result type for operands of type `wide`.
  std::string ResultType(const std::string& wide) override {
    if (wide == "f32") return "f32";
    return c_.Weighted({70, 30}) == 0 ? wide : "f32";
  }

  // A ring size dividing P: P itself most of the time.
  int64_t Ring() override {
    std::vector<int64_t> divs;
    for (int64_t d = 2; d < P_; ++d) {
      if (P_ % d == 0) divs.push_back(d);
    }
    if (divs.empty() || c_.Weighted({60, 40}) == 0) return P_;
    return c_.Pick(divs);
  }

  Groups MakeGroups(int64_t n, bool allow_empty, bool allow_channel_only) override {
    Groups g;
    g.n = n;
    const int64_t G = P_ / n;
    g.global_ids = !allow_channel_only || c_.Weighted({75, 25}) == 0;
    int form = static_cast<int>(c_.Weighted({30, 22, 14, 12, 10, 8, 4}));
    if (G == 1 && (form == 2 || form == 3)) form = 0;
    if (form == 5 && P_ != 8) form = 1;
    if (form == 6 && (G != 1 || g.global_ids || !allow_empty)) form = 0;
    std::vector<int64_t> flat;
    switch (form) {
      case 0:  // contiguous list
      case 1:  // contiguous iota
        flat.resize(static_cast<size_t>(P_));
        std::iota(flat.begin(), flat.end(), 0);
        g.text = form == 1 ? absl::StrCat("[", G, ",", n, "]<=[", P_, "]") : "";
        g.form = form == 1 ? "iota" : "list";
        break;
      case 2:  // strided list
      case 3:  // strided iota
        flat = IotaTransposed({n, G}, {1, 0});
        g.text = form == 3 ? absl::StrCat("[", G, ",", n, "]<=[", n, ",", G, "]T(1,0)") : "";
        g.form = form == 3 ? "iota-strided" : "list-strided";
        break;
      case 4: {  // shuffled members
        flat.resize(static_cast<size_t>(P_));
        std::iota(flat.begin(), flat.end(), 0);
        if (c_.Percent(50)) flat = IotaTransposed({n, G}, {1, 0});
        for (int64_t k = 0; k < G; ++k) {
          std::vector<int64_t> grp(flat.begin() + k * n, flat.begin() + (k + 1) * n);
          c_.Shuffle(grp);
          std::copy(grp.begin(), grp.end(), flat.begin() + k * n);
        }
        g.form = "list-shuffled";
        break;
      }
      case 5: {  // 3-d iota over 8 = 2x2x2 or 2x4
        std::vector<int64_t> dims = c_.Percent(50) ? std::vector<int64_t>{2, 2, 2}
                                                   : std::vector<int64_t>{2, 4};
        std::vector<int64_t> perm(dims.size());
        std::iota(perm.begin(), perm.end(), 0);
        c_.Shuffle(perm);
        bool identity = true;
        for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
        flat = IotaTransposed(dims, perm);
        g.text = identity ? absl::StrCat("[", G, ",", n, "]<=[", P_, "]")
                          : absl::StrCat("[", G, ",", n, "]<=[", IntList(dims), "]T(",
                                         IntList(perm), ")");
        g.form = "iota-3d";
        break;
      }
      default:  // empty: one group of every partition
        flat.resize(static_cast<size_t>(P_));
        std::iota(flat.begin(), flat.end(), 0);
        g.text = "{}";
        g.form = "empty";
        break;
    }
    for (int64_t k = 0; k < G; ++k) {
      g.groups.emplace_back(flat.begin() + k * n, flat.begin() + (k + 1) * n);
    }
    if (g.text.empty()) g.text = GroupsListText(g.groups);
    return g;
  }

  std::string CollectiveAttrs(const Groups& g, const std::string& dims_attr) {
    std::string s = absl::StrCat("channel_id=", b_.NextChannel(), ", replica_groups=", g.text);
    if (!dims_attr.empty()) absl::StrAppend(&s, ", ", dims_attr);
    if (g.global_ids) absl::StrAppend(&s, ", use_global_device_ids=true");
    return s;
  }

  // A data parameter's sharding. Per-partition data ({manual}, or a tile of a tiled sharding)
  // most of the time: an unannotated or {replicated} parameter holds the same value on every
  // partition (XLA's SPMD convention, which the evaluator and the replication analysis follow),
  // which would hide ring-order and block-offset bugs.
  std::string ParamSharding(const std::vector<int64_t>& dims) {
    switch (c_.Weighted({45, 10, 10, 35})) {
      case 0: return "{manual}";
      case 1: return "";
      case 2: return "{replicated}";
      default: {
        if (dims.empty()) return "{replicated}";
        std::vector<int64_t> tiles(dims.size(), 1);
        tiles[static_cast<size_t>(c_.Below(dims.size()))] = P_;
        return absl::StrCat("{devices=[", IntList(tiles), "]<=[", P_, "]}");
      }
    }
  }

  // ---- scales and dequantizations ----

  // A scalar scale of type `wide`. *replicated says whether it is the same on every partition.
  Val ScalarScale(const std::string& wide, bool* replicated) {
    switch (c_.Weighted({60, 15, 12, 9, 4})) {
      case 0:
        *replicated = true;
        return b_.Param(wide, {}, "{replicated}", "scale");
      case 1:
        *replicated = false;  // {manual}: one value per partition
        return b_.Param(wide, {}, "{manual}", "scale");
      case 2: {
        *replicated = true;
        static const char* kLits[] = {"0.5", "2", "1.5", "0.125", "3"};
        return b_.ScalarConstant(wide, kLits[c_.Below(5)], "scale");
      }
      case 3: {  // 1 + 0.25 * partition-id
        *replicated = false;
        Val pid = b_.Op("partition-id", "u32", {}, {}, "", "pid");
        Val f = b_.Op("convert", wide, {}, {pid}, "", "pidf");
        Val q = b_.ScalarConstant(wide, "0.25");
        Val one = b_.ScalarConstant(wide, "1");
        Val m = b_.Op("multiply", wide, {}, {f, q});
        return b_.Op("add", wide, {}, {m, one}, "", "scale");
      }
      default: {  // computed from a replicated value
        *replicated = true;
        Val p = b_.Param(wide, {}, "{replicated}", "scale_in");
        Val a = b_.Op("abs", wide, {}, {p});
        Val h = b_.ScalarConstant(wide, "0.5");
        return b_.Op("add", wide, {}, {a, h}, "", "scale");
      }
    }
  }

  // dequant(q, s) of type `wide` and dims `dims`, in one of the forms of the file comment.
  Val Dequantize(const std::string& wide, const std::vector<int64_t>& dims, std::string* desc) {
    const std::string f8 = Fp8();
    Val q = b_.Param(f8, dims, ParamSharding(dims), "q");
    Val cvt = b_.Op("convert", wide, dims, {q}, "", "dq.cvt");
    bool replicated = true;
    Val bc;
    const bool rowwise = !dims.empty() && c_.Percent(15);
    if (rowwise) {
      const int64_t k = static_cast<int64_t>(c_.Below(dims.size()));
      replicated = c_.Percent(70);
      Val s = b_.Param(wide, {dims[static_cast<size_t>(k)]}, replicated ? "{replicated}" : "{manual}",
                       "scale");
      bc = b_.Op("broadcast", wide, dims, {s}, absl::StrCat("dimensions={", k, "}"), "dq.bcast");
    } else {
      Val s = ScalarScale(wide, &replicated);
      bc = b_.Op("broadcast", wide, dims, {s}, "dimensions={}", "dq.bcast");
    }
    const size_t form = c_.Weighted({50, 25, 25});
    Val r;
    if (form == 0) {
      r = b_.Op("multiply", wide, dims, {cvt, bc}, "", "dq");
    } else if (form == 1) {
      r = b_.Op("multiply", wide, dims, {bc, cvt}, "", "dq");
    } else {
      r = b_.Op("divide", wide, dims, {cvt, bc}, "", "dq");
    }
    *desc = absl::StrCat(f8, form == 2 ? "/" : "*", rowwise ? "row" : "scalar",
                         replicated ? "" : "(pd)");
    return r;
  }

  // dequant(q, s) as FP8 models write it: E4M3FN (or E5M2) data, a replicated scalar scale
  // (parameter or constant), any of the three forms.
  Val ModelDequantize(const std::string& wide, const std::vector<int64_t>& dims, std::string* desc) {
    const std::string f8 = c_.Percent(15) ? "f8e5m2" : "f8e4m3fn";
    Val q = b_.Param(f8, dims, ParamSharding(dims), "q");
    Val cvt = b_.Op("convert", wide, dims, {q}, "", "dq.cvt");
    Val s = c_.Percent(80) ? b_.Param(wide, {}, "{replicated}", "scale")
                           : b_.ScalarConstant(wide, c_.Percent(50) ? "0.5" : "2", "scale");
    Val bc = b_.Op("broadcast", wide, dims, {s}, "dimensions={}", "dq.bcast");
    const size_t form = c_.Weighted({50, 25, 25});
    Val r = form == 0   ? b_.Op("multiply", wide, dims, {cvt, bc}, "", "dq")
            : form == 1 ? b_.Op("multiply", wide, dims, {bc, cvt}, "", "dq")
                        : b_.Op("divide", wide, dims, {cvt, bc}, "", "dq");
    *desc = absl::StrCat(f8, form == 2 ? "/" : "*", "model");
    return r;
  }

  // A value of type `wide` and dims `dims`: a parameter, a dequantization, an unscaled convert
  // of FP8, or a convert from another wide type. *desc says which.
  Val Leaf(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
           std::string* desc) {
    const int rest = 100 - fp8_percent;
    switch (c_.Weighted({fp8_percent, rest * 8 / 10, rest / 10, rest / 10})) {
      case 0: return Dequantize(wide, dims, desc);
      case 1:
        *desc = "wide";
        return b_.Param(wide, dims, ParamSharding(dims), "x");
      case 2: {
        *desc = "convert(f8)";
        Val q = b_.Param(Fp8(), dims, ParamSharding(dims), "q");
        return b_.Op("convert", wide, dims, {q}, "", "cvt");
      }
      default: {
        const std::string other = wide == "f32" ? "bf16" : "f32";
        *desc = absl::StrCat("convert(", other, ")");
        Val p = b_.Param(other, dims, ParamSharding(dims), "x");
        return b_.Op("convert", wide, dims, {p}, "", "cvt");
      }
    }
  }

  // A value of `dims`, built from a Leaf through 0-2 views chosen backwards (each view's
  // operand shape is derived from its result shape).
  Val Operand(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
              int view_percent, std::string* desc, int depth) {
    if (fp8_model_) return ModelDequantize(wide, dims, desc);
    if (depth >= 2 || !c_.Percent(view_percent)) return Leaf(wide, dims, fp8_percent, desc);
    const int64_t rank = static_cast<int64_t>(dims.size());
    switch (c_.Weighted({25, 25, 12, 10, 12, 8, 8})) {
      case 0: {  // transpose: out[i] = in[perm[i]]
        if (rank < 2) break;
        std::vector<int64_t> perm(static_cast<size_t>(rank));
        std::iota(perm.begin(), perm.end(), 0);
        c_.Shuffle(perm);
        std::vector<int64_t> in(static_cast<size_t>(rank));
        for (int64_t i = 0; i < rank; ++i) in[static_cast<size_t>(perm[static_cast<size_t>(i)])] = dims[static_cast<size_t>(i)];
        Val v = Operand(wide, in, fp8_percent, view_percent, desc, depth + 1);
        *desc += ">transpose";
        return b_.Op("transpose", wide, dims, {v}, absl::StrCat("dimensions={", IntList(perm), "}"));
      }
      case 1:    // reshape
      case 2: {  // bitcast (a reshape of a row-major array)
        std::vector<int64_t> in = ReshapeSource(dims);
        if (in == dims) break;
        Val v = Operand(wide, in, fp8_percent, view_percent, desc, depth + 1);
        const bool bitcast = c_.Percent(30);
        *desc += bitcast ? ">bitcast" : ">reshape";
        return b_.Op(bitcast ? "bitcast" : "reshape", wide, dims, {v});
      }
      case 3: {  // copy
        Val v = Operand(wide, dims, fp8_percent, view_percent, desc, depth + 1);
        *desc += ">copy";
        return b_.Op("copy", wide, dims, {v});
      }
      case 4: {  // slice of a larger value
        if (rank == 0) break;
        std::vector<int64_t> in = dims;
        const size_t k = static_cast<size_t>(c_.Below(static_cast<uint64_t>(rank)));
        const int64_t extra = 1 + static_cast<int64_t>(c_.Below(3));
        const bool strided = c_.Percent(25);
        in[k] = strided ? dims[k] * 2 : dims[k] + extra;
        Val v = Operand(wide, in, fp8_percent, view_percent, desc, depth + 1);
        std::vector<std::string> ranges;
        for (size_t i = 0; i < dims.size(); ++i) {
          if (i != k) {
            ranges.push_back(absl::StrCat("[0:", dims[i], (strided ? ":1" : ""), "]"));
          } else if (strided) {
            ranges.push_back(absl::StrCat("[0:", in[i], ":2]"));
          } else {
            const int64_t start = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(extra + 1)));
            ranges.push_back(absl::StrCat("[", start, ":", start + dims[i], "]"));
          }
        }
        *desc += ">slice";
        return b_.Op("slice", wide, dims, {v}, absl::StrCat("slice={", absl::StrJoin(ranges, ", "), "}"));
      }
      case 5: {  // convert from another wide type
        const std::string other = wide == "f32" ? "bf16" : "f32";
        Val v = Operand(other, dims, fp8_percent, view_percent, desc, depth + 1);
        *desc += absl::StrCat(">convert");
        return b_.Op("convert", wide, dims, {v});
      }
      default: {  // broadcast along one dim
        if (rank == 0) break;
        const int64_t k = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(rank)));
        std::vector<int64_t> in, bdims;
        for (int64_t i = 0; i < rank; ++i) {
          if (i == k) continue;
          in.push_back(dims[static_cast<size_t>(i)]);
          bdims.push_back(i);
        }
        Val v = Operand(wide, in, fp8_percent, view_percent, desc, depth + 1);
        *desc += ">broadcast";
        return b_.Op("broadcast", wide, dims, {v}, absl::StrCat("dimensions={", IntList(bdims), "}"));
      }
    }
    return Leaf(wide, dims, fp8_percent, desc);
  }

  // A shape with the same element count that reshapes to `dims`: two adjacent dims merged, one
  // split in two, or a unit dim added or removed.
  std::vector<int64_t> ReshapeSource(const std::vector<int64_t>& dims) {
    std::vector<int64_t> in = dims;
    switch (c_.Weighted({40, 35, 15, 10})) {
      case 0:
        if (dims.size() >= 2) {
          const size_t i = static_cast<size_t>(c_.Below(dims.size() - 1));
          in[i] *= in[i + 1];
          in.erase(in.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        }
        break;
      case 1:
        for (size_t i = 0; i < dims.size(); ++i) {
          for (int64_t f : {2, 3}) {
            if (dims[i] % f == 0 && dims[i] > f && in == dims) {
              in[i] = f;
              in.insert(in.begin() + static_cast<std::ptrdiff_t>(i) + 1, dims[i] / f);
            }
          }
        }
        break;
      case 2:
        in.insert(in.begin() + static_cast<std::ptrdiff_t>(c_.Below(dims.size() + 1)), 1);
        break;
      default:
        for (size_t i = 0; i < dims.size(); ++i) {
          if (dims[i] == 1) {
            in.erase(in.begin() + static_cast<std::ptrdiff_t>(i));
            break;
          }
        }
        break;
    }
    return in;
  }

  // A forward layout change of `v` (transpose, reshape, copy, bitcast) keeping `keep_dim`'s
  // extent on some dim; returns the new value and the new position of keep_dim (-1 to ignore).
  Val ForwardView(const Val& v, int64_t* keep_dim) {
    const int64_t rank = static_cast<int64_t>(v.dims.size());
    switch (c_.Weighted({40, 35, 25})) {
      case 0: {
        if (rank < 2) break;
        std::vector<int64_t> perm(static_cast<size_t>(rank));
        std::iota(perm.begin(), perm.end(), 0);
        c_.Shuffle(perm);
        std::vector<int64_t> out;
        for (int64_t p : perm) out.push_back(v.dims[static_cast<size_t>(p)]);
        if (*keep_dim >= 0) {
          for (int64_t j = 0; j < rank; ++j) {
            if (perm[static_cast<size_t>(j)] == *keep_dim) {
              *keep_dim = j;
              break;
            }
          }
        }
        return b_.Op("transpose", v.type, out, {v}, absl::StrCat("dimensions={", IntList(perm), "}"));
      }
      case 1: {  // reshape that splits or merges dims other than keep_dim
        std::vector<int64_t> out;
        int64_t new_keep = -1;
        bool merged = false;
        for (int64_t i = 0; i < rank; ++i) {
          const int64_t d = v.dims[static_cast<size_t>(i)];
          if (i == *keep_dim) {
            new_keep = static_cast<int64_t>(out.size());
            out.push_back(d);
          } else if (!merged && i + 1 < rank && i + 1 != *keep_dim) {
            out.push_back(d * v.dims[static_cast<size_t>(i + 1)]);
            merged = true;
            ++i;
          } else {
            out.push_back(d);
          }
        }
        if (!merged) break;
        *keep_dim = *keep_dim >= 0 ? new_keep : -1;
        return b_.Op(c_.Percent(25) ? "bitcast" : "reshape", v.type, out, {v});
      }
      default:
        return b_.Op("copy", v.type, v.dims, {v});
    }
    return b_.Op("copy", v.type, v.dims, {v});
  }

  // ---- dots ----

  // A dot plan around a fixed operand of dims `x` on side `side`. `forced` (if >= 0) gets role
  // `forced_role`. The other side gets matching batch/contracting dims and 0-2 free dims, in a
  // random order.
  DotPlan PlanAround(const std::vector<int64_t>& x, int side, int64_t forced, Role forced_role,
                     int64_t other_free_limit) {
    DotPlan p;
    std::vector<int> mine;
    for (size_t i = 0; i < x.size(); ++i) {
      Role r;
      if (static_cast<int64_t>(i) == forced) {
        r = forced_role;
      } else {
        r = static_cast<Role>(c_.Weighted({40, 45, 15}));
      }
      p.cls.push_back({r, x[i]});
      mine.push_back(static_cast<int>(i));
    }
    bool any_contract = false;
    for (const DimClass& d : p.cls) any_contract |= d.role == Role::kContract;
    if (!any_contract && !c_.Percent(5)) {
      std::vector<int> cand;
      for (size_t i = 0; i < x.size(); ++i) {
        if (static_cast<int64_t>(i) != forced) cand.push_back(static_cast<int>(i));
      }
      if (!cand.empty()) p.cls[static_cast<size_t>(c_.Pick(cand))].role = Role::kContract;
    }
    std::vector<int> other;
    for (size_t i = 0; i < p.cls.size(); ++i) {
      if (p.cls[i].role != Role::kFree) other.push_back(static_cast<int>(i));
    }
    const int64_t nfree = static_cast<int64_t>(c_.Weighted({60, 25, 15}));
    const int64_t free_count = nfree == 0 ? 1 : (nfree == 1 ? 2 : 0);
    int64_t budget = other_free_limit;
    for (int64_t k = 0; k < free_count; ++k) {
      int64_t s = Size();
      while (s > 1 && s > budget) s /= 2;
      budget = std::max<int64_t>(1, budget / std::max<int64_t>(s, 1));
      p.cls.push_back({Role::kFree, s});
      other.push_back(static_cast<int>(p.cls.size()) - 1);
    }
    c_.Shuffle(other);
    p.side[side] = mine;
    p.side[1 - side] = other;
    for (int c : mine) {
      if (p.cls[static_cast<size_t>(c)].role == Role::kBatch) p.batch_order.push_back(c);
      if (p.cls[static_cast<size_t>(c)].role == Role::kContract) p.contract_order.push_back(c);
    }
    if (c_.Percent(20)) c_.Shuffle(p.batch_order);
    if (c_.Percent(20)) c_.Shuffle(p.contract_order);
    return p;
  }

  // A plan reading `x` (side `side`) and an existing value of dims `y` on the other side: each
  // dim of y matches an unused dim of x of the same extent (batch or contracting) or is free.
  std::optional<DotPlan> FitAround(const std::vector<int64_t>& x, int side,
                                   const std::vector<int64_t>& y) {
    DotPlan p;
    for (int64_t s : x) p.cls.push_back({Role::kFree, s});
    std::vector<int> other(y.size(), -1);
    std::vector<bool> used(x.size(), false);
    std::vector<size_t> order(y.size());
    std::iota(order.begin(), order.end(), 0);
    c_.Shuffle(order);
    bool contract = false;
    for (size_t j : order) {
      std::vector<size_t> cand;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!used[i] && x[i] == y[j]) cand.push_back(i);
      }
      if (cand.empty() || c_.Percent(25)) continue;
      const size_t i = c_.Pick(cand);
      used[i] = true;
      const Role r = c_.Percent(20) ? Role::kBatch : Role::kContract;
      contract |= r == Role::kContract;
      p.cls[i].role = r;
      other[j] = static_cast<int>(i);
    }
    if (!contract) return std::nullopt;
    for (size_t j = 0; j < y.size(); ++j) {
      if (other[j] < 0) {
        p.cls.push_back({Role::kFree, y[j]});
        other[j] = static_cast<int>(p.cls.size()) - 1;
      }
    }
    for (size_t i = 0; i < x.size(); ++i) p.side[side].push_back(static_cast<int>(i));
    p.side[1 - side] = other;
    for (int c : p.side[side]) {
      if (p.cls[static_cast<size_t>(c)].role == Role::kBatch) p.batch_order.push_back(c);
      if (p.cls[static_cast<size_t>(c)].role == Role::kContract) p.contract_order.push_back(c);
    }
    if (Product(p.OutDims()) > o_.max_elements) return std::nullopt;
    return p;
  }

  Val Dot(const DotPlan& p, const Val& lhs, const Val& rhs, const std::string& result_type) {
    return b_.Op("dot", result_type, p.OutDims(), {lhs, rhs}, p.Attrs(), "dot");
  }

  // ---- epilogues ----

  Val Epilogue(Val d) override {
    const std::vector<int64_t> dims = d.dims;
    const int64_t rank = static_cast<int64_t>(dims.size());
    switch (c_.Weighted({45, 10, 8, 8, 7, 10, 7, 5})) {
      case 0:
        return d;
      case 1: {  // bias along the last dim
        if (rank == 0) return d;
        Val bias = b_.Param(d.type, {dims.back()}, c_.Percent(50) ? "{replicated}" : "{manual}", "bias");
        Val bb = b_.Op("broadcast", d.type, dims, {bias}, absl::StrCat("dimensions={", rank - 1, "}"));
        return b_.Op("add", d.type, dims, {d, bb}, "", "biased");
      }
      case 2: {  // ReLU
        Val z = b_.Splat(d.type, "0", dims);
        return b_.Op("maximum", d.type, dims, {d, z}, "", "relu");
      }
      case 3: {  // alpha
        static const char* kAlpha[] = {"2", "0.5", "-1.5"};
        Val a = b_.Splat(d.type, kAlpha[c_.Below(3)], dims);
        return b_.Op("multiply", d.type, dims, c_.Percent(50) ? std::vector<Val>{d, a}
                                                              : std::vector<Val>{a, d}, "", "scaled");
      }
      case 4: {  // convert
        const std::string t = d.type == "f32" ? "bf16" : "f32";
        return b_.Op("convert", t, dims, {d}, "", "cvt_out");
      }
      case 5: {  // FP8 output (XLA's pattern), sometimes with its amax
        const bool e5 = c_.Percent(25);
        const std::string f8 = e5 ? "f8e5m2" : "f8e4m3fn";
        const char* max = e5 ? "57344" : "448";
        Val x = d;
        if (d.type != "f32" && d.type != "bf16" && d.type != "f16") return d;
        if (c_.Percent(60)) {
          Val s = b_.Param(d.type, {}, "{replicated}", "out_scale");
          Val sb = b_.Op("broadcast", d.type, dims, {s}, "dimensions={}");
          x = b_.Op(c_.Percent(70) ? "divide" : "multiply", d.type, dims, {d, sb}, "", "out_scaled");
        }
        if (c_.Percent(40) && rank > 0) {
          Val z = b_.ScalarConstant(d.type, "0");
          Val a = b_.Op("abs", d.type, dims, {d});
          std::vector<int64_t> all(static_cast<size_t>(rank));
          std::iota(all.begin(), all.end(), 0);
          outputs_.push_back(b_.Op("reduce", d.type, {}, {a, z},
                                   absl::StrCat("dimensions={", IntList(all), "}, to_apply=",
                                                b_.Reducer("maximum", d.type)),
                                   "amax"));
        }
        Val lo = b_.Splat(d.type, absl::StrCat("-", max), dims);
        Val hi = b_.Splat(d.type, max, dims);
        Val cl = b_.Op("clamp", d.type, dims, {lo, x, hi}, "", "clamped");
        return b_.Op("convert", f8, dims, {cl}, "", "out_f8");
      }
      case 6: {  // layout change
        int64_t keep = -1;
        return ForwardView(d, &keep);
      }
      default:
        return b_.Op(c_.Percent(50) ? "negate" : "abs", d.type, dims, {d});
    }
  }

  // ---- motifs ----

  // dot(all-gather(x), w) with 1-3 dots on the gathered value.
  void MotifAllGather() {
    const int64_t n = Ring();
    Groups g = MakeGroups(n, true, true);
    const std::string wide = Wide();
    // The gathered operand (global dims): rank 2-3, one dim N blocks long.
    const int64_t rank = 2 + static_cast<int64_t>(c_.Weighted({55, 35, 10}));
    std::vector<int64_t> global;
    for (int64_t i = 0; i < rank; ++i) global.push_back(Size());
    const int64_t gd = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(rank)));
    global[static_cast<size_t>(gd)] = n * Block();
    while (Product(global) > o_.max_elements / 2) {
      auto it = std::max_element(global.begin(), global.end());
      if (std::distance(global.begin(), it) == gd) {
        global[static_cast<size_t>(gd)] = n;
        if (Product(global) <= o_.max_elements / 2) break;
        for (size_t i = 0; i < global.size(); ++i) {
          if (static_cast<int64_t>(i) != gd && global[i] > 1) global[i] = std::max<int64_t>(1, global[i] / 2);
        }
      } else {
        *it = std::max<int64_t>(1, *it / 2);
      }
    }
    std::vector<int64_t> local = global;
    local[static_cast<size_t>(gd)] /= n;
    std::string xdesc;
    // FP8 in front of the all-gather: the dequantization is its operand (the handler's FP8
    // shift needs that) unless views come between.
    const int view_percent = c_.Percent(80) ? 0 : 60;
    Val x = Operand(wide, local, 55, view_percent, &xdesc);
    pool_.push_back(x);
    Val xg = AllGather(x, g, gd, global);
    Val src = xg;
    if (c_.Percent(6)) {  // a view between the all-gather and its dots (not windowed)
      int64_t keep = -1;
      src = ForwardView(xg, &keep);
    }
    const int ndots = 1 + static_cast<int>(c_.Weighted({45, 35, 20}));
    std::vector<std::string> roles;
    for (int k = 0; k < ndots; ++k) {
      if (k > 0 && c_.Percent(5)) {  // a consumer that is not a dot
        outputs_.push_back(b_.Op("negate", src.type, src.dims, {src}, "", "ag_user"));
        roles.push_back("other");
        continue;
      }
      roles.push_back(GatheredDot(src, src.name == xg.name ? gd : -1, wide));
    }
    std::string extra;
    if (c_.Percent(12)) {  // the same shard gathered again, on another dim or other groups
      const int64_t gd2 = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(rank)));
      const int64_t n2 = c_.Percent(50) ? n : Ring();
      Groups g2 = MakeGroups(n2, true, true);
      std::vector<int64_t> global2 = local;
      global2[static_cast<size_t>(gd2)] *= n2;
      if (Product(global2) <= o_.max_elements) {
        Val xg2 = AllGather(x, g2, gd2, global2);
        extra = absl::StrCat(" again(dim=", gd2, ",N=", n2, ",", g2.form, ")=",
                             GatheredDot(xg2, gd2, wide));
      }
    }
    motifs_.push_back(absl::StrCat("ag N=", n, " P=", P_, " ", g.form,
                                   g.global_ids ? "" : " channel-only", " dim=", gd, " x=", xdesc,
                                   " ", wide, " dots=[", absl::StrJoin(roles, ","), "]", extra));
  }

  Val AllGather(const Val& x, const Groups& g, int64_t gd, const std::vector<int64_t>& global) {
    const std::string attrs = CollectiveAttrs(g, absl::StrCat("dimensions={", gd, "}"));
    if (c_.Percent(12) && o_.async_forms) {
      const std::string shape = absl::StrCat("(", x.Shape(), ", ", ShapeText(x.type, global), ")");
      std::string s = b_.OpRaw("all-gather-start", shape, {x.name}, attrs, "ags");
      return b_.Op("all-gather-done", x.type, global, {Val{s, x.type, {}}}, "", "ag");
    }
    return b_.Op("all-gather", x.type, global, {x}, attrs, "ag");
  }

  // One dot reading the gathered value `xg` (gathered on dim gd, or -1 after a view), with a
  // fresh weight, an earlier shard (stationary operand), or a partition-dependent one.
  std::string GatheredDot(const Val& xg, int64_t gd, const std::string& wide) {
    const int side = static_cast<int>(c_.Below(2));
    std::optional<DotPlan> plan;
    Val w;
    std::string wdesc;
    if (!pool_.empty() && c_.Percent(15)) {
      const Val& y = c_.Pick(pool_);
      if (y.type == xg.type) {
        plan = FitAround(xg.dims, side, y.dims);
        if (plan) {
          w = y;
          wdesc = "pool";
        }
      }
    }
    if (!plan) {
      Role forced = static_cast<Role>(c_.Weighted({40, 40, 20}));
      plan = PlanAround(xg.dims, side, gd, forced,
                        std::max<int64_t>(1, o_.max_elements / std::max<int64_t>(1, Product(xg.dims))));
      w = Operand(wide, plan->Dims(1 - side), 55, 15, &wdesc);
    }
    const std::string rt = ResultType(wide);
    Val d = side == 0 ? Dot(*plan, xg, w, rt) : Dot(*plan, w, xg, rt);
    outputs_.push_back(Epilogue(d));
    const std::string role = gd >= 0 ? RoleName(plan->cls[static_cast<size_t>(gd)].role) : "view";
    return absl::StrCat(side == 0 ? "lhs:" : "rhs:", role, "/w=", wdesc, "->", rt);
  }

  // reduce-scatter(dot(a, b)) on any output dim, or dynamic-slice(all-reduce(dot)).
  void MotifReduceScatter() {
    const int64_t n = Ring();
    Groups g = MakeGroups(n, true, true);
    const std::string wide = Wide();
    const int64_t rank = 1 + static_cast<int64_t>(c_.Weighted({40, 45, 15}));
    std::vector<int64_t> x;
    for (int64_t i = 0; i < rank; ++i) x.push_back(Size());
    DotPlan p = PlanAround(x, 0, -1, Role::kFree, 64);
    std::vector<int> out = p.OutClasses();
    if (out.empty()) {  // scalar result: give the rhs a free dim
      p.cls.push_back({Role::kFree, n});
      p.side[1].push_back(static_cast<int>(p.cls.size()) - 1);
      out = p.OutClasses();
    }
    const int64_t d = static_cast<int64_t>(c_.Below(out.size()));
    p.cls[static_cast<size_t>(out[static_cast<size_t>(d)])].size = n * Block();
    for (int iter = 0; iter < 8; ++iter) {
      const int64_t worst = std::max({Product(p.Dims(0)), Product(p.Dims(1)), Product(p.OutDims())});
      if (worst <= o_.max_elements) break;
      for (size_t c = 0; c < p.cls.size(); ++c) {
        if (static_cast<int>(c) != out[static_cast<size_t>(d)] && p.cls[c].size > 1) {
          p.cls[c].size = std::max<int64_t>(1, p.cls[c].size / 2);
        }
      }
      if (iter == 7) p.cls[static_cast<size_t>(out[static_cast<size_t>(d)])].size = n;
    }
    std::string ldesc, rdesc;
    Val lhs = Operand(wide, p.Dims(0), 55, 15, &ldesc);
    Val rhs = Operand(wide, p.Dims(1), 55, 15, &rdesc);
    const std::string rt = ResultType(wide);
    Val dot = Dot(p, lhs, rhs, rt);
    const std::string role = RoleName(p.cls[static_cast<size_t>(out[static_cast<size_t>(d)])].role);
    Val src = dot;
    std::string between;
    if (c_.Percent(5)) {  // something between the dot and the reduce-scatter (not windowed)
      Val two = b_.Splat(rt, "2", dot.dims);
      src = b_.Op("multiply", rt, dot.dims, {dot, two}, "", "pre_rs");
      between = " pre-op";
    }
    if (c_.Percent(5)) {  // the full dot has another user
      outputs_.push_back(b_.Op("negate", rt, dot.dims, {dot}, "", "dot_user"));
      between += " dot-user";
    }
    std::vector<int64_t> scattered = src.dims;
    scattered[static_cast<size_t>(d)] /= n;
    const bool sum = !c_.Percent(4);
    const std::string red = b_.Reducer(sum ? "add" : "maximum", rt);
    Val r;
    std::string form;
    switch (c_.Weighted({62, 22, o_.async_forms ? 8 : 0, o_.async_forms ? 8 : 0})) {
      case 0:
        form = "reduce-scatter";
        r = b_.Op("reduce-scatter", rt, scattered, {src},
                  absl::StrCat(CollectiveAttrs(g, absl::StrCat("dimensions={", d, "}")),
                               ", to_apply=", red),
                  "rs");
        break;
      case 1:
        form = "all-reduce+dynamic-slice";
        r = AllReduceDynamicSlice(src, g, d, red);
        break;
      case 2: {
        form = "reduce-scatter-start";
        const std::string shape = absl::StrCat("((", src.Shape(), "), ", ShapeText(rt, scattered), ")");
        std::string s = b_.OpRaw("reduce-scatter-start", shape, {src.name},
                                 absl::StrCat(CollectiveAttrs(g, absl::StrCat("dimensions={", d, "}")),
                                              ", to_apply=", red),
                                 "rss");
        r = b_.Op("reduce-scatter-done", rt, scattered, {Val{s, rt, {}}}, "", "rs");
        break;
      }
      default: {
        form = "async-start(reduce-scatter)";
        const std::string body = absl::StrCat(
            "  p = ", src.Shape(), " parameter(0)\n  ROOT r = ", ShapeText(rt, scattered),
            " reduce-scatter(p), ", CollectiveAttrs(g, absl::StrCat("dimensions={", d, "}")),
            ", to_apply=", red, "\n");
        const std::string comp = b_.AddComputation("wrapped_reduce_scatter", body, "r");
        const std::string shape = absl::StrCat("((", src.Shape(), "), ", ShapeText(rt, scattered), ")");
        std::string s = b_.OpRaw("async-start", shape, {src.name}, absl::StrCat("calls=", comp), "rss");
        r = b_.Op("async-done", rt, scattered, {Val{s, rt, {}}}, "", "rs");
        break;
      }
    }
    outputs_.push_back(Epilogue(r));
    motifs_.push_back(absl::StrCat("rs N=", n, " P=", P_, " ", g.form, g.global_ids ? "" : " channel-only",
                                   " ", form, sum ? "" : "(max)", " dim=", d, "(", role, ")",
                                   " lhs=", ldesc, " rhs=", rdesc, " ", wide, "->", rt, between));
  }

  // dynamic-slice(all-reduce(v)) at block index_in_group(partition) of dim d (XLA's form of a
  // reduce-scatter before its collective pipeliner).
  Val AllReduceDynamicSlice(const Val& v, const Groups& g, int64_t d, const std::string& red) {
    Val ar = b_.Op("all-reduce", v.type, v.dims, {v},
                   absl::StrCat(CollectiveAttrs(g, ""), ", to_apply=", red), "ar");
    const int64_t block = v.dims[static_cast<size_t>(d)] / g.n;
    std::vector<int64_t> table(static_cast<size_t>(P_));
    for (const auto& grp : g.groups) {
      for (size_t i = 0; i < grp.size(); ++i) table[static_cast<size_t>(grp[i])] = static_cast<int64_t>(i) * block;
    }
    Val pid = b_.Op("partition-id", "u32", {}, {}, "", "pid");
    Val off;
    bool identity = true;
    for (int64_t p = 0; p < P_; ++p) identity &= table[static_cast<size_t>(p)] == p * block;
    if (identity && c_.Percent(40)) {
      Val pc = b_.Op("convert", "s32", {}, {pid}, "", "pid_s32");
      Val bc = b_.ScalarConstant("s32", absl::StrCat(block));
      off = b_.Op("multiply", "s32", {}, {pc, bc}, "", "offset");
    } else {
      // A constant carries its literal inside the parentheses.
      const std::string tname = b_.OpRaw("constant", ShapeText("s32", {P_}),
                                         {absl::StrCat("{", IntList(table), "}")}, "", "offset_table");
      Val tv{tname, "s32", {P_}};
      Val ds = b_.Op("dynamic-slice", "s32", {1}, {tv, pid}, "dynamic_slice_sizes={1}", "offset1");
      off = b_.Op("reshape", "s32", {}, {ds}, "", "offset");
    }
    Val zero = b_.ScalarConstant("s32", "0");
    std::vector<Val> ops = {ar};
    std::vector<int64_t> sizes = v.dims;
    sizes[static_cast<size_t>(d)] = block;
    for (size_t i = 0; i < v.dims.size(); ++i) ops.push_back(static_cast<int64_t>(i) == d ? off : zero);
    return b_.Op("dynamic-slice", v.type, sizes, ops,
                 absl::StrCat("dynamic_slice_sizes={", IntList(sizes), "}"), "rs");
  }

  void MotifAllReduce() {
    const int64_t n = Ring();
    Groups g = MakeGroups(n, true, true);
    const std::string wide = Wide();
    std::string desc;
    Val v;
    if (c_.Percent(60)) {
      std::vector<int64_t> x = {Size(), Size()};
      DotPlan p = PlanAround(x, 0, -1, Role::kFree, 64);
      std::string ld, rd;
      Val lhs = Operand(wide, p.Dims(0), 50, 10, &ld);
      Val rhs = Operand(wide, p.Dims(1), 50, 10, &rd);
      v = Dot(p, lhs, rhs, ResultType(wide));
      desc = "dot";
    } else {
      v = Operand(wide, {Size(), Size()}, 40, 30, &desc);
    }
    const std::string attrs = absl::StrCat(CollectiveAttrs(g, ""), ", to_apply=", b_.Reducer("add", v.type));
    Val r;
    const bool async = c_.Percent(25) && o_.async_forms;
    if (async) {
      Val s = b_.Op("all-reduce-start", v.type, v.dims, {v}, attrs, "ars");
      r = b_.Op("all-reduce-done", v.type, v.dims, {s}, "", "ar");
    } else {
      r = b_.Op("all-reduce", v.type, v.dims, {v}, attrs, "ar");
    }
    outputs_.push_back(Epilogue(r));
    motifs_.push_back(absl::StrCat("ar N=", n, " P=", P_, " ", g.form, async ? " async" : "", " of ", desc));
  }

  // all-to-all before a dot (through a layout chain), after one, or alone.
  void MotifAllToAll() {
    const int64_t n = Ring();
    Groups g = MakeGroups(n, /*allow_empty=*/false, /*allow_channel_only=*/false);
    const std::string wide = Wide();
    const size_t pattern = c_.Weighted({45, 40, 15});
    std::string desc, form;
    auto a2a = [&](const Val& v, int64_t s) {
      std::string attrs = absl::StrCat("channel_id=", b_.NextChannel(), ", replica_groups=",
                                       GroupsListText(g.groups), ", dimensions={", s, "}");
      if (c_.Percent(12) && o_.async_forms) {
        form = "async";
        const std::string shape = absl::StrCat("((", v.Shape(), "), ", v.Shape(), ")");
        std::string st = b_.OpRaw("all-to-all-start", shape, {v.name}, attrs, "a2as");
        return b_.Op("all-to-all-done", v.type, v.dims, {Val{st, v.type, {}}}, "", "a2a");
      }
      return b_.Op("all-to-all", v.type, v.dims, {v}, attrs, "a2a");
    };
    if (pattern == 0 || pattern == 2) {  // A: all-to-all -> chain -> dot (or alone)
      const int64_t rank = 2 + static_cast<int64_t>(c_.Below(2));
      std::vector<int64_t> dims;
      for (int64_t i = 0; i < rank; ++i) dims.push_back(Size());
      int64_t s = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(rank)));
      dims[static_cast<size_t>(s)] = n * Block();
      while (Product(dims) > o_.max_elements / 2) {
        for (size_t i = 0; i < dims.size(); ++i) {
          if (static_cast<int64_t>(i) != s) dims[i] = std::max<int64_t>(1, dims[i] / 2);
        }
        if (Product(dims) > o_.max_elements / 2) dims[static_cast<size_t>(s)] = n;
      }
      Val y = Operand(wide, dims, 50, 10, &desc);
      Val t = a2a(y, s);
      if (pattern == 2) {
        outputs_.push_back(Epilogue(t));
        motifs_.push_back(absl::StrCat("a2a N=", n, " P=", P_, " alone split=", s, " of ", desc, " ", form));
        return;
      }
      Val x = t;
      int64_t keep = s;
      const int chain = static_cast<int>(c_.Weighted({50, 35, 15}));
      for (int k = 0; k < chain; ++k) x = ForwardView(x, &keep);
      DotPlan p = PlanAround(x.dims, 0, -1, Role::kFree,
                             std::max<int64_t>(1, o_.max_elements / std::max<int64_t>(1, Product(x.dims))));
      std::string wd;
      Val w = Operand(wide, p.Dims(1), 50, 10, &wd);
      outputs_.push_back(Epilogue(Dot(p, x, w, ResultType(wide))));
      motifs_.push_back(absl::StrCat("a2a N=", n, " P=", P_, " before-dot split=", s, " chain=", chain,
                                     " of ", desc, " ", form));
      return;
    }
    // B: dot -> chain -> all-to-all.
    std::vector<int64_t> x = {Size(), Size()};
    DotPlan p = PlanAround(x, 0, -1, Role::kFree, 64);
    std::vector<int> out = p.OutClasses();
    if (out.empty()) {
      p.cls.push_back({Role::kFree, n});
      p.side[1].push_back(static_cast<int>(p.cls.size()) - 1);
      out = p.OutClasses();
    }
    int64_t s = static_cast<int64_t>(c_.Below(out.size()));
    p.cls[static_cast<size_t>(out[static_cast<size_t>(s)])].size = n * Block();
    for (int iter = 0; iter < 6; ++iter) {
      if (std::max({Product(p.Dims(0)), Product(p.Dims(1)), Product(p.OutDims())}) <= o_.max_elements) break;
      for (size_t c = 0; c < p.cls.size(); ++c) {
        if (static_cast<int>(c) != out[static_cast<size_t>(s)]) p.cls[c].size = std::max<int64_t>(1, p.cls[c].size / 2);
      }
    }
    std::string ld, rd;
    Val lhs = Operand(wide, p.Dims(0), 50, 10, &ld);
    Val rhs = Operand(wide, p.Dims(1), 50, 10, &rd);
    Val v = Dot(p, lhs, rhs, ResultType(wide));
    int64_t keep = s;
    const int chain = static_cast<int>(c_.Weighted({50, 35, 15}));
    for (int k = 0; k < chain; ++k) v = ForwardView(v, &keep);
    outputs_.push_back(Epilogue(a2a(v, keep)));
    motifs_.push_back(absl::StrCat("a2a N=", n, " P=", P_, " after-dot split=", keep, " chain=", chain,
                                   " lhs=", ld, " rhs=", rd, " ", form));
  }

  void MotifPermute() {
    const std::string wide = Wide();
    std::string desc;
    std::vector<int64_t> dims = {Size(), Size()};
    Val v = Operand(wide, dims, 60, 30, &desc);
    // Pairs: a shift by k inside groups of n, sometimes with one pair dropped.
    const int64_t n = Ring();
    Groups g = MakeGroups(n, true, true);
    const int64_t k = 1 + static_cast<int64_t>(c_.Below(static_cast<uint64_t>(n - 1)));
    std::vector<std::string> pairs;
    const bool drop = c_.Percent(20);
    for (const auto& grp : g.groups) {
      for (size_t i = 0; i < grp.size(); ++i) {
        if (drop && i == 0) continue;
        pairs.push_back(absl::StrCat("{", grp[i], ",", grp[(i + static_cast<size_t>(k)) % grp.size()], "}"));
      }
    }
    const std::string attrs = absl::StrCat("channel_id=", b_.NextChannel(), ", source_target_pairs={",
                                           absl::StrJoin(pairs, ","), "}");
    Val r;
    const bool async = c_.Percent(25) && o_.async_forms;
    if (async) {
      const std::string shape = absl::StrCat("(", v.Shape(), ", ", v.Shape(), ")");
      std::string s = b_.OpRaw("collective-permute-start", shape, {v.name}, attrs, "cps");
      r = b_.Op("collective-permute-done", v.type, v.dims, {Val{s, v.type, {}}}, "", "cp");
    } else {
      r = b_.Op("collective-permute", v.type, v.dims, {v}, attrs, "cp");
    }
    if (c_.Percent(50)) {
      const int side = static_cast<int>(c_.Below(2));
      DotPlan p = PlanAround(r.dims, side, -1, Role::kFree, 64);
      std::string wd;
      Val w = Operand(wide, p.Dims(1 - side), 50, 0, &wd);
      r = side == 0 ? Dot(p, r, w, ResultType(wide)) : Dot(p, w, r, ResultType(wide));
    }
    outputs_.push_back(Epilogue(r));
    motifs_.push_back(absl::StrCat("cp N=", n, " P=", P_, " shift=", k, drop ? " partial" : "",
                                   async ? " async" : "", " of ", desc));
  }

  // Two dots sharing an operand (dot-merger's pattern), wide or FP8.
  void MotifDotMerger() {
    const std::string wide = Wide();
    const int64_t m = Size(), k = Size() * 2;
    std::string d0, d1, d2;
    Val shared = Operand(wide, {m, k}, 25, 0, &d0);
    Val w0 = Operand(wide, {k, Size()}, 25, 0, &d1);
    Val w1 = Operand(wide, {k, Size()}, 25, 0, &d2);
    const std::string rt = ResultType(wide);
    const std::string attrs = "lhs_contracting_dims={1}, rhs_contracting_dims={0}";
    outputs_.push_back(Epilogue(b_.Op("dot", rt, {m, w0.dims[1]}, {shared, w0}, attrs, "dot")));
    outputs_.push_back(Epilogue(b_.Op("dot", rt, {m, w1.dims[1]}, {shared, w1}, attrs, "dot")));
    motifs_.push_back(absl::StrCat("merge shared=", d0, " w=", d1, ",", d2, " ", wide, "->", rt));
  }

  void MotifElementwise() {
    const std::string wide = Wide();
    std::vector<int64_t> dims = {Size(), Size()};
    std::string d0, d1;
    Val a = Operand(wide, dims, 30, 40, &d0);
    Val b = Operand(wide, dims, 30, 40, &d1);
    static const char* kOps[] = {"add", "multiply", "subtract", "maximum", "minimum"};
    const char* op = kOps[c_.Below(5)];
    outputs_.push_back(Epilogue(b_.Op(op, wide, dims, {a, b})));
    motifs_.push_back(absl::StrCat("elementwise ", op, " ", d0, ",", d1));
  }

  ChoiceSource& c_;
  const GenOptions& o_;
  HloTextBuilder b_;
  int64_t P_ = 4;
  std::vector<Val> outputs_;
  std::vector<Val> pool_;  // shards that were all-gathered (candidate stationary operands)
  // "FP8 model" motifs: every operand is an FP8 dequantization with a replicated scalar scale
  // and no view in between, as FP8 training programs write them (the handler's FP8 shift and
  // the FP8 GEMM apply).
  bool fp8_model_ = false;
  std::vector<std::string> motifs_;
};

}  // namespace

GeneratedProgram GenerateProgram(ChoiceSource& choices, const GenOptions& options,
                                 const std::string& name) {
  Gen g(choices, options);
  return g.Run(name);
}

GeneratedProgram GenerateFromSeed(uint64_t seed, const GenOptions& options) {
  SeededChoices c(seed);
  return GenerateProgram(c, options, absl::StrCat("fuzz_", seed));
}

}  // namespace weave::fuzz
