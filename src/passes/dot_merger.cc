// dot-merger (dot_merger.h): XLA's DotMerger (xla/hlo/transforms/simplifiers/dot_merger.cc in
// the snapshot) in Weave's words. Dots that read one value as an operand are grouped by what the
// merged dot needs to agree on; each group is merged into one dot on the shared value and the
// concatenation of the other operands, brought to [batch..., free, contracting...] form; each
// original dot's result is sliced out and brought back to its own dimension order.
#include "passes/dot_merger.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/dot_dims.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

// The sub-byte type an operand is upcast from through transposes, reshapes, bitcasts and
// converts (XLA's HasSubByteUpcast), or "".
std::string SubByteUpcast(const HloInstruction* x) {
  while (x != nullptr && (x->opcode() == HloOpcode::kTranspose || x->opcode() == HloOpcode::kReshape ||
                          x->opcode() == HloOpcode::kBitcast || x->opcode() == HloOpcode::kConvert)) {
    if (x->opcode() == HloOpcode::kConvert && x->operand_count() == 1) {
      const PrimitiveType t = x->operand(0)->shape().element_type;
      if (t != PrimitiveType::PRED && BitWidth(t) > 0 && BitWidth(t) < 8) return std::string(PrimitiveTypeName(t));
    }
    x = x->operand_count() > 0 ? x->operand(0) : nullptr;
  }
  return "";
}

// One dot, seen from one of its operands (the shared one).
struct Usage {
  HloInstruction* dot = nullptr;
  int64_t side = 0;  // 0: the shared value is the lhs, 1: the rhs
  // The shared value: the dot's operand, or what it transposes (XLA follows the shared operand
  // up through layout ops to its source). Shared dims below are the source's.
  HloInstruction* source = nullptr;
  std::vector<int64_t> to_source;  // operand dim -> source dim
  // (shared dim, other dim) pairs, sorted by the shared dim.
  std::vector<std::pair<int64_t, int64_t>> batch, contracting;
  std::vector<int64_t> shared_free, other_free;  // increasing
  int64_t nc = 1;  // elements of the other operand's free dims
};

// What the dots of one merged group agree on (XLA's EquivalenceKey): the shared value and the
// role of each of its dims, the three element types, precisions and algorithm, and the queue.
struct Key {
  int64_t shared_id = 0;
  std::vector<int64_t> batch, contracting;  // shared dims, sorted
  PrimitiveType shared_type{}, other_type{}, out_type{};
  std::vector<std::string> precision;
  std::string algorithm;
  int64_t queue = 0;
  bool operator<(const Key& o) const {
    return std::tie(shared_id, batch, contracting, shared_type, other_type, out_type, precision,
                    algorithm, queue) < std::tie(o.shared_id, o.batch, o.contracting,
                                                 o.shared_type, o.other_type, o.out_type,
                                                 o.precision, o.algorithm, o.queue);
  }
};

Usage UsageOf(HloInstruction* dot, int64_t side) {
  const DotDims& d = dot->dot_dims();
  const std::vector<int64_t>& sb = side == 0 ? d.lhs_batch : d.rhs_batch;
  const std::vector<int64_t>& ob = side == 0 ? d.rhs_batch : d.lhs_batch;
  const std::vector<int64_t>& sc = side == 0 ? d.lhs_contracting : d.rhs_contracting;
  const std::vector<int64_t>& oc = side == 0 ? d.rhs_contracting : d.lhs_contracting;
  Usage u;
  u.dot = dot;
  u.side = side;
  const Shape& s = dot->operand(side)->shape();
  const Shape& o = dot->operand(1 - side)->shape();
  u.source = dot->operand(side);
  u.to_source.resize(static_cast<size_t>(s.rank()));
  std::iota(u.to_source.begin(), u.to_source.end(), 0);
  // Up through transposes: operand dim i is dim perm[i] of the transpose's operand.
  for (int guard = 0; guard < 16 && u.source->opcode() == HloOpcode::kTranspose &&
                      u.source->operand_count() == 1;
       ++guard) {
    for (int64_t& d : u.to_source) d = u.source->dimensions[static_cast<size_t>(d)];
    u.source = u.source->operand(0);
  }
  for (size_t i = 0; i < sb.size(); ++i) {
    u.batch.push_back({u.to_source[static_cast<size_t>(sb[i])], ob[i]});
  }
  for (size_t i = 0; i < sc.size(); ++i) {
    u.contracting.push_back({u.to_source[static_cast<size_t>(sc[i])], oc[i]});
  }
  std::sort(u.batch.begin(), u.batch.end());
  std::sort(u.contracting.begin(), u.contracting.end());
  for (int64_t d : DotFreeDims(s.rank(), sb, sc)) {
    u.shared_free.push_back(u.to_source[static_cast<size_t>(d)]);
  }
  std::sort(u.shared_free.begin(), u.shared_free.end());
  u.other_free = DotFreeDims(o.rank(), ob, oc);
  for (int64_t f : u.other_free) u.nc *= o.dims[static_cast<size_t>(f)];
  return u;
}

Key KeyOf(const Usage& u, const DotMerger::QueueIdFn& queue_id) {
  Key k;
  const HloInstruction* dot = u.dot;
  k.shared_id = u.source->unique_id();
  for (const auto& p : u.batch) k.batch.push_back(p.first);
  for (const auto& p : u.contracting) k.contracting.push_back(p.first);
  k.shared_type = dot->operand(u.side)->shape().element_type;
  k.other_type = dot->operand(1 - u.side)->shape().element_type;
  k.out_type = dot->shape().element_type;
  k.precision = dot->operand_precision();
  if (const std::string* a = dot->GetRawAttribute("algorithm")) k.algorithm = *a;
  k.queue = queue_id ? queue_id(*dot) : 0;
  return k;
}

// Why two keys of dots sharing a value differ (for the remark).
std::string KeyDifference(const Key& a, const Key& b) {
  if (a.batch != b.batch) return "the shared value's batch dims differ";
  if (a.contracting != b.contracting) return "the shared value's contracting dims differ";
  if (a.shared_type != b.shared_type || a.other_type != b.other_type || a.out_type != b.out_type) {
    return "element types differ";
  }
  if (a.precision != b.precision) return "operand precisions differ";
  if (a.algorithm != b.algorithm) return "algorithms differ";
  if (a.queue != b.queue) return "they run on different operation queues";
  return "";
}

// True when `target` is reachable from `from` through operands / control predecessors.
bool DependsOn(const HloInstruction* from, const HloInstruction* target) {
  std::vector<const HloInstruction*> work = {from};
  std::unordered_set<const HloInstruction*> seen;
  while (!work.empty()) {
    const HloInstruction* i = work.back();
    work.pop_back();
    if (i == target) return true;
    if (!seen.insert(i).second) continue;
    for (const HloInstruction* op : i->operands()) work.push_back(op);
    for (const HloInstruction* op : i->control_predecessors()) work.push_back(op);
  }
  return false;
}

// XLA's FindDotsToMerge over `cands` (sorted by nc, then id): the first window that makes a
// group of >= 2 — members within a factor 20 of the first's non-contracting size, no member
// reachable from another, the group's concat operand and output at most `max_bytes` before the
// last member joins (so one member may take it past the limit), and a saving of the shared
// operand's reads above 1e-5 of the modeled runtime.
std::vector<Usage> FindGroup(const std::vector<Usage>& cands, int64_t max_bytes,
                             std::map<HloInstruction*, std::string>* why_not) {
  constexpr double kFlopsPerByte = 290.0;
  constexpr int64_t kMaxNonContractingRatio = 20;
  constexpr double kMinSavingsRatio = 1e-5;
  if (cands.size() < 2) return {};
  const Usage& f = cands.front();
  const HloInstruction* shared = f.source;
  const HloInstruction* other = f.dot->operand(1 - f.side);
  const Shape& ss = shared->shape();
  int64_t batch = 1, shared_nc = 1, contracting = 1;
  for (const auto& p : f.batch) batch *= ss.dims[static_cast<size_t>(p.first)];
  for (const auto& p : f.contracting) contracting *= ss.dims[static_cast<size_t>(p.first)];
  for (int64_t d : f.shared_free) shared_nc *= ss.dims[static_cast<size_t>(d)];
  const int64_t shared_bytes = ss.ByteSize();
  const int64_t per_nc = batch * (contracting * std::max(1, BitWidth(other->shape().element_type) / 8) +
                                  shared_nc * std::max(1, BitWidth(f.dot->shape().element_type) / 8));
  const double cost_per_nc = 2.0 * batch * shared_nc * contracting / kFlopsPerByte + per_nc;
  for (size_t i = 0; i < cands.size(); ++i) {
    std::vector<Usage> group = {cands[i]};
    int64_t sum_nc = cands[i].nc;
    const int64_t max_nc = sum_nc * kMaxNonContractingRatio;
    for (size_t j = i + 1; j < cands.size(); ++j) {
      if (per_nc * sum_nc > max_bytes) {
        for (size_t r = group.size() == 1 ? i : j; r < cands.size(); ++r) {
          why_not->emplace(cands[r].dot,
                           absl::StrCat("the merged operand and result would pass ", max_bytes,
                                        " bytes (--dot-merger-threshold-mb)"));
        }
        break;
      }
      const Usage& c = cands[j];
      if (c.nc > max_nc) {
        for (size_t r = j; r < cands.size(); ++r) {
          why_not->emplace(cands[r].dot,
                           absl::StrCat("its free dims are more than ", kMaxNonContractingRatio,
                                        "x those of '", cands[i].dot->name(),
                                        "' (XLA merges dots of similar size only)"));
        }
        break;
      }
      bool connected = false;
      for (const Usage& m : group) {
        connected |= DependsOn(m.dot, c.dot) || DependsOn(c.dot, m.dot);
      }
      if (connected) {
        why_not->emplace(c.dot, absl::StrCat("it depends on '", cands[i].dot->name(),
                                             "' or a dot merged with it (or the other way "
                                             "round): one dot cannot compute both"));
        continue;
      }
      const int64_t next = sum_nc + c.nc;
      const double runtime =
          cost_per_nc * static_cast<double>(next) +
          static_cast<double>(group.size() + 1) * static_cast<double>(shared_bytes);
      if (static_cast<double>(shared_bytes) * static_cast<double>(group.size()) / runtime <=
          kMinSavingsRatio) {
        why_not->emplace(c.dot, "the saving is below 1e-5 of the modeled runtime");
        continue;
      }
      group.push_back(c);
      sum_nc = next;
    }
    if (group.size() >= 2) {
      // XLA's order in the concatenation: most trailing zero bits of nc, then larger nc first.
      std::sort(group.begin(), group.end(), [](const Usage& a, const Usage& b) {
        const int ta = std::countr_zero(static_cast<uint64_t>(a.nc));
        const int tb = std::countr_zero(static_cast<uint64_t>(b.nc));
        return std::make_tuple(tb, b.nc, a.dot->unique_id()) <
               std::make_tuple(ta, a.nc, b.dot->unique_id());
      });
      return group;
    }
  }
  return {};
}

HloInstruction* Transpose(HloComputation* comp, HloInstruction* x, const std::vector<int64_t>& perm,
                          const std::string& name) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity && x->shape().HasDefaultLayout()) return x;
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(x->shape().dims[static_cast<size_t>(p)]);
  HloInstruction* t =
      comp->AddInstruction(HloOpcode::kTranspose, Shape(x->shape().element_type, dims), {x}, name);
  t->dimensions = perm;
  return t;
}

HloInstruction* Reshape(HloComputation* comp, HloInstruction* x, const std::vector<int64_t>& dims,
                        const std::string& name) {
  if (x->shape().dims == dims && x->shape().HasDefaultLayout()) return x;
  return comp->AddInstruction(HloOpcode::kReshape, Shape(x->shape().element_type, dims), {x},
                              name);
}

// Labels of the merged dot's dims (batch pair k -> its shared dim, shared free j -> 100000 + j,
// other free j -> 200000 + j) for usage `u`, and its part's dims in that order (the free dims
// unflattened). `ss`: the shared value's shape.
void MergedOrderLabels(const Usage& u, const Shape& ss, int64_t nb, bool shared_is_lhs,
                       std::vector<int64_t>* m_labels, std::vector<int64_t>* m_dims) {
  const Shape& os = u.dot->operand(1 - u.side)->shape();
  for (int64_t k = 0; k < nb; ++k) {
    m_labels->push_back(u.batch[static_cast<size_t>(k)].first);
    m_dims->push_back(ss.dims[static_cast<size_t>(u.batch[static_cast<size_t>(k)].first)]);
  }
  auto add_shared = [&] {
    for (int64_t d : u.shared_free) {
      m_labels->push_back(100000 + d);
      m_dims->push_back(ss.dims[static_cast<size_t>(d)]);
    }
  };
  auto add_other = [&] {
    for (int64_t d : u.other_free) {
      m_labels->push_back(200000 + d);
      m_dims->push_back(os.dims[static_cast<size_t>(d)]);
    }
  };
  if (shared_is_lhs) {
    add_shared();
    add_other();
  } else {
    add_other();
    add_shared();
  }
}

// The same labels as MergedOrderLabels in the dot's own result order: batch, then the free dims
// of its lhs and rhs (the shared side's named by their source dims).
std::vector<int64_t> OwnOrderLabels(const Usage& u) {
  const DotDims& od = u.dot->dot_dims();
  std::vector<int64_t> o_labels;
  for (int64_t d : u.side == 0 ? od.lhs_batch : od.rhs_batch) {
    o_labels.push_back(u.to_source[static_cast<size_t>(d)]);
  }
  // The dot's own free dims in operand order; the shared side's named by their source dims.
  const Shape& sop = u.dot->operand(u.side)->shape();
  const DotDims& dd = u.dot->dot_dims();
  std::vector<int64_t> shared_free_in_order;
  for (int64_t d : DotFreeDims(sop.rank(), u.side == 0 ? dd.lhs_batch : dd.rhs_batch,
                               u.side == 0 ? dd.lhs_contracting : dd.rhs_contracting)) {
    shared_free_in_order.push_back(u.to_source[static_cast<size_t>(d)]);
  }
  if (u.side == 0) {
    for (int64_t d : shared_free_in_order) o_labels.push_back(100000 + d);
    for (int64_t d : u.other_free) o_labels.push_back(200000 + d);
  } else {
    for (int64_t d : u.other_free) o_labels.push_back(200000 + d);
    for (int64_t d : shared_free_in_order) o_labels.push_back(100000 + d);
  }
  return o_labels;
}

// The shared state of merging one group (MergeGroup's steps), fixed before any instruction is
// created.
struct GroupMerge {
  HloComputation* comp;
  const std::vector<Usage>& group;
  const Usage& f;  // the first member
  HloInstruction* shared;
  const Shape& ss;  // the shared value's shape
  int64_t nb, ncn;  // batch and contracting dims
  std::string base;  // the first member's name
  bool shared_is_lhs;
  // [batch, nc, contracting] (else [batch, contracting, nc]) for the other operands.
  bool contracting_minor;
  int64_t nc_pos;

  // Each member's other operand transposed and reshaped to the merge form, concatenated along
  // nc; sets *total_nc to the members' nc summed. Returns the concatenate.
  HloInstruction* ConcatOtherOperands(int64_t* total_nc) const;
  // The merged dot of `shared` and `concat` (a clone of the first member), added to comp;
  // *out: its result dims.
  HloInstruction* MergedDot(HloInstruction* concat, int64_t total_nc,
                            std::vector<int64_t>* out) const;
  // Replaces member `u` by its part of `merged` (dims `out`; u's nc rows from `start` along
  // `nc_dim`): slice, unflatten nc, transpose to the dot's own order.
  void ReplaceWithPart(const Usage& u, HloInstruction* merged, const std::vector<int64_t>& out,
                       int64_t nc_dim, int64_t start) const;
};

HloInstruction* GroupMerge::ConcatOtherOperands(int64_t* total_nc) const {
  std::vector<HloInstruction*> parts;
  for (const Usage& u : group) {
    HloInstruction* y = u.dot->operand(1 - u.side);
    std::vector<int64_t> perm, dims;
    for (const auto& p : u.batch) {
      perm.push_back(p.second);
      dims.push_back(ss.dims[static_cast<size_t>(p.first)]);
    }
    auto add_free = [&] {
      perm.insert(perm.end(), u.other_free.begin(), u.other_free.end());
      dims.push_back(u.nc);
    };
    if (contracting_minor) add_free();
    for (const auto& p : u.contracting) {
      perm.push_back(p.second);
      dims.push_back(ss.dims[static_cast<size_t>(p.first)]);
    }
    if (!contracting_minor) add_free();
    HloInstruction* t = Transpose(comp, y, perm, y->name() + ".merge_form");
    parts.push_back(Reshape(comp, t, dims, y->name() + ".merge_form"));
    *total_nc += u.nc;
  }
  Shape cs = parts[0]->shape();
  cs.dims[static_cast<size_t>(nc_pos)] = *total_nc;
  cs.SetDefaultLayout();
  HloInstruction* concat =
      comp->AddInstruction(HloOpcode::kConcatenate, cs, parts, base + ".merge_operands");
  concat->dimensions = {nc_pos};
  return concat;
}

HloInstruction* GroupMerge::MergedDot(HloInstruction* concat, int64_t total_nc,
                                      std::vector<int64_t>* out) const {
  DotDims dn;
  std::vector<int64_t> s_batch, s_contracting, c_batch(static_cast<size_t>(nb)),
      c_contracting(static_cast<size_t>(ncn));
  for (const auto& p : f.batch) s_batch.push_back(p.first);
  for (const auto& p : f.contracting) s_contracting.push_back(p.first);
  std::iota(c_batch.begin(), c_batch.end(), 0);
  std::iota(c_contracting.begin(), c_contracting.end(), contracting_minor ? nb + 1 : nb);
  dn.lhs_batch = shared_is_lhs ? s_batch : c_batch;
  dn.rhs_batch = shared_is_lhs ? c_batch : s_batch;
  dn.lhs_contracting = shared_is_lhs ? s_contracting : c_contracting;
  dn.rhs_contracting = shared_is_lhs ? c_contracting : s_contracting;
  for (int64_t d : s_batch) out->push_back(ss.dims[static_cast<size_t>(d)]);
  std::vector<int64_t> shared_free_sizes;
  for (int64_t d : f.shared_free) shared_free_sizes.push_back(ss.dims[static_cast<size_t>(d)]);
  if (!shared_is_lhs) out->push_back(total_nc);
  out->insert(out->end(), shared_free_sizes.begin(), shared_free_sizes.end());
  if (shared_is_lhs) out->push_back(total_nc);
  std::vector<HloInstruction*> ops = shared_is_lhs ? std::vector<HloInstruction*>{shared, concat}
                                                   : std::vector<HloInstruction*>{concat, shared};
  auto clone = f.dot->CloneWithNewOperands(Shape(f.dot->shape().element_type, *out), ops,
                                           ".merged");
  clone->set_dot_dims(dn);
  clone->backend_config.clear();  // queue assignments of one dot do not hold for the merged one
  for (const Usage& u : group) {
    if (clone->metadata.empty() && !u.dot->metadata.empty()) clone->metadata = u.dot->metadata;
  }
  return comp->AddInstruction(std::move(clone));
}

void GroupMerge::ReplaceWithPart(const Usage& u, HloInstruction* merged,
                                 const std::vector<int64_t>& out, int64_t nc_dim,
                                 int64_t start) const {
  const int64_t rank = static_cast<int64_t>(out.size());
  std::vector<int64_t> sdims = out;
  sdims[static_cast<size_t>(nc_dim)] = u.nc;
  HloInstruction* sl = comp->AddInstruction(
      HloOpcode::kSlice, Shape(f.dot->shape().element_type, sdims), {merged},
      u.dot->name() + ".from_merged");
  for (int64_t i = 0; i < rank; ++i) {
    SliceDim sd{0, out[static_cast<size_t>(i)], 1};
    if (i == nc_dim) sd = SliceDim{start, start + u.nc, 1};
    sl->mutable_slice()->push_back(sd);
  }
  // Labels of the merged order M and of the dot's own order; then M's positions per label.
  std::vector<int64_t> m_labels, m_dims;
  MergedOrderLabels(u, ss, nb, shared_is_lhs, &m_labels, &m_dims);
  HloInstruction* v = Reshape(comp, sl, m_dims, u.dot->name() + ".unflat");
  const std::vector<int64_t> o_labels = OwnOrderLabels(u);
  std::vector<int64_t> perm;
  for (int64_t l : o_labels) {
    perm.push_back(std::find(m_labels.begin(), m_labels.end(), l) - m_labels.begin());
  }
  v = Transpose(comp, v, perm, u.dot->name() + ".reorder");
  if (!(v->shape().dims == u.dot->shape().dims)) {
    v = Reshape(comp, v, u.dot->shape().dims, u.dot->name() + ".reorder");
  }
  (void)u.dot->ReplaceAllUsesWith(v);
}

// Merges `group` (>= 2 dots of one key) into one dot; returns it. The shared value keeps its
// place; each other operand becomes [batch..., nc, contracting...] (batch and contracting dims
// in the order of the shared value's dims), concatenated along nc.
HloInstruction* MergeGroup(HloComputation* comp, const std::vector<Usage>& group) {
  int64_t lhs_count = 0;
  for (const Usage& u : group) lhs_count += u.side == 0 ? 1 : 0;
  const bool shared_is_lhs = static_cast<int64_t>(group.size()) < 2 * lhs_count;
  const Usage& f = group.front();
  HloInstruction* shared = f.source;
  const Shape& ss = shared->shape();
  const int64_t nb = static_cast<int64_t>(f.batch.size());
  const int64_t ncn = static_cast<int64_t>(f.contracting.size());
  const std::string base = f.dot->name();

  // As XLA: [batch, nc, contracting] when the first dot's other operand has a contracting dim
  // minor-most, else [batch, contracting, nc].
  const HloInstruction* first_other = f.dot->operand(1 - f.side);
  bool contracting_minor = false;
  for (const auto& p : f.contracting) contracting_minor |= p.second == first_other->shape().rank() - 1;
  const int64_t nc_pos = contracting_minor ? nb : nb + ncn;
  const GroupMerge m{comp, group, f, shared, ss, nb, ncn, base, shared_is_lhs, contracting_minor,
                     nc_pos};
  int64_t total_nc = 0;
  HloInstruction* concat = m.ConcatOtherOperands(&total_nc);
  std::vector<int64_t> out;
  HloInstruction* merged = m.MergedDot(concat, total_nc, &out);

  // Each dot's part: slice, unflatten nc, transpose to the dot's own order.
  const int64_t rank = static_cast<int64_t>(out.size());
  const int64_t nc_dim = shared_is_lhs ? rank - 1 : nb;
  int64_t start = 0;
  for (const Usage& u : group) {
    m.ReplaceWithPart(u, merged, out, nc_dim, start);
    start += u.nc;
  }
  return merged;
}

// The pass's remarks (DotMerger's AddRemark), for the steps below.
using RemarkFn = std::function<void(std::string location, bool applied, std::string message)>;

// DotMerger::Run's work on one computation, in rounds: the state of its steps.
struct ComputationMerger {
  HloComputation* comp;
  int64_t threshold_bytes;
  const DotMerger::QueueIdFn& queue_id;
  DotMergeGuard* guard;  // may be null
  const RemarkFn& remark;
  std::map<HloInstruction*, std::string> refused;  // one remark per dot
  std::unordered_set<const HloInstruction*> created;  // merged dots of earlier rounds

  // Remarks `d` as not merged for `why`, once per dot.
  void Refuse(HloInstruction* d, const std::string& why) {
    if (refused.emplace(d, why).second) remark(d->name(), false, "not merged: " + why);
  }
  // One round: merges what it can and removes the merged dots; returns whether it merged any.
  absl::StatusOr<bool> Round();
  // The dots of the computation that may be merged, in post order (remarks for those with
  // control edges or a sub-byte upcast operand).
  std::vector<HloInstruction*> MergeableDots();
  // The usages of one shared value that the caller's guard lets through (by side); the others
  // are refused.
  std::vector<Usage> GuardedUsages(const std::vector<Usage>& usages);
  // Refuses, with the reason, each dot alone in its class when the shared value's usages fall
  // into several classes.
  void RefuseUnpairedKeys(std::map<Key, std::vector<Usage>>& classes);
  // Merges groups of one class until fewer than two of its dots are left; the merged dots go to
  // *merged_away. Returns whether it merged any.
  bool MergeClass(const std::vector<Usage>& cands_all,
                  std::unordered_set<HloInstruction*>* merged_away);
};

absl::StatusOr<bool> ComputationMerger::Round() {
  bool round_changed = false;
  // Dots that may be merged, then their usages by shared value.
  std::vector<HloInstruction*> dots = MergeableDots();
  // shared value -> usages (both sides), in post order.
  std::map<int64_t, std::vector<Usage>> by_value;
  for (HloInstruction* d : dots) {
    for (int64_t side = 0; side < 2; ++side) {
      if (side == 1 && d->operand(1) == d->operand(0)) continue;  // one usage of x.x
      Usage u = UsageOf(d, side);
      by_value[u.source->unique_id()].push_back(std::move(u));
    }
  }
  std::unordered_set<HloInstruction*> merged_away;
  for (auto& [value_id, usages] : by_value) {
    if (usages.size() < 2) continue;
    // The caller's guard first, one remark per refused dot.
    std::vector<Usage> ok = GuardedUsages(usages);
    // Equivalence classes.
    std::map<Key, std::vector<Usage>> classes;
    for (const Usage& u : ok) classes[KeyOf(u, queue_id)].push_back(u);
    if (classes.size() > 1) RefuseUnpairedKeys(classes);
    for (auto& [key, cands_all] : classes) {
      if (MergeClass(cands_all, &merged_away)) round_changed = true;
    }
  }
  for (HloInstruction* d : merged_away) {
    RETURN_IF_ERROR(comp->RemoveInstruction(d));
  }
  return round_changed;
}

std::vector<HloInstruction*> ComputationMerger::MergeableDots() {
  std::vector<HloInstruction*> dots;
  for (HloInstruction* i : comp->MakeInstructionPostOrder()) {
    if (i->opcode() != HloOpcode::kDot || i->operand_count() != 2 || !i->shape().IsArray() ||
        created.count(i)) {
      continue;  // a merged dot is not merged again (XLA adds it to no class)
    }
    const DotDims& d = i->dot_dims();
    if (d.lhs_batch.size() != d.rhs_batch.size() ||
        d.lhs_contracting.size() != d.rhs_contracting.size()) {
      continue;
    }
    if (!i->control_predecessors().empty() || !i->control_successors().empty()) {
      // The merged dot and its slices would not carry the ordering edge (XLA's
      // NoMergeControlPredecessor): left alone, and said so.
      remark(i->name(), false,
             absl::StrCat("not merged: it has control ",
                          i->control_predecessors().empty() ? "successors" : "predecessors",
                          " (a merge would drop the ordering edge)"));
      continue;
    }
    std::string sub_byte;
    for (int64_t k = 0; k < 2 && sub_byte.empty(); ++k) sub_byte = SubByteUpcast(i->operand(k));
    if (!sub_byte.empty()) {
      // As XLA's merger, which skips such dots (its NoMergeSubByteUpcast test).
      remark(i->name(), false, absl::StrCat("not merged: an operand is upcast from ", sub_byte));
      continue;
    }
    dots.push_back(i);
  }
  return dots;
}

std::vector<Usage> ComputationMerger::GuardedUsages(const std::vector<Usage>& usages) {
  std::vector<Usage> ok;
  for (int64_t side = 0; side < 2; ++side) {
    std::vector<HloInstruction*> same_side;
    for (const Usage& u : usages) {
      if (u.side == side) same_side.push_back(u.dot);
    }
    std::map<const HloInstruction*, std::string> refusals;
    if (guard != nullptr && !same_side.empty()) refusals = guard->Refusals(same_side, side);
    for (const Usage& u : usages) {
      if (u.side != side) continue;
      if (auto it = refusals.find(u.dot); it != refusals.end()) {
        Refuse(u.dot, it->second);
        continue;
      }
      ok.push_back(u);
    }
  }
  return ok;
}

void ComputationMerger::RefuseUnpairedKeys(std::map<Key, std::vector<Usage>>& classes) {
  // Dots that share the value but have no partner of their own key: say why.
  const Key* largest = nullptr;
  size_t most = 0;
  for (const auto& [k, v] : classes) {
    if (v.size() > most) most = v.size(), largest = &k;
  }
  for (const auto& [k, v] : classes) {
    if (v.size() != 1 || &k == largest) continue;
    const Usage& u = v.front();
    if (u.dot == classes[*largest].front().dot) continue;
    Refuse(u.dot, absl::StrCat("shares '", u.source->name(), "' with '",
                               classes[*largest].front().dot->name(), "', but ",
                               KeyDifference(k, *largest)));
  }
}

bool ComputationMerger::MergeClass(const std::vector<Usage>& cands_all,
                                   std::unordered_set<HloInstruction*>* merged_away) {
  bool any_merged = false;
  std::map<HloInstruction*, std::string> why_not;
  while (true) {
    // Dots merged this round, or whose operand now reads another value, wait.
    std::vector<Usage> cands;
    for (const Usage& u : cands_all) {
      if (!merged_away->count(u.dot) && UsageOf(u.dot, u.side).source == u.source) {
        cands.push_back(u);
      }
    }
    if (cands.size() < 2) {
      for (const Usage& u : cands) {
        if (auto it = why_not.find(u.dot); it != why_not.end()) Refuse(u.dot, it->second);
      }
      break;
    }
    std::sort(cands.begin(), cands.end(), [](const Usage& a, const Usage& b) {
      return std::make_pair(a.nc, a.dot->unique_id()) < std::make_pair(b.nc, b.dot->unique_id());
    });
    std::vector<Usage> group = FindGroup(cands, threshold_bytes, &why_not);
    if (group.size() < 2) {
      for (const Usage& u : cands) {
        auto it = why_not.find(u.dot);
        Refuse(u.dot, it != why_not.end() ? it->second
                                          : "no dot of its kind is left to merge with");
      }
      break;
    }
    HloInstruction* merged = MergeGroup(comp, group);
    created.insert(merged);
    for (const Usage& u : group) {
      std::vector<std::string> names;
      for (const Usage& o : group) {
        if (o.dot != u.dot) names.push_back(absl::StrCat("'", o.dot->name(), "'"));
      }
      remark(u.dot->name(), true,
             absl::StrCat("merged with ", absl::StrJoin(names, ", "), " into '",
                          merged->name(), "' (shared ",
                          u.side == 0 ? "lhs" : "rhs", " '", u.source->name(), "')"));
      merged_away->insert(u.dot);
    }
    any_merged = true;
  }
  return any_merged;
}

}  // namespace

absl::StatusOr<bool> DotMerger::Run(HloModule* module) {
  bool changed = false;
  if (guard_ != nullptr) guard_->Prepare(*module);
  const RemarkFn remark = [this](std::string location, bool applied, std::string message) {
    AddRemark(std::move(location), applied, std::move(message));
  };
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    ComputationMerger merger{comp, threshold_bytes_, queue_id_, guard_.get(), remark, {}, {}};
    // Rounds: a merge replaces its dots' results, so dots that read them (a dot of a merged
    // dot's result) share a new value in the next round (XLA applies its replacements at the
    // end, with the same effect). Each round merges at least one group or ends the loop.
    for (int round = 0; round < 16; ++round) {
      ASSIGN_OR_RETURN(const bool round_changed, merger.Round());
      changed |= round_changed;
      if (!round_changed) break;
    }
  }
  return changed;
}

absl::StatusOr<int64_t> DotMerger::ThresholdBytes(const PassOptions& options) {
  absl::StatusOr<double> mb = options.GetDouble("dot-merger-threshold-mb", 32);
  if (!mb.ok()) return mb.status();
  if (*mb < 0) return absl::InvalidArgumentError("--dot-merger-threshold-mb must be >= 0");
  const double bytes = *mb * 1024 * 1024;
  return bytes >= 9.0e18 ? INT64_MAX : static_cast<int64_t>(bytes);
}

}  // namespace weave
