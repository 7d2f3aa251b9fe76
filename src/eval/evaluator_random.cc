// rng in the reference evaluator: XLA's `rng` (RandomDistribution RNG_UNIFORM / RNG_NORMAL,
// operands a and b as scalars; xla/hlo/evaluator's HandleRng gives the ranges) with a
// deterministic generator.
//
//   distribution=rng_uniform  integers in [a, b) (every element a when b <= a), floats in [a, b)
//                             (a value that rounds up to b in the element type is taken as a);
//   distribution=rng_normal   floats, mean a, standard deviation b (Box-Muller).
//
// The stream is SplitMix64 of (EvalOptions::seed, the device, the instruction's name, how many
// times this device has run the instruction, the element): the same run gives the same values,
// and every device and every loop trip draws its own values, as separate devices' generators do
// in XLA. A partitioned module whose replicas must agree on a random value therefore has to make
// them agree (XLA's partitioner computes it on one device of each group and broadcasts it); the
// global-vs-partitioned check (global_compare.h) compares random outputs on shape, range and
// the agreement of their copies, never on values.
//
// infeed: the host's queue, modelled as the same queue on every device: the k-th infeed a device
// reads holds generated values (SplitMix64 of the seed, k and the element: multiples of 1/8 in
// [-2, 2) for floats, exact in every float type; [-8, 8) for signed and [0, 16) for unsigned
// integers; pred 0/1) at the infeed's declared data shape (tuple leaves in order). A partitioned
// module that reads a global-shaped infeed on every device therefore reads what the global program
// reads; one that reads its local tile (XLA's partitioned infeed, fed per device by the runtime)
// is not modelled.
#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "eval/evaluator_internal.h"

namespace weave::eval::internal {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashName(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

// A double in [0, 1) from 53 bits.
double Unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalRng(const HloInstruction* instr,
                                                  const std::vector<ValuePtr>& ops) {
  const Shape& shape = instr->shape();
  if (!shape.IsArray()) return absl::InvalidArgumentError("rng must have an array shape");
  if (ops.size() != 2 || ops[0]->shape.rank() != 0 || ops[1]->shape.rank() != 0) {
    return absl::InvalidArgumentError("rng takes two scalar operands");
  }
  const std::string* dist = instr->GetRawAttribute("distribution");
  const bool normal = dist != nullptr && *dist == "rng_normal";
  if (dist == nullptr || (!normal && *dist != "rng_uniform")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "distribution=", dist == nullptr ? "(missing)" : *dist, " is not rng_uniform or rng_normal"));
  }
  Value v = Value::Zeros(shape);
  const uint64_t count = static_cast<uint64_t>(exec_count_[instr]++);
  const uint64_t key = Mix(Mix(Mix(program_.seed ^ 0x726e67ULL) ^ static_cast<uint64_t>(device_)) ^
                           HashName(instr->name())) ^ Mix(count);
  const int64_t size = v.size();
  if (v.storage() == Storage::kInt) {
    if (normal) return absl::InvalidArgumentError("rng_normal needs a floating-point result");
    // a + (h mod (b - a)) in unsigned arithmetic: exact for every integer type up to 64 bits.
    const int64_t a = ops[0]->GetInt(0), b = ops[1]->GetInt(0);
    const bool is_unsigned = IsUnsignedInteger(shape.element_type);
    const bool empty = is_unsigned ? static_cast<uint64_t>(b) <= static_cast<uint64_t>(a) : b <= a;
    const uint64_t range = static_cast<uint64_t>(b) - static_cast<uint64_t>(a);
    for (int64_t k = 0; k < size; ++k) {
      const uint64_t h = Mix(key + static_cast<uint64_t>(k));
      v.SetInt(k, empty ? a : static_cast<int64_t>(static_cast<uint64_t>(a) + h % range));
    }
    return Share(std::move(v));
  }
  if (v.storage() != Storage::kFloat && v.storage() != Storage::kDouble) {
    return absl::InvalidArgumentError("rng needs an integer or floating-point result");
  }
  const double a = ops[0]->GetDouble(0), b = ops[1]->GetDouble(0);
  for (int64_t k = 0; k < size; ++k) {
    const uint64_t h = Mix(key + static_cast<uint64_t>(k));
    if (normal) {
      const double u1 = 1.0 - Unit(h), u2 = Unit(Mix(h));
      v.SetDouble(k, a + b * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
      continue;
    }
    v.SetDouble(k, a + (b - a) * Unit(h));
    if (!(v.GetDouble(k) < b)) v.SetDouble(k, a);
  }
  return Share(std::move(v));
}

namespace {

void FillInfeed(const Shape& shape, uint64_t key, uint64_t* leaf, std::vector<ValuePtr>* out) {
  if (shape.IsTuple()) {
    for (const Shape& e : shape.tuple_shapes) FillInfeed(e, key, leaf, out);
    return;
  }
  Value v = Value::Zeros(shape);
  const uint64_t base = Mix(key ^ Mix(++*leaf));
  for (int64_t k = 0; k < v.size(); ++k) {
    const uint64_t h = Mix(base + static_cast<uint64_t>(k));
    if (shape.element_type == PrimitiveType::PRED) {
      v.SetInt(k, static_cast<int64_t>(h & 1));
    } else if (v.storage() == Storage::kInt) {
      v.SetInt(k, IsUnsignedInteger(shape.element_type) ? static_cast<int64_t>(h % 16)
                                                          : static_cast<int64_t>(h % 16) - 8);
    } else if (v.storage() == Storage::kFloat || v.storage() == Storage::kDouble) {
      v.SetDouble(k, (static_cast<double>(h % 32) - 16.0) / 8.0);
    }
  }
  out->push_back(Share(std::move(v)));
}

ValuePtr Rebuild(const Shape& shape, const std::vector<ValuePtr>& leaves, size_t* next) {
  if (!shape.IsTuple()) return leaves[(*next)++];
  Value t;
  t.shape = shape;
  for (const Shape& e : shape.tuple_shapes) t.elements.push_back(Rebuild(e, leaves, next));
  return Share(std::move(t));
}

}  // namespace

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalInfeed(const HloInstruction* instr) {
  const Shape& shape = instr->shape();
  if (!shape.IsTuple() || shape.tuple_shapes.size() != 2) {
    return absl::InvalidArgumentError("infeed must have the shape (data, token[])");
  }
  const Shape& data = shape.tuple_shapes[0];
  std::vector<const Shape*> stack = {&data};
  while (!stack.empty()) {
    const Shape* s = stack.back();
    stack.pop_back();
    if (s->IsTuple()) {
      for (const Shape& e : s->tuple_shapes) stack.push_back(&e);
    } else if (!s->IsArray() || StorageFor(s->element_type) == Storage::kNone) {
      return absl::InvalidArgumentError(absl::StrCat("infeed data of type ", s->ToString(false),
                                                     " is not supported by the evaluator"));
    }
  }
  const uint64_t key = Mix(Mix(program_.seed ^ 0x696e66656564ULL) ^ static_cast<uint64_t>(infeeds_++));
  std::vector<ValuePtr> leaves;
  uint64_t leaf = 0;
  FillInfeed(data, key, &leaf, &leaves);
  size_t next = 0;
  Value t;
  t.shape = shape;
  t.elements.push_back(Rebuild(data, leaves, &next));
  Value token;
  token.shape = shape.tuple_shapes[1];
  t.elements.push_back(Share(std::move(token)));
  return Share(std::move(t));
}

}  // namespace weave::eval::internal
