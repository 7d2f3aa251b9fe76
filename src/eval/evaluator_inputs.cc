// The evaluator's inputs (eval/evaluator.h, MakeInputs): a random array per parameter from the
// seed, the same on every device for replicated (and, by default, unannotated) parameters; a
// tiled parameter gets its tile of one global array; given arrays override either.
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/evaluator.h"
#include "eval/evaluator_internal.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "hlo/status_macros.h"

namespace weave::eval {
namespace {

using absl::InvalidArgumentError;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A random array: floats uniform in [-1, 1) rounded to the type (MX data types f4e2m1fn/f6*:
// [-4, 4); the MX scale type f8e8m0fnu: powers of two 2^-4 .. 2^3), integers in [0, 8), pred 0/1,
// complex values with both parts uniform in [-1, 1) (f32 parts for c64).
Value RandomArray(const Shape& s, uint64_t stream) {
  Value v = Value::Zeros(s);
  uint64_t state = Mix(stream);
  const int64_t n = s.ElementCount();
  const PrimitiveType t = s.element_type;
  for (int64_t k = 0; k < n; ++k) {
    state = Mix(state);
    switch (v.storage()) {
      case Storage::kFloat: {
        const double u = static_cast<double>(state >> 40) * 0x1.0p-24 * 2.0 - 1.0;
        if (t == PrimitiveType::F8E8M0FNU) {  // a block scale: 2^-4 .. 2^3
          v.f[static_cast<size_t>(k)] = static_cast<float>(std::ldexp(1.0, static_cast<int>(std::floor(u * 4.0))));
        } else if (t == PrimitiveType::F4E2M1FN || t == PrimitiveType::F6E2M3FN ||
                   t == PrimitiveType::F6E3M2FN) {  // MX data: [-4, 4), so most codes occur
          v.f[static_cast<size_t>(k)] = static_cast<float>(RoundToType(u * 4.0, t));
        } else {
          v.f[static_cast<size_t>(k)] = static_cast<float>(RoundToType(u, t));
        }
        break;
      }
      case Storage::kDouble:
        v.d[static_cast<size_t>(k)] = static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0;
        break;
      case Storage::kInt:
        v.i[static_cast<size_t>(k)] = t == PrimitiveType::PRED ? static_cast<int64_t>(state & 1)
                                                                : static_cast<int64_t>(state % 8);
        break;
      case Storage::kComplex: {
        const double re = static_cast<double>(state >> 40) * 0x1.0p-24 * 2.0 - 1.0;
        const double im = static_cast<double>((state >> 16) & 0xffffff) * 0x1.0p-24 * 2.0 - 1.0;
        v.c[static_cast<size_t>(k)] = RoundComplex({re, im}, t);
        break;
      }
      default: break;
    }
  }
  return v;
}

bool IsTiled(const std::optional<HloSharding>& sh) {
  return sh.has_value() && sh->kind == HloSharding::Kind::kTiled && sh->DataRank() > 0;
}

bool IsReplicatedLike(const std::optional<HloSharding>& sh) {
  if (!sh.has_value()) return false;
  if (sh->kind == HloSharding::Kind::kReplicated || sh->kind == HloSharding::Kind::kMaximal) return true;
  if (sh->kind == HloSharding::Kind::kTiled) {
    // All data tile dims 1: replicated (e.g. devices=[1,1,4]last_tile_dim_replicate).
    for (int64_t j = 0; j < sh->DataRank(); ++j) {
      if (sh->tile_dims[static_cast<size_t>(j)] != 1) return false;
    }
    return true;
  }
  return false;
}

// The global shape of a tiled parameter with local shape `local`.
Shape GlobalShape(const Shape& local, const HloSharding& sh) {
  Shape g = local;
  g.layout.reset();
  for (int64_t j = 0; j < sh.DataRank() && j < local.rank(); ++j) {
    g.dims[static_cast<size_t>(j)] *= sh.tile_dims[static_cast<size_t>(j)];
  }
  return g;
}

absl::StatusOr<Value> TileOf(const Value& global, const Shape& local, const HloSharding& sh,
                             int64_t partition) {
  auto idx = sh.TileIndexForDevice(partition);
  if (!idx.has_value()) {
    return InvalidArgumentError(absl::StrCat("partition ", partition,
                                             " is not in the tile assignment ", sh.ToString()));
  }
  std::vector<SliceDim> sl(local.dims.size());
  for (size_t j = 0; j < local.dims.size(); ++j) {
    const int64_t t = j < idx->size() ? (*idx)[j] : 0;
    sl[j].start = t * local.dims[j];
    sl[j].limit = sl[j].start + local.dims[j];
  }
  return ops::Slice(global, local, sl);
}

}  // namespace

absl::StatusOr<Inputs> MakeInputs(const HloModule& module, const EvalOptions& options,
                                  const std::vector<InputOverride>& overrides) {
  const HloComputation* entry = module.entry();
  if (entry == nullptr) return InvalidArgumentError("module has no entry computation");
  RETURN_IF_ERROR(internal::CheckValueSizes(module));
  const int64_t n = ResolvedNumPartitions(module, options);
  const int64_t r = ResolvedReplicaCount(module, options);
  const int64_t devices = n * r;
  const int64_t num_params = entry->num_parameters();
  Inputs in;
  in.per_device.assign(static_cast<size_t>(devices), std::vector<ValuePtr>(static_cast<size_t>(num_params)));
  for (const InputOverride& o : overrides) {
    if (o.parameter < 0 || o.parameter >= num_params) {
      return InvalidArgumentError(absl::StrCat("input for parameter ", o.parameter,
                                               " but the entry has ", num_params,
                                               " parameters"));
    }
    if (o.device >= devices) {
      return InvalidArgumentError(absl::StrCat("input for partition ", o.device, " but only ",
                                               devices, " devices run"));
    }
  }
  for (int64_t i = 0; i < num_params; ++i) {
    const HloInstruction* p = entry->parameter(i);
    if (p == nullptr) return InvalidArgumentError(absl::StrCat("entry parameter ", i, " is missing"));
    const Shape& local = p->shape();
    const std::optional<HloSharding>& sh = p->sharding;
    const uint64_t base = Mix(options.seed * 0x100000001b3ull + static_cast<uint64_t>(i) + 1);
    // Overrides for this parameter.
    const InputOverride* global_override = nullptr;
    std::vector<const InputOverride*> device_override(static_cast<size_t>(devices), nullptr);
    for (const InputOverride& o : overrides) {
      if (o.parameter != i) continue;
      if (o.device < 0) global_override = &o;
      else device_override[static_cast<size_t>(o.device)] = &o;
    }
    if (local.IsTuple()) {
      if (global_override != nullptr) {
        return InvalidArgumentError(absl::StrCat("parameter ", i, " is a tuple: give it per leaf is not supported"));
      }
      for (int64_t d = 0; d < devices; ++d) {
        // Only parameters without any sharding follow replicate_unsharded ({manual} differs).
        const bool same = (options.replicate_unsharded && !sh.has_value()) || IsReplicatedLike(sh);
        std::function<Value(const Shape&, uint64_t)> gen = [&](const Shape& s, uint64_t st) {
          if (!s.IsTuple()) return RandomArray(s, st);
          Value t;
          t.shape = s;
          for (size_t k = 0; k < s.tuple_shapes.size(); ++k) {
            t.elements.push_back(Share(gen(s.tuple_shapes[k], Mix(st + k + 1))));
          }
          return t;
        };
        in.per_device[static_cast<size_t>(d)][static_cast<size_t>(i)] =
            Share(gen(local, same ? base : Mix(base + static_cast<uint64_t>(d) + 1)));
      }
      continue;
    }
    if (!local.IsArray() || StorageFor(local.element_type) == Storage::kNone) {
      return InvalidArgumentError(absl::StrCat("parameter ", i, " has unsupported type ",
                                               local.ToString(false)));
    }
    auto check = [&](const Value& v, const Shape& want, const char* what) -> absl::Status {
      if (v.shape.element_type != want.element_type || v.shape.dims != want.dims) {
        return InvalidArgumentError(absl::StrCat("input for parameter ", i, " (", what,
                                                 ") has shape ", v.shape.ToString(false),
                                                 ", expected ", want.ToString(false)));
      }
      return absl::OkStatus();
    };
    const bool tiled = IsTiled(sh) && !IsReplicatedLike(sh);
    if (tiled) {
      const Shape global = GlobalShape(local, *sh);
      Value g;
      if (global_override != nullptr) {
        RETURN_IF_ERROR(check(*global_override->value, global, "global array of a sharded parameter"));
        g = *global_override->value;
      } else {
        g = RandomArray(global, base);
      }
      for (int64_t d = 0; d < devices; ++d) {
        auto tile = TileOf(g, local, *sh, d % n);
        if (!tile.ok()) return InvalidArgumentError(absl::StrCat("parameter ", i, ": ", tile.status().message()));
        tile->shape = local;
        in.per_device[static_cast<size_t>(d)][static_cast<size_t>(i)] = Share(std::move(*tile));
      }
    } else {
      const bool same = (options.replicate_unsharded && !sh.has_value()) ||
                        IsReplicatedLike(sh) || global_override != nullptr;
      ValuePtr shared;
      if (global_override != nullptr) {
        RETURN_IF_ERROR(check(*global_override->value, local, "local array"));
        Value v = *global_override->value;
        v.shape = local;
        shared = Share(std::move(v));
      } else if (same) {
        shared = Share(RandomArray(local, base));
      }
      for (int64_t d = 0; d < devices; ++d) {
        in.per_device[static_cast<size_t>(d)][static_cast<size_t>(i)] =
            same ? shared : Share(RandomArray(local, Mix(base + static_cast<uint64_t>(d) + 1)));
      }
    }
    for (int64_t d = 0; d < devices; ++d) {
      if (const InputOverride* o = device_override[static_cast<size_t>(d)]) {
        RETURN_IF_ERROR(check(*o->value, local, "one partition's local array"));
        Value v = *o->value;
        v.shape = local;
        in.per_device[static_cast<size_t>(d)][static_cast<size_t>(i)] = Share(std::move(v));
      }
    }
  }
  return in;
}

}  // namespace weave::eval
