// GpuTarget (the GPU of the FP8 GEMMs: CUDA compute capability or ROCm arch), its cuBLASLt /
// hipBLASLt workspace, and the FP8 operand-type rules of XLA's GemmRewriter per target (see
// fp8_gemm_rewriter.h).
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpu/fp8_gemm_internal.h"
#include "gpu/fp8_gemm_rewriter.h"

namespace weave {
namespace fp8_gemm_internal {

double Fp8MaxFinite(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::F8E4M3FN: return 448.0;
    case PrimitiveType::F8E5M2: return 57344.0;
    case PrimitiveType::F8E4M3FNUZ: return 240.0;
    case PrimitiveType::F8E5M2FNUZ: return 57344.0;
    default: return 0.0;
  }
}

bool IsFnuzFp8(PrimitiveType t) {
  return t == PrimitiveType::F8E4M3FNUZ || t == PrimitiveType::F8E5M2FNUZ;
}
bool IsOcpFp8(PrimitiveType t) {
  return t == PrimitiveType::F8E4M3FN || t == PrimitiveType::F8E5M2;
}

// The operand pair XLA's GemmRewriter takes on `target`; "" when allowed, else why not.
std::string Fp8PairRule(const GpuTarget& target, PrimitiveType ta, PrimitiveType tb) {
  const std::string a(PrimitiveTypeName(ta)), b(PrimitiveTypeName(tb));
  if (target.HasFnuzFp8()) {
    if (!IsFnuzFp8(ta) || !IsFnuzFp8(tb)) {
      return absl::StrCat(a, " x ", b, ": on ", target.Name(),
                          " (MI300) FP8 GEMMs take f8e4m3fnuz and f8e5m2fnuz operands");
    }
    if (ta == PrimitiveType::F8E5M2FNUZ && tb == PrimitiveType::F8E5M2FNUZ) {
      return "f8e5m2fnuz x f8e5m2fnuz is not supported by hipBLASLt (one operand must be "
             "f8e4m3fnuz)";
    }
    return "";
  }
  if (IsFnuzFp8(ta) || IsFnuzFp8(tb)) {
    return absl::StrCat(a, " x ", b, ": the FNUZ types are ROCm MI300 (gfx942) FP8 formats; ",
                        target.Name(), " takes f8e4m3fn and f8e5m2 (--gpu-compute-capability=gfx942 "
                        "targets MI300)");
  }
  if (ta == PrimitiveType::F8E5M2 && tb == PrimitiveType::F8E5M2) {
    return target.rocm ? "f8e5m2 x f8e5m2 is not supported by hipBLASLt"
                       : "f8e5m2 x f8e5m2 is not supported by cuBLASLt";
  }
  return "";
}

}  // namespace fp8_gemm_internal

absl::StatusOr<GpuTarget> GpuTarget::Parse(std::string_view text) {
  GpuTarget t;
  if (text.size() > 3 && text.substr(0, 3) == "gfx") {
    for (char c : text.substr(3)) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) {
        return absl::InvalidArgumentError(absl::StrCat("bad ROCm arch '", std::string(text), "'"));
      }
    }
    t.rocm = true;
    t.gfx = std::string(text);
    return t;
  }
  double cc = 0;
  if (!absl::SimpleAtod(std::string(text), &cc) || !(cc > 0 && cc < 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu-compute-capability must be like 9.0 (CUDA) or gfx942 (ROCm), got '",
                     std::string(text), "'"));
  }
  t.cuda_cc = cc;
  return t;
}

std::string GpuTarget::Name() const {
  return rocm ? gfx : absl::StrFormat("compute capability %.1f", cuda_cc);
}

bool GpuTarget::HasFnuzFp8() const { return rocm && gfx == "gfx942"; }

bool GpuTarget::HasOcpFp8() const {
  if (!rocm) return cuda_cc >= 8.9;
  return gfx == "gfx950" || gfx == "gfx1200" || gfx == "gfx1201" || gfx == "gfx1250";
}

int64_t GpuTarget::WorkspaceBytes() const {
  if (!rocm) return CublasWorkspaceBytes(cuda_cc);
  if (gfx == "gfx942") return int64_t{76} << 20;
  if (gfx == "gfx950") return int64_t{64} << 20;
  return int64_t{4} << 20;
}

int64_t CublasWorkspaceBytes(double compute_capability) {
  return compute_capability >= 9.0 ? int64_t{33554432} : int64_t{4194304};
}

}  // namespace weave
