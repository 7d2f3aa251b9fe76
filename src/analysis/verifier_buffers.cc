// The verifier's buffer rules (analysis/verifier.h): XLA's VerifyBuffers (hlo_verifier.cc). A
// buffer shape `b(f32[32])` is an array custom-calls write in place. It is made by Pin (from an
// array) or CreateBuffer and turned back into an array by Unpin; other custom-calls take and give
// buffers only through output_to_operand_aliasing, each buffer once; a buffer has one writer; and
// only tuples, get-tuple-elements, custom-calls, while loops, parameters (not the entry's),
// dynamic-update-slice (into a buffer) and async ops hold buffers.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "analysis/verifier_checker.h"
#include "hlo/async_chain.h"
#include "hlo/status_macros.h"

namespace weave::verifier_internal {
namespace {

using Index = std::vector<int64_t>;

absl::Status BufErr(const HloInstruction& h, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat("instruction '", h.name(), "' in computation '",
                                                 h.parent() != nullptr ? h.parent()->name() : std::string("<none>"),
                                                 "': ", std::string(HloOpcodeString(h.opcode())), ": ", msg));
}

bool HasBuffer(const Shape& s) {
  if (s.buffer) return true;
  for (const Shape& e : s.tuple_shapes) {
    if (HasBuffer(e)) return true;
  }
  return false;
}

// Every buffer subshape of `s` with its index.
void Buffers(const Shape& s, Index* at, std::vector<Index>* out) {
  if (s.buffer) out->push_back(*at);
  if (!s.IsTuple()) return;
  for (size_t i = 0; i < s.tuple_shapes.size(); ++i) {
    at->push_back(static_cast<int64_t>(i));
    Buffers(s.tuple_shapes[i], at, out);
    at->pop_back();
  }
}
std::vector<Index> Buffers(const Shape& s) {
  Index at;
  std::vector<Index> out;
  Buffers(s, &at, &out);
  return out;
}

class BufferChecker {
 public:
  explicit BufferChecker(const HloModule& m) {
    for (const HloComputation* c : m.computations()) {
      for (const HloInstruction* h : c->instructions()) {
        if (h->opcode() == HloOpcode::kWhile && h->called_computations().size() == 2) {
          loop_bodies_.insert(h->called_computations()[1]);
        }
        if (h->opcode() == HloOpcode::kAsyncStart && !h->called_computations().empty() &&
            AsyncWrapsComputation(*h)) {
          async_computations_.insert(h->called_computations()[0]);
        }
      }
    }
  }

  absl::Status Check(const HloModule& m) {
    for (const HloComputation* c : m.computations()) {
      if (async_computations_.contains(c)) {
        // Only the wrapped op is checked; the async ops follow it.
        if (c->root() != nullptr && c->root()->opcode() == HloOpcode::kCustomCall) {
          RETURN_IF_ERROR(CustomCall(*c->root(), c->root()->shape(), true));
        }
        continue;
      }
      for (const HloInstruction* h : c->instructions()) {
        RETURN_IF_ERROR(Instruction(*h, c == m.entry()));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Instruction(const HloInstruction& h, bool in_entry) {
    switch (h.opcode()) {
      case HloOpcode::kAsyncStart:
        // `custom-call-start` carries its custom-call's attributes: checked as that call, whose
        // result is the start's {1} (its writers are the async ops that follow).
        if (h.async_sugar() == "custom-call" && h.shape().IsTuple() && h.shape().tuple_shapes.size() > 1) {
          return CustomCall(h, h.shape().tuple_shapes[1], /*count_writers=*/false);
        }
        return absl::OkStatus();
      case HloOpcode::kAsyncUpdate:
      case HloOpcode::kAsyncDone:
      case HloOpcode::kTuple:
      case HloOpcode::kGetTupleElement:
        return absl::OkStatus();
      case HloOpcode::kCall:
        if (h.frontend_attributes.contains("_xla_stream_annotation")) return absl::OkStatus();
        return NoBuffers(h);
      case HloOpcode::kCustomCall:
        return CustomCall(h, h.shape(), /*count_writers=*/true);
      case HloOpcode::kWhile:
        return UniqueWriters(h);
      case HloOpcode::kParameter:
        if (in_entry && !Buffers(h.shape()).empty()) {
          return BufErr(h, "an entry parameter cannot hold a buffer");
        }
        return UniqueWriters(h);
      case HloOpcode::kDynamicUpdateSlice:
        if (h.operand_count() > 0 && h.operand(0)->shape().buffer) {
          RETURN_IF_ERROR(UniqueWriters(h));
          for (int64_t i = 1; i < h.operand_count(); ++i) {
            if (!Buffers(h.operand(i)->shape()).empty()) return BufErr(h, absl::StrCat("operand ", i, " cannot be a buffer"));
          }
          if (!h.shape().buffer) return BufErr(h, "the result must be a buffer when operand 0 is one");
          return absl::OkStatus();
        }
        return NoBuffers(h);
      default:
        return NoBuffers(h);
    }
  }

  absl::Status NoBuffers(const HloInstruction& h) {
    if (!Buffers(h.shape()).empty()) return BufErr(h, "buffers are not allowed here (in its result)");
    for (int64_t i = 0; i < h.operand_count(); ++i) {
      if (!Buffers(h.operand(i)->shape()).empty()) {
        return BufErr(h, absl::StrCat("buffers are not allowed here (in operand ", i, ")"));
      }
    }
    return absl::OkStatus();
  }

  // A custom-call's buffers, its result being `result`; with `count_writers`, each buffer it
  // gives has one writer.
  absl::Status CustomCall(const HloInstruction& h, const Shape& result, bool count_writers) {
    const std::string& t = h.custom_call_target();
    const std::string* raw = h.GetRawAttribute("output_to_operand_aliasing");
    // Unreadable aliasing is the aliasing rule's error (verifier_async.cc); here it aliases nothing.
    const std::optional<std::vector<AliasEntry>> alias =
        raw == nullptr ? std::optional<std::vector<AliasEntry>>(std::vector<AliasEntry>{}) : ReadAliasing(*raw);
    const size_t aliases = alias ? alias->size() : 0;
    if (t == "Pin" || t == "Unpin") {
      const bool pin = t == "Pin";
      const Shape* in = h.operand_count() == 1 ? &h.operand(0)->shape() : nullptr;
      if (in == nullptr || !in->IsArray() || in->buffer == pin) {
        return BufErr(h, absl::StrCat("custom_call_target=\"", t, "\" takes one ", pin ? "array" : "buffer", " operand"));
      }
      if (!result.IsArray() || result.buffer != pin) {
        return BufErr(h, absl::StrCat("custom_call_target=\"", t, "\" gives one ", pin ? "buffer" : "array", " result"));
      }
      if (!ShapesMatch(*in, result)) {
        return BufErr(h, absl::StrCat("custom_call_target=\"", t, "\": the result ", ShapeText(result),
                                      " is not the operand's shape ", ShapeText(*in)));
      }
      if (aliases != 1) {
        return BufErr(h, absl::StrCat("custom_call_target=\"", t, "\" needs one output_to_operand_aliasing entry"));
      }
      return pin && count_writers ? UniqueWriter(h, {}) : absl::OkStatus();
    }
    if (t == "CreateBuffer") {
      if (h.operand_count() != 0) return BufErr(h, "custom_call_target=\"CreateBuffer\" takes no operand");
      if (!result.buffer) return BufErr(h, "custom_call_target=\"CreateBuffer\" gives one buffer result");
      return count_writers ? UniqueWriter(h, {}) : absl::OkStatus();
    }
    // Any other custom-call: each buffer operand part and result part in exactly one alias.
    std::map<std::pair<int64_t, Index>, int> by_operand;
    std::map<Index, int> by_output;
    if (alias) {
      for (const AliasEntry& e : *alias) {
        ++by_operand[{e.operand, e.operand_index}];
        ++by_output[e.output];
      }
    }
    for (int64_t i = 0; i < h.operand_count(); ++i) {
      for (const Index& b : Buffers(h.operand(i)->shape())) {
        auto it = by_operand.find({i, b});
        if (it == by_operand.end()) {
          return BufErr(h, absl::StrCat("buffer operand ", i, " ", Dims(b), " is not aliased to a result"));
        }
        if (it->second > 1) {
          return BufErr(h, absl::StrCat("buffer operand ", i, " ", Dims(b), " is aliased to several results"));
        }
      }
    }
    for (const Index& b : Buffers(result)) {
      auto it = by_output.find(b);
      if (it == by_output.end()) return BufErr(h, absl::StrCat("buffer result ", Dims(b), " is not aliased to an operand"));
      if (it->second > 1) return BufErr(h, absl::StrCat("buffer result ", Dims(b), " is aliased to several operands"));
      if (!count_writers) continue;
      RETURN_IF_ERROR(UniqueWriter(h, b));
    }
    return absl::OkStatus();
  }

  absl::Status UniqueWriters(const HloInstruction& h) {
    for (const Index& b : Buffers(h.shape())) {
      RETURN_IF_ERROR(UniqueWriter(h, b));
    }
    return absl::OkStatus();
  }

  absl::Status UniqueWriter(const HloInstruction& h, const Index& at) {
    if (Writers(h, at, 0) > 1) {
      return BufErr(h, absl::StrCat("the buffer at ", Dims(at), " has more than one writer (or unpin)"));
    }
    return absl::OkStatus();
  }

  // XLA's CountWriters: the users that may write the buffer at `at` of `h`'s value, following
  // tuples and get-tuple-elements; a call, fusion, custom-call, async op, loop, conditional or
  // dynamic-update-slice writes it; a loop body's root passes it to the next iteration's writer.
  int64_t Writers(const HloInstruction& h, const Index& at, int depth) {
    if (depth > 64) return 0;
    int64_t n = 0;
    for (const HloInstruction* u : h.users()) {
      switch (u->opcode()) {
        case HloOpcode::kCall:
        case HloOpcode::kFusion:
        case HloOpcode::kCustomCall:
        case HloOpcode::kAsyncStart:
        case HloOpcode::kAsyncUpdate:
        case HloOpcode::kAsyncDone:
        case HloOpcode::kWhile:
        case HloOpcode::kConditional:
        case HloOpcode::kDynamicUpdateSlice:
          ++n;
          break;
        case HloOpcode::kGetTupleElement:
          if (!at.empty() && u->tuple_index == at[0]) n += Writers(*u, Index(at.begin() + 1, at.end()), depth + 1);
          break;
        case HloOpcode::kTuple:
          if (h.parent() != nullptr && h.parent()->root() == u) {
            if (loop_bodies_.contains(h.parent())) ++n;
          } else {
            for (int64_t k = 0; k < u->operand_count(); ++k) {
              if (u->operand(k) != &h) continue;
              Index deeper = {k};
              deeper.insert(deeper.end(), at.begin(), at.end());
              n += Writers(*u, deeper, depth + 1);
            }
          }
          break;
        default:
          break;
      }
    }
    return n;
  }

  absl::flat_hash_set<const HloComputation*> loop_bodies_, async_computations_;
};

}  // namespace

absl::Status VerifyModuleBuffers(const HloModule& module) {
  // Most modules hold no buffer: a scan without allocations decides that first.
  bool any = false;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* h : c->instructions()) any = any || HasBuffer(h->shape());
  }
  if (!any) return absl::OkStatus();
  return BufferChecker(module).Check(module);
}

}  // namespace weave::verifier_internal
