// Printer for XLA's HLO text format: HloInstruction::ToString, HloComputation::ToString and
// HloModule::ToString (declared in ir.h). Output follows XLA's dumps
// (../shared/specs/hlo-text-format.md §2-§5): `%` names, operands without inline shapes,
// `/*index=N*/` before every 5th operand, attributes in XLA's print order, callees before callers
// and ENTRY last.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/instruction_text.h"
#include "hlo/ir.h"
#include "hlo/str_util.h"

namespace weave {
namespace {

using hlo_internal::A;
using hlo_internal::Append;
using hlo_internal::Cat;

// This thread's canonical-names mode (instruction_text.h), null when printing as usual.
thread_local CanonicalNames* t_canonical = nullptr;

// `%name`, or its rank in the canonical-names mode.
void AppendNameRef(std::string* out, std::string_view name) {
  if (t_canonical != nullptr) {
    t_canonical->AppendName(out, name);
    return;
  }
  out->push_back('%');
  out->append(name);
}

bool IsOneOf(std::string_view s, std::initializer_list<std::string_view> l) {
  for (std::string_view x : l) {
    if (s == x) return true;
  }
  return false;
}

// Raw attributes XLA prints before the typed opcode-specific ones (convolution-like ops).
bool IsEarlyRaw(std::string_view n) {
  return IsOneOf(n, {"window", "dim_labels", "feature_group_count", "batch_group_count"});
}
// Raw attributes printed in the common block after control-predecessors.
bool IsCommonRaw(std::string_view n) {
  return IsOneOf(n, {"statistics", "result_accuracy", "origin"});
}

void AppendIntList(std::string* out, const std::vector<int64_t>& v) {
  out->push_back('{');
  Append(out, absl::StrJoin(v, ","));
  out->push_back('}');
}

// Shortest text with `digits` significant digits, or more when needed to read back exactly.
std::string FormatG(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

// XLA-style float text for element type `t` (see the notes §5).
std::string FormatFloat(double v, PrimitiveType t) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  switch (t) {
    case PrimitiveType::F32:
    case PrimitiveType::C64: {
      std::string s = FormatG(v, 6);
      if (static_cast<float>(std::strtod(s.c_str(), nullptr)) != static_cast<float>(v)) {
        s = FormatG(v, 9);
      }
      return s;
    }
    case PrimitiveType::F64:
    case PrimitiveType::C128: {
      std::string s = FormatG(v, 15);
      if (std::strtod(s.c_str(), nullptr) != v) s = FormatG(v, 17);
      return s;
    }
    case PrimitiveType::BF16:
      return FormatG(v, 4);
    case PrimitiveType::F16:
      return FormatG(v, 5);
    case PrimitiveType::F8E8M0FNU:
      // Six digits, as XLA prints it (5.87747e-39 for the smallest code): two would turn 2^-127
      // into 5.9e-39, which parses back as 2^-126.
      return FormatG(v, 6);
    case PrimitiveType::F8E5M2:
    case PrimitiveType::F8E5M2FNUZ:
    case PrimitiveType::F4E2M1FN:
    case PrimitiveType::F6E3M2FN:
      return FormatG(v, 2);
    default:
      return FormatG(v, 3);
  }
}

// Formats one element of a literal.
void AppendElement(std::string* out, const Literal& lit, int64_t i, bool scalar) {
  const PrimitiveType t = lit.shape.element_type;
  if (IsComplex(t)) {
    size_t k = static_cast<size_t>(2 * i);
    double re = k < lit.f.size() ? lit.f[k] : 0, im = k + 1 < lit.f.size() ? lit.f[k + 1] : 0;
    Append(out, "(", FormatFloat(re, t), ", ", FormatFloat(im, t), ")");
  } else if (t == PrimitiveType::PRED) {
    bool b = lit.GetAsInt(i) != 0;
    if (scalar) {
      out->append(b ? "true" : "false");
    } else {
      out->push_back(b ? '1' : '0');
    }
  } else if (IsFloatingPoint(t)) {
    out->append(FormatFloat(lit.GetAsDouble(i), t));
  } else if (IsUnsignedInteger(t)) {
    Append(out, static_cast<uint64_t>(lit.GetAsInt(i)));
  } else {
    Append(out, lit.GetAsInt(i));
  }
}

// Nested braces for dims[d..], starting at flat element `*next`.
void AppendArray(std::string* out, const Literal& lit, size_t d, int64_t* next) {
  const auto& dims = lit.shape.dims;
  const int64_t n = dims[d];
  const bool innermost = d + 1 == dims.size();
  if (innermost) {
    const bool spaced = dims.size() > 1 && n > 1;
    out->append(spaced ? "{ " : "{");
    for (int64_t k = 0; k < n; ++k) {
      if (k) out->append(", ");
      AppendElement(out, lit, (*next)++, false);
    }
    out->append(spaced ? " }" : "}");
    return;
  }
  out->append("{ ");
  for (int64_t k = 0; k < n; ++k) {
    if (k) out->append(", ");
    AppendArray(out, lit, d + 1, next);
  }
  out->append(" }");
}

std::string LiteralText(const Literal& lit) {
  if (!lit.text.empty()) return lit.text;
  if (lit.elided) return "{...}";
  std::string out;
  if (lit.shape.IsTuple()) return "()";
  if (lit.shape.dims.empty()) {
    AppendElement(&out, lit, 0, true);
    return out;
  }
  for (int64_t d : lit.shape.dims) {
    if (d == 0) return "{}";
  }
  int64_t next = 0;
  AppendArray(&out, lit, 0, &next);
  return out;
}

HloOpcode AttributeOpcode(const HloInstruction& instr) {
  // Sugared `X-start` carries X's attributes; `X-update`/`X-done` carry none of their own.
  if (!instr.async_sugar().empty() && instr.opcode() == HloOpcode::kAsyncStart) {
    if (auto op = ParseHloOpcode(instr.async_sugar())) return *op;
  }
  return instr.opcode();
}

std::string OpcodeText(const HloInstruction& instr) {
  if (!instr.async_sugar().empty()) {
    switch (instr.opcode()) {
      case HloOpcode::kAsyncStart:
        return Cat(instr.async_sugar(), "-start");
      case HloOpcode::kAsyncUpdate:
        return Cat(instr.async_sugar(), "-update");
      case HloOpcode::kAsyncDone:
        return Cat(instr.async_sugar(), "-done");
      default:
        break;
    }
  }
  return std::string(HloOpcodeString(instr.opcode()));
}

void AppendAttr(std::string* out, std::string_view name, std::string_view value) {
  Append(out, ", ", name, "=", value);
}

void AppendCompRef(std::string* out, const HloComputation* c) {
  AppendNameRef(out, c ? std::string_view(c->name()) : std::string_view("<null>"));
}

void AppendCompList(std::string* out, const std::vector<HloComputation*>& cs) {
  out->push_back('{');
  for (size_t i = 0; i < cs.size(); ++i) {
    if (i) out->append(", ");
    AppendCompRef(out, cs[i]);
  }
  out->push_back('}');
}

void AppendCalledComputations(std::string* out, const HloInstruction& instr, HloOpcode aop) {
  const auto& cs = instr.called_computations();
  if (cs.empty()) return;
  auto single = [&](std::string_view key) {
    Append(out, ", ", key, "=");
    if (cs.size() == 1) {
      AppendCompRef(out, cs[0]);
    } else {
      AppendCompList(out, cs);
    }
  };
  switch (instr.opcode()) {
    case HloOpcode::kWhile:
      if (cs.size() == 2) {
        out->append(", condition=");
        AppendCompRef(out, cs[0]);
        out->append(", body=");
        AppendCompRef(out, cs[1]);
        return;
      }
      break;
    case HloOpcode::kConditional:
      // A pred[] branch index takes the true/false form (XLA's printer and parser): the only form
      // that parses for it, whether or not the text it came from used it.
      if (cs.size() == 2 && (instr.conditional_is_pred ||
                             (instr.operand_count() > 0 && instr.operand(0)->shape().IsArray() &&
                              instr.operand(0)->shape().element_type == PrimitiveType::PRED))) {
        out->append(", true_computation=");
        AppendCompRef(out, cs[0]);
        out->append(", false_computation=");
        AppendCompRef(out, cs[1]);
      } else {
        out->append(", branch_computations=");
        AppendCompList(out, cs);
      }
      return;
    case HloOpcode::kFusion:
      single("calls");
      return;
    case HloOpcode::kCustomCall:
      out->append(", called_computations=");
      AppendCompList(out, cs);
      return;
    case HloOpcode::kAsyncStart:
    case HloOpcode::kAsyncUpdate:
    case HloOpcode::kAsyncDone:
      // `fusion-start` names its fused computation `calls=`, as fusion does.
      if (instr.async_sugar().empty() || aop == HloOpcode::kFusion) {
        single("calls");
        return;
      }
      break;
    default:
      break;
  }
  if (aop == HloOpcode::kSelectAndScatter && cs.size() == 2) {
    out->append(", select=");
    AppendCompRef(out, cs[0]);
    out->append(", scatter=");
    AppendCompRef(out, cs[1]);
    return;
  }
  if (cs.size() == 1) {
    out->append(", to_apply=");
    AppendCompRef(out, cs[0]);
  } else {
    out->append(", called_computations=");
    AppendCompList(out, cs);
  }
}

bool IsListCollective(HloOpcode op) {
  switch (op) {
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllReduceStart:
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kAllToAll:
    case HloOpcode::kRaggedAllToAll:
    case HloOpcode::kCollectiveBroadcast:
    case HloOpcode::kCollectiveReduce:
      return true;
    default:
      return false;
  }
}

bool DimensionsAlwaysPrinted(HloOpcode op) {
  switch (op) {
    case HloOpcode::kBroadcast:
    case HloOpcode::kTranspose:
    case HloOpcode::kReverse:
    case HloOpcode::kConcatenate:
    case HloOpcode::kReduce:
    case HloOpcode::kMap:
    case HloOpcode::kSort:
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kReduceScatter:
      return true;
    default:
      return false;
  }
}

// `, lhs_batch_dims=..., lhs_contracting_dims=..., ...` of a dot or ragged-dot (batch dims only
// when there are some).
void AppendDotDims(std::string* out, const HloInstruction& instr) {
  const DotDims& d = instr.dot_dims();
  if (!d.lhs_batch.empty()) {
    out->append(", lhs_batch_dims=");
    AppendIntList(out, d.lhs_batch);
  }
  out->append(", lhs_contracting_dims=");
  AppendIntList(out, d.lhs_contracting);
  if (!d.rhs_batch.empty()) {
    out->append(", rhs_batch_dims=");
    AppendIntList(out, d.rhs_batch);
  }
  out->append(", rhs_contracting_dims=");
  AppendIntList(out, d.rhs_contracting);
}

// `, slice={[start:limit(:stride)], ...}` (strides only when one is not 1).
void AppendSliceAttr(std::string* out, const HloInstruction& instr) {
  bool strided = false;
  for (const SliceDim& s : instr.slice()) strided |= s.stride != 1;
  out->append(", slice={");
  for (size_t i = 0; i < instr.slice().size(); ++i) {
    const SliceDim& s = instr.slice()[i];
    if (i) out->append(", ");
    Append(out, "[", s.start, ":", s.limit);
    if (strided) Append(out, ":", s.stride);
    out->push_back(']');
  }
  out->push_back('}');
}

// `, padding=lo_hi(_interior)x...` (interior only when one is not 0); nothing without padding.
void AppendPaddingAttr(std::string* out, const HloInstruction& instr) {
  bool interior = false;
  for (const PadDim& p : instr.padding()) interior |= p.interior != 0;
  if (instr.padding().empty()) return;
  out->append(", padding=");
  for (size_t i = 0; i < instr.padding().size(); ++i) {
    const PadDim& p = instr.padding()[i];
    if (i) out->push_back('x');
    Append(out, p.lo, "_", p.hi);
    if (interior) Append(out, "_", p.interior);
  }
}

// The attributes that belong to one opcode alone (index, iota_dimension, direction, dot dims,
// slice, padding, kind, ...). Returns true when the opcode prints no other typed attribute.
bool AppendOpcodeAttributes(std::string* out, const HloInstruction& instr, HloOpcode op) {
  switch (op) {
    case HloOpcode::kGetTupleElement:
      if (instr.tuple_index >= 0) Append(out, ", index=", instr.tuple_index);
      return true;
    case HloOpcode::kIota:
      Append(out, ", iota_dimension=", instr.iota_dimension);
      return true;
    case HloOpcode::kCompare:
      if (instr.comparison_direction) {
        Append(out, ", direction=",
                        ComparisonDirectionString(*instr.comparison_direction));
      }
      if (!instr.comparison_type().empty()) Append(out, ", type=", instr.comparison_type());
      return true;
    case HloOpcode::kDot:
    case HloOpcode::kRaggedDot:
      AppendDotDims(out, instr);
      return false;  // operand_precision follows
    case HloOpcode::kSlice:
      AppendSliceAttr(out, instr);
      return true;
    case HloOpcode::kDynamicSlice:
      out->append(", dynamic_slice_sizes=");
      AppendIntList(out, instr.dynamic_slice_sizes());
      return true;
    case HloOpcode::kPad:
      AppendPaddingAttr(out, instr);
      return true;
    case HloOpcode::kFusion:
      if (!instr.fusion_kind().empty()) Append(out, ", kind=", instr.fusion_kind());
      return true;
    case HloOpcode::kReducePrecision:
      Append(out, ", exponent_bits=", instr.exponent_bits,
                      ", mantissa_bits=", instr.mantissa_bits);
      return true;
    default:
      return false;
  }
}

// Collective attributes (also printed on any other opcode that carries them): channel_id,
// replica_groups, constrain_layout, use_global_device_ids and dimensions (in XLA's order for
// the opcode), source_target_pairs.
void AppendCollectiveAttributes(std::string* out, const HloInstruction& instr, HloOpcode op) {
  const bool print_dims =
      instr.has_dimensions_attr || !instr.dimensions.empty() || DimensionsAlwaysPrinted(op);
  auto dims = [&] {
    if (!print_dims) return;
    out->append(", dimensions=");
    AppendIntList(out, instr.dimensions);
  };
  if (instr.channel_id) {
    const int64_t id = *instr.channel_id;
    Append(out, ", channel_id=", t_canonical ? t_canonical->ChannelId(id) : id);
  }
  if (instr.replica_groups) {
    Append(out, ", replica_groups=", instr.replica_groups->ToString());
  } else if (IsListCollective(op)) {
    out->append(", replica_groups={}");
  }
  if (instr.constrain_layout) out->append(", constrain_layout=true");
  const bool ugdi = instr.use_global_device_ids;
  switch (op) {
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
      dims();
      if (ugdi) out->append(", use_global_device_ids=true");
      break;
    default:
      if (ugdi) out->append(", use_global_device_ids=true");
      dims();
      break;
  }
  if (!instr.source_target_pairs().empty() || op == HloOpcode::kCollectivePermute ||
      op == HloOpcode::kCollectivePermuteStart) {
    out->append(", source_target_pairs={");
    for (size_t i = 0; i < instr.source_target_pairs().size(); ++i) {
      if (i) out->push_back(',');
      Append(out, "{", instr.source_target_pairs()[i].first, ",",
                      instr.source_target_pairs()[i].second, "}");
    }
    out->push_back('}');
  }
}

// Opcode-specific typed attributes in XLA's order.
void AppendTypedAttributes(std::string* out, const HloInstruction& instr, HloOpcode op) {
  if (AppendOpcodeAttributes(out, instr, op)) return;
  if (!instr.operand_precision().empty()) {
    Append(out, ", operand_precision={", absl::StrJoin(instr.operand_precision(), ","),
                    "}");
  }
  if (op == HloOpcode::kDot || op == HloOpcode::kRaggedDot) return;
  if (op == HloOpcode::kCustomCall) {
    Append(out, ", custom_call_target=\"", absl::CEscape(instr.custom_call_target()),
                    "\"");
  }
  AppendCollectiveAttributes(out, instr, op);
  if (!instr.dynamic_slice_sizes().empty()) {
    out->append(", dynamic_slice_sizes=");
    AppendIntList(out, instr.dynamic_slice_sizes());
  }
}

// `detached`: as a copy in no computation prints (no ROOT marker, no control predecessors).
void AppendInstruction(std::string* out, const HloInstruction& instr, bool detached = false) {
  if (!detached && instr.IsRoot()) out->append("ROOT ");
  AppendNameRef(out, instr.name());
  out->append(" = ");
  instr.shape().AppendTo(out, /*print_layout=*/true);
  out->push_back(' ');
  out->append(OpcodeText(instr));
  out->push_back('(');
  if (instr.opcode() == HloOpcode::kParameter) {
    Append(out, instr.parameter_number);
  } else if (instr.opcode() == HloOpcode::kConstant) {
    if (instr.literal) out->append(LiteralText(*instr.literal));
  } else {
    const auto& ops = instr.operands();
    for (size_t i = 0; i < ops.size(); ++i) {
      if (i) out->append(", ");
      if (i % 5 == 0 && i) Append(out, "/*index=", i, "*/");
      AppendNameRef(out, ops[i] ? std::string_view(ops[i]->name()) : std::string_view("<null>"));
    }
  }
  out->push_back(')');

  const HloOpcode aop = AttributeOpcode(instr);
  for (const auto& [k, v] : instr.raw_attributes()) {
    if (IsEarlyRaw(k)) AppendAttr(out, k, v);
  }
  AppendTypedAttributes(out, instr, aop);
  for (const auto& [k, v] : instr.raw_attributes()) {
    if (!IsEarlyRaw(k) && !IsCommonRaw(k)) AppendAttr(out, k, v);
  }
  AppendCalledComputations(out, instr, aop);
  if (instr.sharding) AppendAttr(out, "sharding", instr.sharding->ToString());
  if (!instr.frontend_attributes.empty()) {
    out->append(", frontend_attributes={");
    bool first = true;
    for (const auto& [k, v] : instr.frontend_attributes) {
      if (!first) out->push_back(',');
      first = false;
      bool plain = !k.empty();
      for (char c : k) {
        plain &= (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                  c == '-');
      }
      if (plain) {
        out->append(k);
      } else {
        Append(out, "\"", absl::CEscape(k), "\"");
      }
      out->push_back('=');
      out->append(v);
    }
    out->push_back('}');
  }
  if (!detached && !instr.control_predecessors().empty()) {
    out->append(", control-predecessors={");
    for (size_t i = 0; i < instr.control_predecessors().size(); ++i) {
      if (i) out->append(", ");
      AppendNameRef(out, instr.control_predecessors()[i]->name());
    }
    out->push_back('}');
  }
  for (std::string_view n : {"statistics", "result_accuracy", "origin"}) {
    for (const auto& [k, v] : instr.raw_attributes()) {
      if (k == n) AppendAttr(out, k, v);
    }
  }
  if (!instr.metadata.empty() && t_canonical == nullptr) {
    Append(out, ", metadata={", instr.metadata, "}");
  }
  if (!instr.backend_config.empty()) AppendAttr(out, "backend_config", instr.backend_config);
}

// Instruction order for printing: the stored order if every operand and control predecessor
// comes before its user (always true for parsed modules, so text round-trips unchanged), else a
// post order.
std::vector<HloInstruction*> PrintOrder(const HloComputation& c) {
  std::vector<HloInstruction*> order = c.instructions();
  absl::flat_hash_set<const HloInstruction*> seen;
  seen.reserve(order.size());
  for (HloInstruction* i : order) {
    for (HloInstruction* o : i->operands()) {
      if (!seen.contains(o)) return c.MakeInstructionPostOrder();
    }
    for (HloInstruction* o : i->control_predecessors()) {
      if (!seen.contains(o)) return c.MakeInstructionPostOrder();
    }
    seen.insert(i);
  }
  return order;
}

void AppendComputation(std::string* out, const HloComputation& c) {
  if (c.IsEntry()) out->append("ENTRY ");
  AppendNameRef(out, c.name());
  if (t_canonical == nullptr) {
    out->append(" (");
    for (int64_t i = 0; i < c.num_parameters(); ++i) {
      if (i) out->append(", ");
      const HloInstruction* p = c.parameter(i);
      if (p == nullptr) {
        Append(out, "missing_param_", i, ": ()");
        continue;
      }
      Append(out, p->name(), ": ");
      p->shape().AppendTo(out, /*print_layout=*/false);
    }
    out->append(") -> ");
    if (c.root() != nullptr) {
      c.root()->shape().AppendTo(out, /*print_layout=*/false);
    } else {
      out->append("()");
    }
  }
  out->append(" {\n");
  for (const HloInstruction* i : PrintOrder(c)) {
    out->append("  ");
    AppendInstruction(out, *i);
    out->push_back('\n');
  }
  out->push_back('}');
  if (!c.execution_thread.empty()) {
    Append(out, ", execution_thread=", c.execution_thread);
  }
}

int HeaderRank(std::string_view n) {
  static constexpr std::string_view kOrder[] = {
      "is_scheduled",
      "input_output_alias",
      "buffer_donor",
      "alias_passthrough_params",
      "entry_computation_layout",
      "allow_spmd_sharding_propagation_to_parameters",
      "allow_spmd_sharding_propagation_to_output",
      "replica_count",
      "num_partitions",
      "frontend_attributes"};
  for (size_t i = 0; i < std::size(kOrder); ++i) {
    if (kOrder[i] == n) return static_cast<int>(i);
  }
  return static_cast<int>(std::size(kOrder));
}

}  // namespace

void CanonicalNames::AppendName(std::string* out, std::string_view name) {
  const auto [it, fresh] = ranks.try_emplace(name, static_cast<int64_t>(ranks.size()));
  char digits[24];
  const char* end = std::to_chars(digits, digits + sizeof(digits), it->second).ptr;
  out->append("%n");
  out->append(digits, static_cast<size_t>(end - digits));
}

void CanonicalNames::SetChannels(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  channels_ = std::move(ids);
}

int64_t CanonicalNames::ChannelId(int64_t id) const {
  auto at = std::lower_bound(channels_.begin(), channels_.end(), id);
  return at != channels_.end() && *at == id ? 1 + (at - channels_.begin()) : id;
}

ScopedCanonicalNames::ScopedCanonicalNames(CanonicalNames* names) : previous_(t_canonical) {
  t_canonical = names;
}

ScopedCanonicalNames::~ScopedCanonicalNames() { t_canonical = previous_; }

void AppendDetachedInstructionText(std::string* out, const HloInstruction& instr) {
  AppendInstruction(out, instr, /*detached=*/true);
}

std::string HloInstruction::ToString() const {
  std::string out;
  AppendInstruction(&out, *this);
  return out;
}

std::string HloComputation::ToString() const {
  std::string out;
  AppendComputation(&out, *this);
  return out;
}

std::string HloModule::ToString() const {
  // Room for the whole text up front (an instruction line is some 60-200 bytes): the string does
  // not grow by doubling, copying itself and touching fresh pages each time. Reserved room that
  // is not written costs no memory (the pages are never touched).
  std::string out;
  {
    size_t instructions = 0;
    for (const auto& c : comps_) instructions += static_cast<size_t>(c->instruction_count());
    out.reserve(4096 + 256 * instructions + stack_tables.size());
  }
  out += Cat("HloModule ", name_);
  // Header attributes in XLA's order; the modelled ones are slotted in by rank.
  std::vector<std::pair<std::string, std::string>> attrs;
  if (is_scheduled) attrs.emplace_back("is_scheduled", "true");
  attrs.insert(attrs.end(), header_attributes.begin(), header_attributes.end());
  if (replica_count != 1) attrs.emplace_back("replica_count", Cat(replica_count));
  if (num_partitions != 1) attrs.emplace_back("num_partitions", Cat(num_partitions));
  std::stable_sort(attrs.begin(), attrs.end(), [](const auto& a, const auto& b) {
    return HeaderRank(a.first) < HeaderRank(b.first);
  });
  for (const auto& [k, v] : attrs) Append(&out, ", ", k, "=", v);
  out.append("\n\n");
  if (!stack_tables.empty()) Append(&out, stack_tables, "\n\n");

  // Computations: stored order when callees already precede callers and the entry is last
  // (parsed modules), else a post order.
  std::vector<HloComputation*> order = computations();
  {
    absl::flat_hash_set<const HloComputation*> seen;
    bool ok = order.empty() || order.back() == entry_ || entry_ == nullptr;
    for (HloComputation* c : order) {
      if (!ok) break;
      for (HloInstruction* i : c->instructions()) {
        for (HloComputation* cc : i->called_computations()) ok &= seen.contains(cc);
      }
      seen.insert(c);
    }
    if (!ok) order = MakeComputationPostOrder();
  }
  for (size_t k = 0; k < order.size(); ++k) {
    if (k) out.append("\n\n");
    AppendComputation(&out, *order[k]);
  }
  out.push_back('\n');
  return out;
}

}  // namespace weave
