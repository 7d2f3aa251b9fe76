// HLO text parser: instruction attributes (`name=value` after the operands: dimensions,
// called computations, configs, windows, dot/conv numbers, ...). See parser_internal.h.
#include "hlo/parser_internal.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace weave::parser_internal {

namespace {

// Why `v` is not a result_accuracy XLA's parser reads ({mode=default|highest} or
// {tolerance={atol=X, rtol=Y, ulps=Z}}, any of the three), or "".
std::string ResultAccuracyError(std::string_view v) {
  auto braced = [](std::string_view x, std::string_view* inner) {
    x = TrimView(x);
    if (x.size() < 2 || x.front() != '{' || x.back() != '}') return false;
    *inner = TrimView(x.substr(1, x.size() - 2));
    return true;
  };
  std::string_view body;
  if (!braced(v, &body)) return "expected {mode=...} or {tolerance={...}}";
  const size_t eq = body.find('=');
  if (eq == std::string_view::npos) return "expected mode= or tolerance=";
  const std::string_view key = TrimView(body.substr(0, eq));
  const std::string_view value = TrimView(body.substr(eq + 1));
  if (key == "mode") {
    const std::string mode = absl::AsciiStrToLower(std::string(value));
    if (mode != "default" && mode != "highest") {
      return Cat("mode '", value, "' is not a result accuracy mode (default or highest)");
    }
    return "";
  }
  if (key != "tolerance") return Cat("'", key, "' is not mode or tolerance");
  std::string_view list;
  if (!braced(value, &list)) return "tolerance takes {atol=X, rtol=Y, ulps=Z}";
  for (absl::string_view piece : absl::StrSplit(absl::string_view(list.data(), list.size()), ',', absl::SkipWhitespace())) {
    const std::string_view item(piece.data(), piece.size());
    const size_t e = item.find('=');
    const std::string_view k = TrimView(item.substr(0, e));
    double d = 0;
    if (e == std::string_view::npos || (k != "atol" && k != "rtol" && k != "ulps") ||
        !absl::SimpleAtod(std::string(TrimView(item.substr(e + 1))), &d)) {
      return Cat("tolerance entry '", TrimView(item), "' is not atol=, rtol= or ulps= a number");
    }
  }
  return "";
}

}  // namespace

// ------------------------------------------------------------------ attributes
bool Parser::ParseAttribute(CompState& st, HloInstruction* instr, HloOpcode op, CalledSlots& called) {
  SkipWs();
  size_t apos = pos_;
  std::string_view name;
  if (!ParseIdent(&name, "an attribute name")) return false;
  for (std::string_view seen : small_names_) {
    if (seen == name) return Error(apos, Cat("duplicate attribute '", name, "'"));
  }
  small_names_.push_back(name);
  if (!Expect('=')) return false;
  SkipWs();
  size_t vpos = pos_;
  if (name == "metadata") {
    std::string_view v;
    if (!ScanBraces(&v)) return false;
    instr->metadata = std::string(v.substr(1, v.size() - 2));
    return true;
  }
  if (name == "dimensions") {
    instr->has_dimensions_attr = true;
    return ParseIntList(&instr->dimensions);
  }
  if (name == "index" && op == HloOpcode::kGetTupleElement) {
    if (!ParseInt(&instr->tuple_index)) return false;
    if (instr->operand_count() == 1) {
      const Shape& ts = instr->operand(0)->shape();
      int64_t n = ts.IsTuple() ? static_cast<int64_t>(ts.tuple_shapes.size()) : 0;
      if (!ts.IsTuple() || instr->tuple_index < 0 || instr->tuple_index >= n) {
        return Error(vpos, Cat("tuple index ", instr->tuple_index,
                                        " is out of range for operand '",
                                        instr->operand(0)->name(), "' with ", n,
                                        " elements"));
      }
    }
    return true;
  }
  {
    // A computation written inline is named `<instruction>.<attribute>`.
    const InlineName hint{instr->name(), name};
    if (name == "to_apply") return ParseComputationList(&called.to_apply, hint);
    if (name == "calls") return ParseComputationList(&called.calls, hint);
    if (name == "called_computations") return ParseComputationList(&called.called, hint);
    if (name == "branch_computations") return ParseComputationList(&called.branches, hint);
    if (name == "condition") return ParseComputationRef(&called.condition, hint);
    if (name == "body") return ParseComputationRef(&called.body, hint);
    if (name == "true_computation") return ParseComputationRef(&called.true_comp, hint);
    if (name == "false_computation") return ParseComputationRef(&called.false_comp, hint);
    if (op == HloOpcode::kSelectAndScatter) {
      if (name == "select") return ParseComputationRef(&called.select, hint);
      if (name == "scatter") return ParseComputationRef(&called.scatter, hint);
    }
  }
  if (name == "sharding") return ParseShardingAttr(instr);
  if (name == "backend_config") {
    std::string_view v;
    if (!ScanRawValue(&v)) return false;
    instr->backend_config = std::string(v);
    return true;
  }
  if (name == "frontend_attributes") return ParseFrontendAttributes(instr);
  if (name == "control-predecessors") {
    if (!Expect('{')) return false;
    CompState::PendingControl pc{instr, {}};
    if (!Consume('}')) {
      do {
        SkipWs();
        size_t p = pos_;
        std::string_view n;
        if (!ParseName(&n, "an instruction name")) return false;
        pc.names.emplace_back(n, p);
      } while (Consume(','));
      if (!Expect('}')) return false;
    }
    st.control.push_back(std::move(pc));
    return true;
  }
  if (name == "channel_id") {
    int64_t v;
    if (!ParseInt(&v)) return false;
    instr->channel_id = v;
    return true;
  }
  if (name == "replica_groups") return ParseReplicaGroupsAttr(instr);
  if (name == "use_global_device_ids") return ParseBool(&instr->use_global_device_ids);
  if (name == "constrain_layout") return ParseBool(&instr->constrain_layout);
  if (name == "source_target_pairs") {
    if (!Expect('{')) return false;
    if (!Consume('}')) {
      do {
        std::vector<int64_t> pair;
        SkipWs();
        size_t p = pos_;
        if (!ParseIntList(&pair)) return false;
        if (pair.size() != 2) return Error(p, "a source-target pair needs two ids");
        instr->mutable_source_target_pairs()->emplace_back(pair[0], pair[1]);
      } while (Consume(','));
      if (!Expect('}')) return false;
    }
    return true;
  }
  if (op == HloOpcode::kDot || op == HloOpcode::kRaggedDot) {
    if (name == "lhs_batch_dims") {
      return ParseIntList(&instr->mutable_dot_dims()->lhs_batch);
    }
    if (name == "lhs_contracting_dims") {
      return ParseIntList(&instr->mutable_dot_dims()->lhs_contracting);
    }
    if (name == "rhs_batch_dims") {
      return ParseIntList(&instr->mutable_dot_dims()->rhs_batch);
    }
    if (name == "rhs_contracting_dims") {
      return ParseIntList(&instr->mutable_dot_dims()->rhs_contracting);
    }
  }
  if (name == "operand_precision") {
    if (!Expect('{')) return false;
    if (!Consume('}')) {
      do {
        std::string_view p;
        if (!ParseIdent(&p, "a precision")) return false;
        instr->mutable_operand_precision()->push_back(absl::AsciiStrToLower(A(p)));
      } while (Consume(','));
      if (!Expect('}')) return false;
    }
    return true;
  }
  if (name == "slice" && op == HloOpcode::kSlice) return ParseSliceAttr(instr);
  if (name == "dynamic_slice_sizes") return ParseIntList(instr->mutable_dynamic_slice_sizes());
  if (name == "padding" && op == HloOpcode::kPad) return ParsePaddingAttr(instr);
  if (name == "iota_dimension" && op == HloOpcode::kIota) {
    return ParseInt(&instr->iota_dimension);
  }
  if (op == HloOpcode::kCompare && name == "direction") {
    std::string_view d;
    if (!ParseIdent(&d, "a comparison direction")) return false;
    std::string u = absl::AsciiStrToUpper(A(d));
    static constexpr std::pair<std::string_view, ComparisonDirection> kDirs[] = {
        {"EQ", ComparisonDirection::kEq}, {"NE", ComparisonDirection::kNe},
        {"LT", ComparisonDirection::kLt}, {"LE", ComparisonDirection::kLe},
        {"GT", ComparisonDirection::kGt}, {"GE", ComparisonDirection::kGe}};
    for (const auto& [s, dir] : kDirs) {
      if (u == s) {
        instr->comparison_direction = dir;
        return true;
      }
    }
    return Error(vpos, Cat("unknown comparison direction '", d, "'"));
  }
  if (op == HloOpcode::kCompare && name == "type") {
    std::string_view t;
    if (!ParseIdent(&t, "a comparison type")) return false;
    instr->set_comparison_type(absl::AsciiStrToUpper(A(t)));
    return true;
  }
  if (op == HloOpcode::kCustomCall && name == "custom_call_target") {
    return ParseString(instr->mutable_custom_call_target());
  }
  if (op == HloOpcode::kCustomCall && name == "literal") {
    std::string_view v;
    if (!ScanShapedLiteral(&v)) return false;
    instr->mutable_raw_attributes()->emplace_back(std::string(name), std::string(v));
    return true;
  }
  if (name == "parameter_replication") {
    // `{true, false, ...}`: one flag per leaf buffer (array) of the shape, as XLA's parser checks.
    if (Peek() != '{') return Expected("'{' to start parameter_replication");
    std::string_view v;
    if (!ScanBraces(&v)) return false;
    int64_t flags = 0;
    for (std::string_view rest = v.substr(1, v.size() - 2);;) {
      const size_t comma = rest.find(',');
      const std::string_view flag = TrimView(rest.substr(0, comma));
      if (flag == "true" || flag == "false") {
        ++flags;
      } else if (!(flag.empty() && comma == std::string_view::npos && flags == 0)) {
        return Error(vpos, Cat("parameter_replication: expected true or false, found '", flag, "'"));
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (instr->shape().element_type != PrimitiveType::kInvalid) {
      const int64_t leaves = instr->shape().LeafCount();
      if (leaves != flags) {
        return Error(vpos, Cat("parameter_replication has ", flags, " elements, but the shape ",
                               instr->shape().ToString(false), " has ", leaves, " leaf buffers"));
      }
    }
    instr->mutable_raw_attributes()->emplace_back(std::string(name), std::string(v));
    return true;
  }
  if (op == HloOpcode::kFusion && name == "kind") {
    std::string_view k;
    if (!ParseIdent(&k, "a fusion kind")) return false;
    instr->set_fusion_kind(std::string(k));
    return true;
  }
  if (op == HloOpcode::kReducePrecision && name == "exponent_bits") {
    return ParseInt(&instr->exponent_bits);
  }
  if (op == HloOpcode::kReducePrecision && name == "mantissa_bits") {
    return ParseInt(&instr->mantissa_bits);
  }
  if (op == HloOpcode::kCustomCall && name == "api_version") {
    // Kept verbatim; one of XLA's CustomCallApiVersion values (hlo.proto), and not UNSPECIFIED.
    std::string_view v;
    if (!ParseIdent(&v, "an API version")) return false;
    if (v == "API_VERSION_UNSPECIFIED") return Error(vpos, "api_version=API_VERSION_UNSPECIFIED is not a valid API version");
    if (v != "API_VERSION_ORIGINAL" && v != "API_VERSION_STATUS_RETURNING" &&
        v != "API_VERSION_STATUS_RETURNING_UNIFIED" && v != "API_VERSION_TYPED_FFI") {
      return Error(vpos, Cat("unknown API version '", v, "' (API_VERSION_ORIGINAL, API_VERSION_STATUS_RETURNING, "
                             "API_VERSION_STATUS_RETURNING_UNIFIED or API_VERSION_TYPED_FFI)"));
    }
    instr->mutable_raw_attributes()->emplace_back(std::string(name), std::string(v));
    return true;
  }
  // Anything else is kept verbatim.
  std::string_view v;
  if (!ScanRawValue(&v)) return false;
  if (name == "result_accuracy") {
    if (std::string why = ResultAccuracyError(v); !why.empty()) {
      return Error(vpos, Cat("result_accuracy=", v, ": ", why));
    }
  }
  instr->mutable_raw_attributes()->emplace_back(std::string(name), std::string(v));
  return true;
}

bool Parser::ParseFrontendAttributes(HloInstruction* instr) {
  if (!Expect('{')) return false;
  if (Consume('}')) return true;
  do {
    SkipWs();
    std::string key;
    if (Peek() == '"' || Peek() == '\'') {
      if (!ParseString(&key)) return false;
    } else {
      std::string_view k;
      if (!ParseIdent(&k, "a frontend attribute name")) return false;
      key = std::string(k);
    }
    if (!Expect('=')) return false;
    std::string_view v;
    if (!ScanRawValue(&v)) return false;
    instr->frontend_attributes[key] = std::string(v);
  } while (Consume(','));
  return Expect('}');
}

bool Parser::ParseSliceAttr(HloInstruction* instr) {
  if (!Expect('{')) return false;
  if (Consume('}')) return true;
  do {
    if (!Expect('[')) return false;
    SliceDim d;
    if (!ParseInt(&d.start) || !Expect(':') || !ParseInt(&d.limit)) return false;
    if (Consume(':') && !ParseInt(&d.stride)) return false;
    if (!Expect(']')) return false;
    instr->mutable_slice()->push_back(d);
  } while (Consume(','));
  return Expect('}');
}

// `lo_hi[_interior]x...` with no spaces inside.
bool Parser::ParsePaddingAttr(HloInstruction* instr) {
  SkipWs();
  while (true) {
    PadDim d;
    int64_t* parts[3] = {&d.lo, &d.hi, &d.interior};
    for (int k = 0; k < 3; ++k) {
      if (k > 0) {
        if (pos_ < src_.size() && src_[pos_] == '_') {
          ++pos_;
        } else if (k == 1) {
          return Expected("'_' in padding");
        } else {
          break;
        }
      }
      if (pos_ >= src_.size() || (!IsDigit(src_[pos_]) && src_[pos_] != '-')) {
        return Expected("a padding amount");
      }
      if (!ParseInt(parts[k])) return false;
    }
    instr->mutable_padding()->push_back(d);
    if (pos_ < src_.size() && src_[pos_] == 'x') {
      ++pos_;
      continue;
    }
    return true;
  }
}

}  // namespace weave::parser_internal
