// HLO text parser: sharding and replica-group attributes. See parser_internal.h.
#include "hlo/parser_internal.h"

namespace weave::parser_internal {

// `sharding={...}`: the braces' text goes to ParseSharding (hlo/sharding.h).
bool Parser::ParseShardingAttr(HloInstruction* instr) {
  SkipWs();
  const size_t vpos = pos_;
  std::string_view v;
  if (!ScanBraces(&v)) return false;
  auto s = ParseSharding(v);
  if (!s.ok()) return Error(vpos, Cat("bad sharding: ", s.status().message()));
  instr->sharding = *std::move(s);
  return true;
}

bool Parser::ParseReplicaGroupsAttr(HloInstruction* instr) {
  SkipWs();
  size_t b = pos_;
  char c = Peek();
  if (c == '{') {
    std::string_view v;
    if (!ScanBraces(&v)) return false;
  } else if (c == '[') {
    // [G,S]<=[dims]T(perm)
    auto skip_group = [&](char open, char close) {
      if (pos_ >= src_.size() || src_[pos_] != open) return false;
      size_t e = src_.find(close, pos_);
      if (e == std::string_view::npos) return false;
      pos_ = e + 1;
      return true;
    };
    if (!skip_group('[', ']')) return Error(b, "malformed iota replica groups");
    SkipWs();
    if (src_.substr(pos_, 2) != "<=") return Expected("'<=' in iota replica groups");
    pos_ += 2;
    SkipWs();
    if (!skip_group('[', ']')) return Error(b, "malformed iota replica groups");
    if (pos_ < src_.size() && src_[pos_] == 'T') {
      ++pos_;
      if (!skip_group('(', ')')) return Error(b, "malformed iota replica groups transpose");
    }
  } else if (PeekIdent() == "mesh" || PeekIdent() == "maximal_mesh") {
    pos_ += PeekIdent().size();
    if (Peek() != '[') return Expected("'[' after mesh");
    size_t e = src_.find(']', pos_);
    if (e == std::string_view::npos) return Error(b, "malformed mesh replica groups");
    pos_ = e + 1;
    // Optional `, device_ids=(...)` (XLA's Mesh::ToString for a non-iota mesh).
    const size_t save = pos_;
    if (Consume(',') && PeekIdent() == "device_ids") {
      size_t close = src_.find(')', pos_);
      if (close == std::string_view::npos) return Error(b, "malformed mesh device_ids");
      pos_ = close + 1;
    } else {
      pos_ = save;
    }
    if (Peek() == '{') {
      std::string_view v;
      if (!ScanBraces(&v)) return false;
    }
  } else {
    return Expected("replica groups");
  }
  auto rg = ParseReplicaGroups(src_.substr(b, pos_ - b));
  if (!rg.ok()) return Error(b, Cat("bad replica_groups: ", rg.status().message()));
  instr->replica_groups = *std::move(rg);
  return true;
}

}  // namespace weave::parser_internal
