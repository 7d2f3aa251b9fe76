// windowed-einsum-handler, step 2 (continued): the cache's type. A loop that circulates FP8
// keeps an FP8 cache (dequantized after the loop per reader, as XLA's handler does) or a wide
// one (each shard dequantized in the body as it arrives). WhyNoWideCache says when a wide cache
// cannot serve the all-gathers, ChooseWideCache takes the option or asks the cost gate
// (passes/cost_oracle.h) with both variants; AddCache (windowed_einsum_handler_cache.cc) builds
// the one chosen.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "windowed_einsum/windowed_einsum_handler_internal.h"

namespace weave::handler_internal {

std::optional<std::vector<DequantMatch>> DequantReaders(HloInstruction* ag, std::string* why) {
  std::vector<DequantMatch> out;
  for (HloInstruction* c : ag->users()) {
    if (c->opcode() != HloOpcode::kConvert) {
      *why = absl::StrCat("'", c->name(), "' reads the FP8 all-gather '", ag->name(),
                          "' without dequantizing it");
      return std::nullopt;
    }
    for (HloInstruction* m : c->users()) {
      std::optional<DequantMatch> d = MatchDequantize(m);
      if (!d || d->q != ag || d->convert != c || !IsScalarScale(*d) ||
          !IsDequantWideType(d->wide_type)) {
        *why = absl::StrCat("'", m->name(), "' reads convert '", c->name(),
                            "' of the FP8 all-gather without a scalar dequantization");
        return std::nullopt;
      }
      out.push_back(*d);
    }
  }
  if (out.empty()) *why = absl::StrCat("nothing dequantizes the FP8 all-gather '", ag->name(), "'");
  if (out.empty()) return std::nullopt;
  return out;
}

std::string Handler::WhyNoWideCache(const WindowedLoop& L, const std::vector<CacheUse>& uses,
                                    WideForm* form) {
  const PrimitiveType et = L.while_instr->shape().tuple_shapes[L.windowed_operand].element_type;
  if (!IsFp8(et)) {
    return absl::StrCat("the loop circulates ", std::string(PrimitiveTypeName(et)), ", not FP8");
  }
  std::optional<WideForm> shared;
  std::string first;  // the all-gather `shared` came from
  std::vector<std::vector<DequantMatch>> readers(uses.size());
  for (size_t k = 0; k < uses.size(); ++k) {
    const CacheUse& u = uses[k];
    if (!u.dequant) {
      std::string why;
      std::optional<std::vector<DequantMatch>> r = DequantReaders(u.all_gather, &why);
      if (!r) return why;
      readers[k] = std::move(*r);
    }
    for (const DequantMatch& d : u.dequant ? std::vector<DequantMatch>{*u.dequant} : readers[k]) {
      const WideForm f{d.scale, d.is_divide, d.wide_type, {}};
      if (!shared) {
        shared = f;
        first = u.all_gather->name();
        continue;
      }
      if (f.scale != shared->scale || f.is_divide != shared->is_divide ||
          f.wide != shared->wide) {
        const std::string which =
            first == u.all_gather->name()
                ? absl::StrCat("all-gather '", first, "'")
                : absl::StrCat("all-gathers '", first, "' and '", u.all_gather->name(), "'");
        return absl::StrCat("the dequantizations of ", which,
                            " differ (scale, multiply or divide, or type)");
      }
    }
  }
  if (!shared) return "no all-gather to serve";
  // One cache for every use: the wide values it replaces must have one shape (layout too).
  const Shape* wide_shape = nullptr;
  for (size_t k = 0; k < uses.size(); ++k) {
    std::vector<const HloInstruction*> values;
    if (uses[k].dequant) values.push_back(uses[k].all_gather);
    for (const DequantMatch& d : readers[k]) values.push_back(d.root);
    for (const HloInstruction* v : values) {
      const Shape want = v->shape().WithElementType(shared->wide);
      if (wide_shape == nullptr) wide_shape = &v->shape();
      if (!(want == wide_shape->WithElementType(shared->wide))) {
        return absl::StrCat("'", v->name(), "' has another shape or layout than the cache");
      }
    }
  }
  // The scale enters the loop: it must not depend on it.
  if (IsAncestorOfWhile(L.while_instr, shared->scale)) {
    return absl::StrCat("the scale '", shared->scale->name(), "' depends on the loop");
  }
  *form = *shared;
  form->readers = std::move(readers);
  return "";
}

bool Handler::ChooseWideCache(const WindowedLoop& L, const std::vector<CacheUse>& uses,
                              WideForm* form, std::string* note) {
  using CacheType = WindowedEinsumHandler::CacheType;
  note->clear();
  if (cache_type_ == CacheType::kFp8) return false;
  const std::string why = WhyNoWideCache(L, uses, form);
  if (cache_type_ == CacheType::kWide) {
    if (why.empty()) return true;
    *note = absl::StrCat("; not a wide cache: ", why);
    return false;
  }
  // kAuto: a cost question, only for a loop that circulates FP8.
  if (oracle_ == nullptr || !why.empty()) return false;
  const HloInstruction* w = L.while_instr;
  std::vector<const HloInstruction*> seeds = {w, w->operand(0)};
  std::vector<std::string> names;
  auto add = [&seeds](const HloInstruction* i) {
    if (std::find(seeds.begin(), seeds.end(), i) == seeds.end()) seeds.push_back(i);
  };
  for (const CacheUse& u : uses) {
    add(u.all_gather);
    if (const HloInstruction* start = GatherAttributes(u.all_gather)) add(start);
    // The readers, and the readers of an FP8 all-gather's dequantizations.
    for (const HloInstruction* r : u.all_gather->users()) {
      add(r);
      if (u.dequant) continue;
      for (const HloInstruction* m : r->users()) {
        add(m);
        for (const HloInstruction* x : m->users()) add(x);
      }
    }
    names.push_back(absl::StrCat("'", u.all_gather->name(), "'"));
  }
  CostQuery q;
  q.pass = std::string(WindowedEinsumHandler::kName);
  q.location = w->name();
  q.what = absl::StrCat("cache of loop '", w->name(), "' for all-gather",
                        names.size() == 1 ? " " : "s ", absl::StrJoin(names, ", "),
                        " (FP8 or wide)");
  q.seeds = std::move(seeds);
  const std::string key(WindowedEinsumHandler::kCacheTypeOption);
  q.variants = {{"with the FP8 cache", true, {{key, "fp8"}}},
                {"with a wide cache filled in the ring", true, {{key, "wide"}}}};
  q.fallback = 0;
  CostEstimate e = oracle_->Decide(q);
  *note = absl::StrCat("; ", e.Note());
  return e.chosen == 1;
}

}  // namespace weave::handler_internal
