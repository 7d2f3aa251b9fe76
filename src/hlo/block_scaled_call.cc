// XLA's block-scaling custom calls: operand roles and block size (contract in the header).
#include "hlo/block_scaled_call.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace weave {

BlockScaledKind BlockScaledKindOf(const HloInstruction& instr) {
  if (instr.opcode() != HloOpcode::kCustomCall) return BlockScaledKind::kNone;
  const std::string& t = instr.custom_call_target();
  if (t == kQuantizeTarget) return BlockScaledKind::kQuantize;
  if (t == kDequantizeTarget) return BlockScaledKind::kDequantize;
  if (t == kBlockScaledDotTarget) return BlockScaledKind::kDot;
  if (t == kCudnnBlockScaledDotTarget) return BlockScaledKind::kCudnnDot;
  return BlockScaledKind::kNone;
}

std::optional<int64_t> ConfiguredBlockSize(const HloInstruction& instr) {
  const std::string& cfg = instr.backend_config;
  const size_t at = cfg.find("block_scaled_dot_backend_config");
  if (at == std::string::npos) return std::nullopt;
  // JSON ("block_size":"32") or the proto text form XLA's tests write (block_size:32).
  size_t k = cfg.find("block_size", at + 31);
  if (k == std::string::npos) return std::nullopt;
  k = cfg.find(':', k);
  if (k == std::string::npos) return std::nullopt;
  ++k;
  while (k < cfg.size() && (cfg[k] == ' ' || cfg[k] == '"')) ++k;
  char* end = nullptr;
  const long long v = std::strtoll(cfg.c_str() + k, &end, 10);
  if (end == cfg.c_str() + k || v <= 0) return std::nullopt;
  return static_cast<int64_t>(v);
}

absl::StatusOr<int64_t> BlockSizeFromShapes(const Shape& data, const Shape& scale) {
  const int64_t rank = data.rank();
  if (!data.IsArray() || !scale.IsArray() || rank < 1 || rank != scale.rank()) {
    return absl::InvalidArgumentError(absl::StrCat("data ", data.ToString(false), " and scale ",
                                                   scale.ToString(false),
                                                   " must be arrays of one rank >= 1"));
  }
  const int64_t m = data.dims.back(), n = scale.dims.back();
  if (m <= 0 || n <= 0 || m % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data's last dim (", m, ") is not a multiple of the scale's (", n, ")"));
  }
  return m / n;
}

std::optional<int64_t> CudnnBlockSize(PrimitiveType data, PrimitiveType scale) {
  if ((data == PrimitiveType::F8E4M3FN || data == PrimitiveType::F8E5M2) &&
      scale == PrimitiveType::F8E8M0FNU) {
    return kBlockSizeMxfp8;
  }
  if (data == PrimitiveType::F4E2M1FN && scale == PrimitiveType::F8E4M3FN) return kBlockSizeNvfp4;
  return std::nullopt;
}

absl::StatusOr<int64_t> BlockScaledDotBlockSize(const HloInstruction& dot) {
  if (std::optional<int64_t> b = ConfiguredBlockSize(dot)) return *b;
  if (dot.operand_count() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(dot.name(), ": a block-scaled dot needs lhs, rhs and lhs_scale"));
  }
  absl::StatusOr<int64_t> b = BlockSizeFromShapes(dot.operand(0)->shape(), dot.operand(2)->shape());
  if (!b.ok()) return absl::InvalidArgumentError(absl::StrCat(dot.name(), ": ", b.status().message()));
  return b;
}

double QuantizeEmax(PrimitiveType t) {
  double max = 0;
  switch (t) {
    case PrimitiveType::F8E4M3FN: max = 448; break;
    case PrimitiveType::F8E5M2: max = 57344; break;
    case PrimitiveType::F8E4M3: max = 240; break;
    case PrimitiveType::F8E3M4: max = 15.5; break;
    case PrimitiveType::F8E4M3FNUZ: max = 240; break;
    case PrimitiveType::F8E5M2FNUZ: max = 57344; break;
    case PrimitiveType::F8E4M3B11FNUZ: max = 30; break;
    case PrimitiveType::F4E2M1FN: max = 6; break;
    case PrimitiveType::F6E2M3FN: max = 7.5; break;
    case PrimitiveType::F6E3M2FN: max = 28; break;
    case PrimitiveType::F16: max = 65504; break;
    case PrimitiveType::BF16: max = 3.3895313892515355e38; break;
    default: max = 3.4028234663852886e38; break;
  }
  int e = 0;
  std::frexp(max, &e);  // max in [2^(e-1), 2^e): its overflow exponent is e
  return std::ldexp(1.0, e - 1);
}

DotDims BlockScaledDotDims(int64_t rank) {
  DotDims d;
  d.lhs_contracting = {rank - 1};
  d.rhs_contracting = {rank - 1};
  if (rank == 3) {
    d.lhs_batch = {0};
    d.rhs_batch = {0};
  }
  return d;
}

}  // namespace weave
