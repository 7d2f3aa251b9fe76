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

// Opcode filters of the attribute table: an attribute modelled only on some opcodes.
template <HloOpcode... kOps>
bool Only(HloOpcode op) {
  return ((op == kOps) || ...);
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
  const AttrSite a{st, instr, op, called, name, vpos};
  if (const AttrParseFn parse = AttributeParser(name, op)) return parse(*this, a);
  return ParseVerbatimAttr(a);
}

Parser::AttrParseFn Parser::AttributeParser(std::string_view name, HloOpcode op) {
  struct AttrRule {
    std::string_view name;
    bool (*applies)(HloOpcode);  // null: every opcode
    AttrParseFn parse;
  };
  using P = Parser;
  using S = const AttrSite&;
  constexpr auto kDots = Only<HloOpcode::kDot, HloOpcode::kRaggedDot>;
  constexpr auto kCustomCall = Only<HloOpcode::kCustomCall>;
  constexpr auto kCompare = Only<HloOpcode::kCompare>;
  constexpr auto kReducePrecision = Only<HloOpcode::kReducePrecision>;
  constexpr AttrParseFn kCalled = [](P& p, S a) { return p.ParseCalledComputationAttr(a); };
  static constexpr AttrRule kRules[] = {
      {"metadata", nullptr, [](P& p, S a) {
         std::string_view v;
         if (!p.ScanBraces(&v)) return false;
         a.instr->metadata = std::string(v.substr(1, v.size() - 2));
         return true;
       }},
      {"dimensions", nullptr, [](P& p, S a) {
         a.instr->has_dimensions_attr = true;
         return p.ParseIntList(&a.instr->dimensions);
       }},
      {"index", Only<HloOpcode::kGetTupleElement>,
       [](P& p, S a) { return p.ParseTupleIndexAttr(a); }},
      {"to_apply", nullptr, kCalled},
      {"calls", nullptr, kCalled},
      {"called_computations", nullptr, kCalled},
      {"branch_computations", nullptr, kCalled},
      {"condition", nullptr, kCalled},
      {"body", nullptr, kCalled},
      {"true_computation", nullptr, kCalled},
      {"false_computation", nullptr, kCalled},
      {"select", Only<HloOpcode::kSelectAndScatter>, kCalled},
      {"scatter", Only<HloOpcode::kSelectAndScatter>, kCalled},
      {"sharding", nullptr, [](P& p, S a) { return p.ParseShardingAttr(a.instr); }},
      {"backend_config", nullptr, [](P& p, S a) {
         std::string_view v;
         if (!p.ScanRawValue(&v)) return false;
         a.instr->backend_config = std::string(v);
         return true;
       }},
      {"frontend_attributes", nullptr,
       [](P& p, S a) { return p.ParseFrontendAttributes(a.instr); }},
      {"control-predecessors", nullptr,
       [](P& p, S a) { return p.ParseControlPredecessorsAttr(a); }},
      {"channel_id", nullptr, [](P& p, S a) {
         int64_t v;
         if (!p.ParseInt(&v)) return false;
         a.instr->channel_id = v;
         return true;
       }},
      {"replica_groups", nullptr, [](P& p, S a) { return p.ParseReplicaGroupsAttr(a.instr); }},
      {"use_global_device_ids", nullptr,
       [](P& p, S a) { return p.ParseBool(&a.instr->use_global_device_ids); }},
      {"constrain_layout", nullptr,
       [](P& p, S a) { return p.ParseBool(&a.instr->constrain_layout); }},
      {"source_target_pairs", nullptr, [](P& p, S a) { return p.ParseSourceTargetPairsAttr(a); }},
      {"lhs_batch_dims", kDots,
       [](P& p, S a) { return p.ParseIntList(&a.instr->mutable_dot_dims()->lhs_batch); }},
      {"lhs_contracting_dims", kDots,
       [](P& p, S a) { return p.ParseIntList(&a.instr->mutable_dot_dims()->lhs_contracting); }},
      {"rhs_batch_dims", kDots,
       [](P& p, S a) { return p.ParseIntList(&a.instr->mutable_dot_dims()->rhs_batch); }},
      {"rhs_contracting_dims", kDots,
       [](P& p, S a) { return p.ParseIntList(&a.instr->mutable_dot_dims()->rhs_contracting); }},
      {"operand_precision", nullptr, [](P& p, S a) { return p.ParseOperandPrecisionAttr(a); }},
      {"slice", Only<HloOpcode::kSlice>, [](P& p, S a) { return p.ParseSliceAttr(a.instr); }},
      {"dynamic_slice_sizes", nullptr,
       [](P& p, S a) { return p.ParseIntList(a.instr->mutable_dynamic_slice_sizes()); }},
      {"padding", Only<HloOpcode::kPad>, [](P& p, S a) { return p.ParsePaddingAttr(a.instr); }},
      {"iota_dimension", Only<HloOpcode::kIota>,
       [](P& p, S a) { return p.ParseInt(&a.instr->iota_dimension); }},
      {"direction", kCompare, [](P& p, S a) { return p.ParseComparisonDirectionAttr(a); }},
      {"type", kCompare, [](P& p, S a) {
         std::string_view t;
         if (!p.ParseIdent(&t, "a comparison type")) return false;
         a.instr->set_comparison_type(absl::AsciiStrToUpper(A(t)));
         return true;
       }},
      {"custom_call_target", kCustomCall,
       [](P& p, S a) { return p.ParseString(a.instr->mutable_custom_call_target()); }},
      {"literal", kCustomCall, [](P& p, S a) {
         std::string_view v;
         if (!p.ScanShapedLiteral(&v)) return false;
         a.instr->mutable_raw_attributes()->emplace_back(std::string(a.name), std::string(v));
         return true;
       }},
      {"parameter_replication", nullptr,
       [](P& p, S a) { return p.ParseParameterReplicationAttr(a); }},
      {"kind", Only<HloOpcode::kFusion>, [](P& p, S a) {
         std::string_view k;
         if (!p.ParseIdent(&k, "a fusion kind")) return false;
         a.instr->set_fusion_kind(std::string(k));
         return true;
       }},
      {"exponent_bits", kReducePrecision,
       [](P& p, S a) { return p.ParseInt(&a.instr->exponent_bits); }},
      {"mantissa_bits", kReducePrecision,
       [](P& p, S a) { return p.ParseInt(&a.instr->mantissa_bits); }},
      {"api_version", kCustomCall, [](P& p, S a) { return p.ParseApiVersionAttr(a); }},
  };
  for (const AttrRule& rule : kRules) {
    if (rule.name == name && (rule.applies == nullptr || rule.applies(op))) return rule.parse;
  }
  return nullptr;
}

bool Parser::ParseTupleIndexAttr(const AttrSite& a) {
  HloInstruction* instr = a.instr;
  if (!ParseInt(&instr->tuple_index)) return false;
  if (instr->operand_count() == 1) {
    const Shape& ts = instr->operand(0)->shape();
    int64_t n = ts.IsTuple() ? static_cast<int64_t>(ts.tuple_shapes.size()) : 0;
    if (!ts.IsTuple() || instr->tuple_index < 0 || instr->tuple_index >= n) {
      return Error(a.vpos, Cat("tuple index ", instr->tuple_index, " is out of range for operand '",
                               instr->operand(0)->name(), "' with ", n, " elements"));
    }
  }
  return true;
}

bool Parser::ParseCalledComputationAttr(const AttrSite& a) {
  const std::string_view name = a.name;
  CalledSlots& called = a.called;
  // A computation written inline is named `<instruction>.<attribute>`.
  const InlineName hint{a.instr->name(), name};
  if (name == "to_apply") return ParseComputationList(&called.to_apply, hint);
  if (name == "calls") return ParseComputationList(&called.calls, hint);
  if (name == "called_computations") return ParseComputationList(&called.called, hint);
  if (name == "branch_computations") return ParseComputationList(&called.branches, hint);
  if (name == "condition") return ParseComputationRef(&called.condition, hint);
  if (name == "body") return ParseComputationRef(&called.body, hint);
  if (name == "true_computation") return ParseComputationRef(&called.true_comp, hint);
  if (name == "false_computation") return ParseComputationRef(&called.false_comp, hint);
  if (name == "select") return ParseComputationRef(&called.select, hint);
  return ParseComputationRef(&called.scatter, hint);  // scatter
}

bool Parser::ParseControlPredecessorsAttr(const AttrSite& a) {
  if (!Expect('{')) return false;
  CompState::PendingControl pc{a.instr, {}};
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
  a.st.control.push_back(std::move(pc));
  return true;
}

bool Parser::ParseSourceTargetPairsAttr(const AttrSite& a) {
  if (!Expect('{')) return false;
  if (!Consume('}')) {
    do {
      std::vector<int64_t> pair;
      SkipWs();
      size_t p = pos_;
      if (!ParseIntList(&pair)) return false;
      if (pair.size() != 2) return Error(p, "a source-target pair needs two ids");
      a.instr->mutable_source_target_pairs()->emplace_back(pair[0], pair[1]);
    } while (Consume(','));
    if (!Expect('}')) return false;
  }
  return true;
}

bool Parser::ParseOperandPrecisionAttr(const AttrSite& a) {
  if (!Expect('{')) return false;
  if (!Consume('}')) {
    do {
      std::string_view p;
      if (!ParseIdent(&p, "a precision")) return false;
      a.instr->mutable_operand_precision()->push_back(absl::AsciiStrToLower(A(p)));
    } while (Consume(','));
    if (!Expect('}')) return false;
  }
  return true;
}

bool Parser::ParseComparisonDirectionAttr(const AttrSite& a) {
  std::string_view d;
  if (!ParseIdent(&d, "a comparison direction")) return false;
  std::string u = absl::AsciiStrToUpper(A(d));
  static constexpr std::pair<std::string_view, ComparisonDirection> kDirs[] = {
      {"EQ", ComparisonDirection::kEq}, {"NE", ComparisonDirection::kNe},
      {"LT", ComparisonDirection::kLt}, {"LE", ComparisonDirection::kLe},
      {"GT", ComparisonDirection::kGt}, {"GE", ComparisonDirection::kGe}};
  for (const auto& [s, dir] : kDirs) {
    if (u == s) {
      a.instr->comparison_direction = dir;
      return true;
    }
  }
  return Error(a.vpos, Cat("unknown comparison direction '", d, "'"));
}

bool Parser::ParseParameterReplicationAttr(const AttrSite& a) {
  HloInstruction* instr = a.instr;
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
      return Error(a.vpos, Cat("parameter_replication: expected true or false, found '", flag, "'"));
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (instr->shape().element_type != PrimitiveType::kInvalid) {
    const int64_t leaves = instr->shape().LeafCount();
    if (leaves != flags) {
      return Error(a.vpos, Cat("parameter_replication has ", flags, " elements, but the shape ",
                               instr->shape().ToString(false), " has ", leaves, " leaf buffers"));
    }
  }
  instr->mutable_raw_attributes()->emplace_back(std::string(a.name), std::string(v));
  return true;
}

bool Parser::ParseApiVersionAttr(const AttrSite& a) {
  // Kept verbatim; one of XLA's CustomCallApiVersion values (hlo.proto), and not UNSPECIFIED.
  std::string_view v;
  if (!ParseIdent(&v, "an API version")) return false;
  if (v == "API_VERSION_UNSPECIFIED") return Error(a.vpos, "api_version=API_VERSION_UNSPECIFIED is not a valid API version");
  if (v != "API_VERSION_ORIGINAL" && v != "API_VERSION_STATUS_RETURNING" &&
      v != "API_VERSION_STATUS_RETURNING_UNIFIED" && v != "API_VERSION_TYPED_FFI") {
    return Error(a.vpos, Cat("unknown API version '", v, "' (API_VERSION_ORIGINAL, API_VERSION_STATUS_RETURNING, "
                             "API_VERSION_STATUS_RETURNING_UNIFIED or API_VERSION_TYPED_FFI)"));
  }
  a.instr->mutable_raw_attributes()->emplace_back(std::string(a.name), std::string(v));
  return true;
}

bool Parser::ParseVerbatimAttr(const AttrSite& a) {
  // Anything else is kept verbatim.
  std::string_view v;
  if (!ScanRawValue(&v)) return false;
  if (a.name == "result_accuracy") {
    if (std::string why = ResultAccuracyError(v); !why.empty()) {
      return Error(a.vpos, Cat("result_accuracy=", v, ": ", why));
    }
  }
  a.instr->mutable_raw_attributes()->emplace_back(std::string(a.name), std::string(v));
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
