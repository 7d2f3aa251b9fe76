// Expansions before partitioning (see partition_expand.h).
#include "spmd/partition_expand.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hlo/spmd_internal_config.h"
#include "spmd/sharding.h"

namespace weave::spmd {
namespace {

HloInstruction* Annotated(HloInstruction* h, const std::optional<HloSharding>& s) {
  if (s) h->sharding = *s;
  return h;
}

HloInstruction* SliceOf(HloComputation* c, HloInstruction* x, int64_t dim, int64_t start, int64_t limit,
                        const std::optional<HloSharding>& s) {
  Shape shape = x->shape();
  shape.dims[static_cast<size_t>(dim)] = limit - start;
  HloInstruction* sl = c->AddInstruction(HloOpcode::kSlice, shape, {x}, "slice");
  for (size_t d = 0; d < shape.dims.size(); ++d) {
    sl->mutable_slice()->push_back(static_cast<int64_t>(d) == dim ? SliceDim{start, limit, 1}
                                                                   : SliceDim{0, x->shape().dims[d], 1});
  }
  return Annotated(sl, s);
}

HloInstruction* PadOf(HloComputation* c, HloInstruction* x, HloInstruction* value, int64_t dim, int64_t lo,
                      int64_t hi, const std::optional<HloSharding>& s) {
  Shape shape = x->shape();
  shape.dims[static_cast<size_t>(dim)] += lo + hi;
  HloInstruction* p = c->AddInstruction(HloOpcode::kPad, shape, {x, value}, "pad");
  for (size_t d = 0; d < shape.dims.size(); ++d) {
    p->mutable_padding()->push_back(static_cast<int64_t>(d) == dim ? PadDim{lo, hi, 0} : PadDim{0, 0, 0});
  }
  return Annotated(p, s);
}

std::optional<HloSharding> Element(const std::optional<HloSharding>& s, size_t k) {
  if (!s) return std::nullopt;
  if (s->kind == HloSharding::Kind::kTuple) {
    if (k < s->tuple.size()) return s->tuple[k];
    return std::nullopt;
  }
  return s;
}

// Whether `h` (array-shaped, with a sharding) is tiled along `dim` across partitions.
bool TiledAlong(const HloInstruction& h, int64_t dim) {
  if (!h.sharding || !h.shape().IsArray()) return false;
  absl::StatusOr<Sharding> s = Sharding::FromHlo(*h.sharding, h.shape());
  return s.ok() && s->IsTiled() && !s->HasManualSubgroup() && dim < s->rank() && s->tile(dim) > 1;
}

std::optional<int64_t> Dim(const SpmdInternalConfig& cfg, const Shape& s) {
  std::optional<int64_t> d = cfg.Int("dimension");
  if (!d || *d < 0 || *d >= s.rank()) return std::nullopt;
  return d;
}

// The concatenate of `parts` along `dim` (result shape `out`, tiled along dim by `sharding`) as
// zero pads picked by an index mask (see the header).
HloInstruction* ExpandConcatenate(HloComputation* c, const std::vector<HloInstruction*>& parts, int64_t dim,
                                  const Shape& out, const std::optional<HloSharding>& sharding) {
  const int64_t total = out.dims[static_cast<size_t>(dim)];
  HloInstruction* zero = c->AddInstruction(HloOpcode::kConstant, Shape::Scalar(out.element_type), {}, "zero");
  zero->literal = Literal::Scalar(out.element_type, 0);
  zero->sharding = HloSharding();  // replicated
  const Shape s32(PrimitiveType::S32, {total}), pred1(PrimitiveType::PRED, {total});
  HloInstruction* iota = c->AddInstruction(HloOpcode::kIota, s32, {}, "iota");
  iota->iota_dimension = 0;
  iota->sharding = HloSharding();
  std::vector<HloInstruction*> padded;
  std::vector<int64_t> ends;
  int64_t at = 0;
  for (HloInstruction* x : parts) {
    const int64_t len = x->shape().dims[static_cast<size_t>(dim)];
    padded.push_back(PadOf(c, x, zero, dim, at, total - at - len, sharding));
    at += len;
    ends.push_back(at);
  }
  HloInstruction* result = padded.back();
  for (size_t k = padded.size() - 1; k-- > 0;) {
    HloInstruction* limit = c->AddInstruction(HloOpcode::kConstant, Shape::Scalar(PrimitiveType::S32), {}, "end");
    limit->literal = Literal::ScalarInt(PrimitiveType::S32, ends[k]);
    limit->sharding = HloSharding();
    HloInstruction* lb = c->AddInstruction(HloOpcode::kBroadcast, s32, {limit}, "broadcast");
    lb->has_dimensions_attr = true;
    lb->sharding = HloSharding();
    HloInstruction* in = c->AddInstruction(HloOpcode::kCompare, pred1, {iota, lb}, "in_operand");
    in->comparison_direction = ComparisonDirection::kLt;
    in->sharding = HloSharding();
    HloInstruction* mask = c->AddInstruction(HloOpcode::kBroadcast, Shape(PrimitiveType::PRED, out.dims), {in}, "mask");
    mask->dimensions = {dim};
    mask->has_dimensions_attr = true;
    Annotated(mask, sharding);
    result = Annotated(c->AddInstruction(HloOpcode::kSelect, out, {mask, padded[k], result}, "select"), sharding);
  }
  return result;
}

// The replacement of an XLA partitioner-internal custom call, or nullptr.
// *what says what it became, *note what more was done (appended after the remark).
HloInstruction* ExpandInternalOp(HloComputation* c, HloInstruction* h, std::string* what, std::string* note) {
  const std::string& target = h->custom_call_target();
  if (h->operand_count() < 1 || !h->operand(0)->shape().IsArray()) return nullptr;
  absl::StatusOr<SpmdInternalConfig> cfg = ParseSpmdInternalConfig(h->backend_config);
  if (!cfg.ok()) return nullptr;
  HloInstruction* x = h->operand(0);
  const Shape& xs = x->shape();
  std::optional<int64_t> dim = Dim(*cfg, xs);
  if (!dim) return nullptr;
  const size_t d = static_cast<size_t>(*dim);
  if (target == "_SPMDInternalOp_RotateRight" && h->operand_count() == 1 && h->shape().IsArray() &&
      h->shape().Compatible(xs)) {
    std::optional<int64_t> amount = cfg->Int("amount");
    const int64_t n = xs.dims[d];
    if (!amount || *amount < 0 || n == 0) return nullptr;
    const int64_t a = *amount % n;
    *what = absl::StrCat("rotate right by ", a, " along dim ", *dim);
    if (a == 0) return Annotated(c->AddInstruction(HloOpcode::kCopy, xs, {x}, "copy"), h->sharding);
    HloInstruction* tail = SliceOf(c, x, *dim, n - a, n, h->sharding);
    HloInstruction* head = SliceOf(c, x, *dim, 0, n - a, h->sharding);
    if (TiledAlong(*h, *dim)) {
      *note = "; its concatenate along the tiled dim as zero pads picked by an index mask";
      return ExpandConcatenate(c, {tail, head}, *dim, xs, h->sharding);
    }
    HloInstruction* cat = c->AddInstruction(HloOpcode::kConcatenate, xs, {tail, head}, "concatenate");
    cat->dimensions = {*dim};
    cat->has_dimensions_attr = true;
    return Annotated(cat, h->sharding);
  }
  if (!h->shape().IsTuple() || h->shape().tuple_shapes.empty()) return nullptr;
  const Shape elem = h->shape().tuple_shapes[0];
  for (const Shape& e : h->shape().tuple_shapes) {
    if (!e.IsArray() || !e.Compatible(elem) || e.rank() != xs.rank()) return nullptr;
  }
  const int64_t count = static_cast<int64_t>(h->shape().tuple_shapes.size());
  std::vector<HloInstruction*> parts;
  if (target == "_SPMDInternalOp_MultiSlice" && h->operand_count() == 1) {
    const std::vector<int64_t>* starts = cfg->Array("start_indices");
    const std::vector<int64_t>* limits = cfg->Array("limit_indices");
    const std::vector<int64_t>* strides = cfg->Array("strides");
    std::optional<int64_t> amount = cfg->Int("amount");
    const size_t rank = xs.dims.size();
    if (!amount || *amount + 1 != count || !starts || !limits || starts->size() != rank ||
        limits->size() != rank || (strides && strides->size() != rank) ||
        elem.element_type != xs.element_type) {
      return nullptr;
    }
    // Every slice checked before any instruction is added (a refused call is left untouched).
    std::vector<std::vector<SliceDim>> slices(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      for (size_t e = 0; e < rank; ++e) {
        const int64_t shift = e == d ? i : 0;
        const SliceDim sd{(*starts)[e] + shift, (*limits)[e] + shift, strides ? (*strides)[e] : 1};
        const int64_t len = sd.stride <= 0 ? -1 : (sd.limit - sd.start + sd.stride - 1) / sd.stride;
        if (sd.start < 0 || sd.limit > xs.dims[e] || len != elem.dims[e]) return nullptr;
        slices[static_cast<size_t>(i)].push_back(sd);
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      HloInstruction* sl = c->AddInstruction(HloOpcode::kSlice, elem, {x}, "slice");
      *sl->mutable_slice() = slices[static_cast<size_t>(i)];
      parts.push_back(Annotated(sl, Element(h->sharding, static_cast<size_t>(i))));
    }
    *what = absl::StrCat(count, " shifted slices along dim ", *dim);
  } else if (target == "_SPMDInternalOp_MultiPad" && h->operand_count() == 2 &&
             h->operand(1)->shape().IsArray() && h->operand(1)->shape().rank() == 0) {
    std::optional<int64_t> amount = cfg->Int("amt") ? cfg->Int("amt") : cfg->Int("amount");
    if (!amount || *amount < 0 || *amount + 1 != count) return nullptr;
    if (h->operand(1)->shape().element_type != xs.element_type || elem.element_type != xs.element_type) {
      return nullptr;
    }
    // Checked before any instruction is added: the other dims as the operand's, every window
    // inside the padded dim.
    for (size_t e = 0; e < xs.dims.size(); ++e) {
      if (e != d && elem.dims[e] != xs.dims[e]) return nullptr;
    }
    if (count - 1 + elem.dims[d] > xs.dims[d] + 2 * *amount) return nullptr;
    HloInstruction* padded = PadOf(c, x, h->operand(1), *dim, *amount, *amount, Element(h->sharding, 0));
    for (int64_t i = 0; i < count; ++i) {
      parts.push_back(SliceOf(c, padded, *dim, i, i + elem.dims[d], Element(h->sharding, static_cast<size_t>(i))));
    }
    *what = absl::StrCat("pad by ", *amount, " and ", count, " windows along dim ", *dim);
  } else {
    return nullptr;
  }
  HloInstruction* t = c->AddInstruction(HloOpcode::kTuple, h->shape(), parts, "tuple");
  return Annotated(t, h->sharding);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ExpandForPartitioning(HloModule* module) {
  std::vector<std::pair<std::string, std::string>> remarks;
  for (HloComputation* c : module->computations()) {
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      if (h->opcode() != HloOpcode::kCustomCall || !absl::StartsWith(h->custom_call_target(), "_SPMDInternalOp_")) {
        continue;
      }
      std::string what, note;
      HloInstruction* replacement = ExpandInternalOp(c, h, &what, &note);
      if (replacement == nullptr) continue;
      const std::string name = h->name();
      const std::string target = h->custom_call_target();
      if (!c->ReplaceInstruction(h, replacement).ok()) continue;
      remarks.push_back({name, absl::StrCat(target, " written as its global meaning (", what,
                                            ") for the slice, pad and concatenate rules", note)});
    }
  }
  return remarks;
}

}  // namespace weave::spmd
