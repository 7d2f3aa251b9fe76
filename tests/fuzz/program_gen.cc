// The generator's program level (generator.h): partition count, motifs, module; sizes, types,
// replica groups and parameter shardings that every motif draws.
#include "program_gen.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "generator.h"

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

GeneratedProgram Generator::Run(const std::string& name) {
  if (o_.mode == GenOptions::Mode::kGlobal) return RunGlobal(name);
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

int64_t Generator::Size() {
  static const int64_t kSizes[] = {4, 2, 8, 3, 1, 6, 16, 5, 12};
  return kSizes[c_.Weighted({20, 16, 16, 10, 6, 10, 8, 6, 8})];
}

int64_t Generator::Block() {
  static const int64_t kBlocks[] = {2, 1, 4, 3, 8};
  return kBlocks[c_.Weighted({30, 15, 30, 15, 10})];
}

std::string Generator::Wide() {
  static const char* kWide[] = {"bf16", "f32", "f16"};
  return kWide[c_.Weighted({55, 30, 15})];
}

// The dot result type for operands of type `wide`.
std::string Generator::ResultType(const std::string& wide) {
  if (wide == "f32") return "f32";
  return c_.Weighted({70, 30}) == 0 ? wide : "f32";
}

// A ring size dividing P: P itself most of the time.
int64_t Generator::Ring() {
  std::vector<int64_t> divs;
  for (int64_t d = 2; d < P_; ++d) {
    if (P_ % d == 0) divs.push_back(d);
  }
  if (divs.empty() || c_.Weighted({60, 40}) == 0) return P_;
  return c_.Pick(divs);
}

Groups Generator::MakeGroups(int64_t n, bool allow_empty, bool allow_channel_only) {
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

std::string Generator::CollectiveAttrs(const Groups& g, const std::string& dims_attr) {
  std::string s = absl::StrCat("channel_id=", b_.NextChannel(), ", replica_groups=", g.text);
  if (!dims_attr.empty()) absl::StrAppend(&s, ", ", dims_attr);
  if (g.global_ids) absl::StrAppend(&s, ", use_global_device_ids=true");
  return s;
}

// A data parameter's sharding. Per-partition data ({manual}, or a tile of a tiled sharding)
// most of the time: an unannotated or {replicated} parameter holds the same value on every
// partition (XLA's SPMD convention, which the evaluator and the replication analysis follow),
// which would hide ring-order and block-offset bugs.
std::string Generator::ParamSharding(const std::vector<int64_t>& dims) {
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

GeneratedProgram GenerateProgram(ChoiceSource& choices, const GenOptions& options,
                                 const std::string& name) {
  Generator g(choices, options);
  return g.Run(name);
}

GeneratedProgram GenerateFromSeed(uint64_t seed, const GenOptions& options) {
  SeededChoices c(seed);
  return GenerateProgram(c, options, absl::StrCat("fuzz_", seed));
}

}  // namespace weave::fuzz
