// Reference evaluation of the FP8 cuBLASLt GEMM custom call `__cublas$lt$matmul$f8` formed by
// fp8-gemm-rewriter (../shared/specs/fp8-gemm-rewrite.md §3), so that rewritten modules can be
// compared numerically with their input.
//
// Operands (XLA's order): a, b, [c when beta != 0], a_scale f32[], b_scale f32[],
// [bias when the epilogue has BIAS], [d_scale f32[] when D is FP8; absent means 1].
// Result: D, or a tuple (D, [f32[] amax when damax_output], [more], s8[workspace]).
// backend_config: GpuBackendConfig JSON; gemm_backend_config gives alpha_real, beta,
// dot_dimension_numbers (any number of batch and contracting dims), epilogue, damax_output.
//
// Semantics (cuBLASLt's FP8 matmul, with f32 compute type):
//   acc   = sum_k a[..,k] * b[..,k]           products exact, summed in f64, rounded once to f32
//   t     = (alpha * a_scale * b_scale) * acc + beta * c     (f32 arithmetic)
//   t     = epilogue(t [+ bias])                 RELU: max(t, 0); GELU: tanh approximation;
//                                                GELU_AUX also returns t before the GELU
//   amax  = max |t|                              (before d_scale; NaN if any t is NaN)
//   D     = FP8 output: round_fp8(clamp(t * d_scale, -max, max))   (saturating, as cuBLASLt)
//           otherwise: round(t) to D's type (bf16, f16, f32; round to nearest even)
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/custom_calls.h"
#include "eval/numerics.h"
#include "hlo/gemm_call.h"
#include "nlohmann/json.hpp"
#include "hlo/status_macros.h"

namespace weave::eval {
namespace {

using json = nlohmann::json;

absl::Status Error(const HloInstruction& instr, const std::string& msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("custom-call ", instr.name(), " (__cublas$lt$matmul$f8): ", msg));
}

std::vector<int64_t> IntList(const json& j) {
  std::vector<int64_t> out;
  if (!j.is_array()) return out;
  for (const json& e : j) {
    if (e.is_string()) out.push_back(std::stoll(e.get<std::string>()));
    else if (e.is_number_integer()) out.push_back(e.get<int64_t>());
  }
  return out;
}

double Number(const json& obj, const char* key, double def) {
  if (!obj.contains(key)) return def;
  const json& v = obj[key];
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return std::stod(v.get<std::string>());
  return def;
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v) if (e == x) return true;
  return false;
}

// Flat offsets, for every multi-index over `which` dims of `dims` (row-major over `which`), of
// the element in an array of `dims` (row-major) with those coordinates (other coordinates 0).
std::vector<int64_t> Offsets(const std::vector<int64_t>& dims, const std::vector<int64_t>& which) {
  const std::vector<int64_t> strides = RowMajorStrides(dims);
  std::vector<int64_t> out = {0};
  for (int64_t d : which) {
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<size_t>(dims[static_cast<size_t>(d)]));
    for (int64_t base : out) {
      for (int64_t i = 0; i < dims[static_cast<size_t>(d)]; ++i) {
        next.push_back(base + i * strides[static_cast<size_t>(d)]);
      }
    }
    out = std::move(next);
  }
  return out;
}

absl::StatusOr<float> ScalarF32(const HloInstruction& instr, const ValuePtr& v, const char* what) {
  if (!v->shape.IsArray() || v->shape.rank() != 0 || v->shape.element_type != PrimitiveType::F32) {
    return Error(instr, absl::StrCat(what, " must be an f32 scalar, got ", v->shape.ToString(false)));
  }
  return static_cast<float>(v->GetDouble(0));
}

float Gelu(float x) {
  // tanh approximation, as cuBLASLt's GELU epilogue.
  const float c = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}

absl::StatusOr<Value> EvalFp8Gemm(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  json cfg = json::parse(instr.backend_config, nullptr, false);
  if (!cfg.is_object() || !cfg.contains("gemm_backend_config") ||
      !cfg["gemm_backend_config"].is_object()) {
    return Error(instr, "backend_config has no gemm_backend_config");
  }
  const json& g = cfg["gemm_backend_config"];
  const double alpha = Number(g, "alpha_real", 1.0);
  const double beta = Number(g, "beta", 0.0);
  const std::string epilogue = g.value("epilogue", std::string("DEFAULT"));
  const bool damax = g.value("damax_output", false);
  const bool has_bias = epilogue == "BIAS" || epilogue == "BIAS_RELU" ||
                        epilogue == "BIAS_GELU" || epilogue == "BIAS_GELU_AUX";
  const bool relu = epilogue == "RELU" || epilogue == "BIAS_RELU";
  // GELU_AUX: the pre-activation value is also returned, as tuple element 1 in D's type.
  const bool aux = epilogue == "GELU_AUX" || epilogue == "BIAS_GELU_AUX";
  const bool gelu = epilogue == "GELU" || epilogue == "BIAS_GELU" || aux;
  if (!(epilogue == "DEFAULT" || has_bias || relu || gelu)) {
    return Error(instr, absl::StrCat("epilogue ", epilogue, " is not supported"));
  }
  std::vector<int64_t> lb, lc, rb, rc;
  if (g.contains("dot_dimension_numbers")) {
    const json& dn = g["dot_dimension_numbers"];
    lc = IntList(dn.value("lhs_contracting_dimensions", json::array()));
    rc = IntList(dn.value("rhs_contracting_dimensions", json::array()));
    lb = IntList(dn.value("lhs_batch_dimensions", json::array()));
    rb = IntList(dn.value("rhs_batch_dimensions", json::array()));
  }
  if (lc.size() != rc.size() || lb.size() != rb.size()) {
    return Error(instr, "dot_dimension_numbers have unequal lhs/rhs counts");
  }

  // Result D.
  const Shape& rs = instr.shape();
  const Shape d_shape = rs.IsTuple() ? (rs.tuple_shapes.empty() ? Shape() : rs.tuple_shapes[0]) : rs;
  if (!d_shape.IsArray()) return Error(instr, "result has no array D");
  const PrimitiveType dt = d_shape.element_type;
  const bool fp8_out = dt == PrimitiveType::F8E4M3FN || dt == PrimitiveType::F8E5M2 ||
                       dt == PrimitiveType::F8E4M3FNUZ || dt == PrimitiveType::F8E5M2FNUZ;
  const size_t amax_index = aux ? 2 : 1;
  if (damax && (!rs.IsTuple() || rs.tuple_shapes.size() <= amax_index ||
                rs.tuple_shapes[amax_index].element_type != PrimitiveType::F32 ||
                rs.tuple_shapes[amax_index].rank() != 0)) {
    return Error(instr, absl::StrCat("damax_output needs a tuple result with f32[] at index ",
                                     amax_index));
  }
  if (aux && (!rs.IsTuple() || rs.tuple_shapes.size() < 2 || rs.tuple_shapes[1] != d_shape)) {
    return Error(instr, "a GELU_AUX epilogue needs D's shape again at tuple index 1");
  }

  // Operands. An FP8 D may come without d_scale (XLA's call for a dot whose own result is FP8):
  // d_scale is then 1.
  const size_t base = 4 + (beta != 0 ? 1 : 0) + (has_bias ? 1 : 0);
  const bool has_d_scale = fp8_out && ops.size() == base + 1;
  if (ops.size() != base && !has_d_scale) {
    return Error(instr, absl::StrCat("expected ", base, fp8_out ? " or " : "",
                                     fp8_out ? std::to_string(base + 1) : std::string(),
                                     " operands (beta=", beta, ", epilogue=", epilogue, ", D ",
                                     PrimitiveTypeName(dt).data(), "), got ", ops.size()));
  }
  size_t next = 0;
  const Value& a = *ops[next++];
  const Value& b = *ops[next++];
  const Value* c = beta != 0 ? ops[next++].get() : nullptr;
  ASSIGN_OR_RETURN(float sa, ScalarF32(instr, ops[next++], "a_scale"));
  ASSIGN_OR_RETURN(float sb, ScalarF32(instr, ops[next++], "b_scale"));
  const Value* bias = has_bias ? ops[next++].get() : nullptr;
  float d_scale = 1.0f;
  if (has_d_scale) {
    ASSIGN_OR_RETURN(float ds, ScalarF32(instr, ops[next++], "d_scale"));
    d_scale = ds;
  }
  if (!a.shape.IsArray() || !b.shape.IsArray()) return Error(instr, "a and b must be arrays");

  const std::vector<int64_t>& ad = a.shape.dims;
  const std::vector<int64_t>& bd = b.shape.dims;
  for (int64_t d : lb) if (d < 0 || d >= a.shape.rank()) return Error(instr, "bad lhs batch dim");
  for (int64_t d : lc) if (d < 0 || d >= a.shape.rank()) return Error(instr, "bad lhs contracting dim");
  for (int64_t d : rb) if (d < 0 || d >= b.shape.rank()) return Error(instr, "bad rhs batch dim");
  for (int64_t d : rc) if (d < 0 || d >= b.shape.rank()) return Error(instr, "bad rhs contracting dim");
  std::vector<int64_t> lf, rf;
  for (int64_t d = 0; d < a.shape.rank(); ++d) if (!Contains(lb, d) && !Contains(lc, d)) lf.push_back(d);
  for (int64_t d = 0; d < b.shape.rank(); ++d) if (!Contains(rb, d) && !Contains(rc, d)) rf.push_back(d);
  std::vector<int64_t> out_dims;
  for (size_t i = 0; i < lb.size(); ++i) {
    if (ad[static_cast<size_t>(lb[i])] != bd[static_cast<size_t>(rb[i])]) {
      return Error(instr, "batch dim sizes differ");
    }
    out_dims.push_back(ad[static_cast<size_t>(lb[i])]);
  }
  for (size_t i = 0; i < lc.size(); ++i) {
    if (ad[static_cast<size_t>(lc[i])] != bd[static_cast<size_t>(rc[i])]) {
      return Error(instr, "contracting dim sizes differ");
    }
  }
  for (int64_t d : lf) out_dims.push_back(ad[static_cast<size_t>(d)]);
  for (int64_t d : rf) out_dims.push_back(bd[static_cast<size_t>(d)]);
  if (out_dims != d_shape.dims) {
    return Error(instr, absl::StrCat("D has shape ", d_shape.ToString(false),
                                     " but the operands and dot dims give ",
                                     Shape(dt, out_dims).ToString(false)));
  }
  if (c != nullptr && c->shape.dims != out_dims) return Error(instr, "c must have D's dims");
  int64_t bias_count = 1;
  if (bias != nullptr) {
    const int64_t br = bias->shape.rank();
    if (br > static_cast<int64_t>(out_dims.size())) return Error(instr, "bias rank exceeds D's");
    for (int64_t i = 0; i < br; ++i) {
      if (bias->shape.dims[static_cast<size_t>(i)] !=
          out_dims[out_dims.size() - static_cast<size_t>(br) + static_cast<size_t>(i)]) {
        return Error(instr, "bias must have D's minor dims");
      }
    }
    bias_count = bias->shape.ElementCount();
  }

  // Offsets: output is row-major over (batch, lhs free, rhs free).
  const std::vector<int64_t> a_batch = Offsets(ad, lb), b_batch = Offsets(bd, rb);
  const std::vector<int64_t> a_free = Offsets(ad, lf), b_free = Offsets(bd, rf);
  const std::vector<int64_t> a_k = Offsets(ad, lc), b_k = Offsets(bd, rc);
  std::vector<double> av(static_cast<size_t>(a.size())), bv(static_cast<size_t>(b.size()));
  for (int64_t i = 0; i < a.size(); ++i) av[static_cast<size_t>(i)] = a.GetDouble(i);
  for (int64_t i = 0; i < b.size(); ++i) bv[static_cast<size_t>(i)] = b.GetDouble(i);

  const float scale = static_cast<float>(alpha) * sa * sb;
  const float fbeta = static_cast<float>(beta);
  const double dmax = fp8_out ? MaxFinite(dt) : 0.0;
  Value d = Value::Zeros(d_shape);
  Value pre = aux ? Value::Zeros(d_shape) : Value();
  float amax = 0.0f;
  int64_t o = 0;
  for (int64_t bi = 0; bi < static_cast<int64_t>(a_batch.size()); ++bi) {
    for (int64_t fa : a_free) {
      for (int64_t fb : b_free) {
        const int64_t abase = a_batch[static_cast<size_t>(bi)] + fa;
        const int64_t bbase = b_batch[static_cast<size_t>(bi)] + fb;
        double acc = 0;
        for (size_t k = 0; k < a_k.size(); ++k) {
          acc += av[static_cast<size_t>(abase + a_k[k])] * bv[static_cast<size_t>(bbase + b_k[k])];
        }
        float t = scale * static_cast<float>(acc);
        if (c != nullptr) t += fbeta * static_cast<float>(c->GetDouble(o));
        if (bias != nullptr) t += static_cast<float>(bias->GetDouble(o % bias_count));
        if (aux) pre.f[static_cast<size_t>(o)] = static_cast<float>(RoundToType(t, dt));
        if (relu) t = t > 0.0f ? t : (std::isnan(t) ? t : 0.0f);
        if (gelu) t = Gelu(t);
        if (std::isnan(t) || std::isnan(amax)) amax = std::nanf("");
        else amax = std::max(amax, std::fabs(t));
        double r;
        if (fp8_out) {
          double x = static_cast<double>(t * d_scale);
          if (!std::isnan(x)) x = std::min(std::max(x, -dmax), dmax);
          r = RoundToType(x, dt);
        } else {
          r = RoundToType(static_cast<double>(t), dt);
        }
        d.f[static_cast<size_t>(o)] = static_cast<float>(r);
        ++o;
      }
    }
  }
  if (!rs.IsTuple()) return d;
  Value out;
  out.shape = rs;
  out.elements.push_back(Share(std::move(d)));
  for (size_t i = 1; i < rs.tuple_shapes.size(); ++i) {
    Value e;
    if (i == 1 && aux) {
      e = std::move(pre);
    } else if (i == amax_index && damax) {
      e = Value::Zeros(rs.tuple_shapes[i]);
      e.f[0] = amax;
    } else if (i + 1 == rs.tuple_shapes.size() && rs.tuple_shapes[i].element_type == PrimitiveType::S8) {
      // The workspace (32 MiB on Hopper) is scratch memory nobody reads: it is given its shape
      // but no storage, so that evaluating a GEMM does not allocate 256 MiB of int64 zeros.
      e.shape = rs.tuple_shapes[i];
    } else {
      e = Value::Zeros(rs.tuple_shapes[i]);
    }
    out.elements.push_back(Share(std::move(e)));
  }
  return out;
}

}  // namespace

void RegisterFp8GemmCustomCall() {
  RegisterCustomCallEvaluator(std::string(kCublasLtMatmulF8Target), EvalFp8Gemm);
}

}  // namespace weave::eval
