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

// The gemm_backend_config of the call: alpha, beta, the epilogue and what it implies, and the
// dot dimension numbers.
struct Fp8GemmConfig {
  double alpha = 1.0;
  double beta = 0.0;
  std::string epilogue;
  bool damax = false;
  bool has_bias = false;
  bool relu = false;
  bool aux = false;  // GELU_AUX: the pre-activation value is also returned
  bool gelu = false;
  std::vector<int64_t> lb, lc, rb, rc;  // lhs/rhs batch and contracting dims
};

// The call's backend_config read; an error when it has no gemm_backend_config, an unsupported
// epilogue, or unequal lhs/rhs dimension counts.
absl::StatusOr<Fp8GemmConfig> ParseFp8GemmConfig(const HloInstruction& instr) {
  json cfg = json::parse(instr.backend_config, nullptr, false);
  if (!cfg.is_object() || !cfg.contains("gemm_backend_config") ||
      !cfg["gemm_backend_config"].is_object()) {
    return Error(instr, "backend_config has no gemm_backend_config");
  }
  const json& g = cfg["gemm_backend_config"];
  Fp8GemmConfig out;
  out.alpha = Number(g, "alpha_real", 1.0);
  out.beta = Number(g, "beta", 0.0);
  const std::string& epilogue = out.epilogue = g.value("epilogue", std::string("DEFAULT"));
  out.damax = g.value("damax_output", false);
  out.has_bias = epilogue == "BIAS" || epilogue == "BIAS_RELU" ||
                 epilogue == "BIAS_GELU" || epilogue == "BIAS_GELU_AUX";
  out.relu = epilogue == "RELU" || epilogue == "BIAS_RELU";
  // GELU_AUX: the pre-activation value is also returned, as tuple element 1 in D's type.
  out.aux = epilogue == "GELU_AUX" || epilogue == "BIAS_GELU_AUX";
  out.gelu = epilogue == "GELU" || epilogue == "BIAS_GELU" || out.aux;
  if (!(epilogue == "DEFAULT" || out.has_bias || out.relu || out.gelu)) {
    return Error(instr, absl::StrCat("epilogue ", epilogue, " is not supported"));
  }
  if (g.contains("dot_dimension_numbers")) {
    const json& dn = g["dot_dimension_numbers"];
    out.lc = IntList(dn.value("lhs_contracting_dimensions", json::array()));
    out.rc = IntList(dn.value("rhs_contracting_dimensions", json::array()));
    out.lb = IntList(dn.value("lhs_batch_dimensions", json::array()));
    out.rb = IntList(dn.value("rhs_batch_dimensions", json::array()));
  }
  if (out.lc.size() != out.rc.size() || out.lb.size() != out.rb.size()) {
    return Error(instr, "dot_dimension_numbers have unequal lhs/rhs counts");
  }
  return out;
}

// Whether `dt` is one of the FP8 types of an FP8 D (saturated and scaled by d_scale).
bool IsFp8Output(PrimitiveType dt) {
  return dt == PrimitiveType::F8E4M3FN || dt == PrimitiveType::F8E5M2 ||
         dt == PrimitiveType::F8E4M3FNUZ || dt == PrimitiveType::F8E5M2FNUZ;
}

// OK when the result `rs` has the amax scalar at `amax_index` that damax_output asks for, and
// D's shape `d_shape` again at index 1 for a GELU_AUX epilogue; an error otherwise.
absl::Status CheckResultTuple(const HloInstruction& instr, const Fp8GemmConfig& cfg,
                              const Shape& rs, const Shape& d_shape, size_t amax_index) {
  if (cfg.damax && (!rs.IsTuple() || rs.tuple_shapes.size() <= amax_index ||
                    rs.tuple_shapes[amax_index].element_type != PrimitiveType::F32 ||
                    rs.tuple_shapes[amax_index].rank() != 0)) {
    return Error(instr, absl::StrCat("damax_output needs a tuple result with f32[] at index ",
                                     amax_index));
  }
  if (cfg.aux && (!rs.IsTuple() || rs.tuple_shapes.size() < 2 || rs.tuple_shapes[1] != d_shape)) {
    return Error(instr, "a GELU_AUX epilogue needs D's shape again at tuple index 1");
  }
  return absl::OkStatus();
}

// The call's operands in XLA's order: c only when beta != 0, bias only with a BIAS epilogue.
struct Fp8GemmOperands {
  const Value* a = nullptr;
  const Value* b = nullptr;
  const Value* c = nullptr;
  float sa = 0.0f, sb = 0.0f;  // a_scale, b_scale
  const Value* bias = nullptr;
  float d_scale = 1.0f;  // 1 when D is not FP8 or the call has no d_scale
};

// `ops` read as the operands `cfg` implies; an error when their count is wrong, a scale is not
// an f32 scalar, or a or b is not an array. An FP8 D (`fp8_out`) may come without d_scale (XLA's
// call for a dot whose own result is FP8): d_scale is then 1.
absl::StatusOr<Fp8GemmOperands> ReadOperands(const HloInstruction& instr,
                                             const std::vector<ValuePtr>& ops,
                                             const Fp8GemmConfig& cfg, PrimitiveType dt,
                                             bool fp8_out) {
  const size_t base = 4 + (cfg.beta != 0 ? 1 : 0) + (cfg.has_bias ? 1 : 0);
  const bool has_d_scale = fp8_out && ops.size() == base + 1;
  if (ops.size() != base && !has_d_scale) {
    return Error(instr, absl::StrCat("expected ", base, fp8_out ? " or " : "",
                                     fp8_out ? std::to_string(base + 1) : std::string(),
                                     " operands (beta=", cfg.beta, ", epilogue=", cfg.epilogue,
                                     ", D ", PrimitiveTypeName(dt).data(), "), got ", ops.size()));
  }
  Fp8GemmOperands in;
  size_t next = 0;
  in.a = ops[next++].get();
  in.b = ops[next++].get();
  in.c = cfg.beta != 0 ? ops[next++].get() : nullptr;
  ASSIGN_OR_RETURN(in.sa, ScalarF32(instr, ops[next++], "a_scale"));
  ASSIGN_OR_RETURN(in.sb, ScalarF32(instr, ops[next++], "b_scale"));
  in.bias = cfg.has_bias ? ops[next++].get() : nullptr;
  if (has_d_scale) {
    ASSIGN_OR_RETURN(float ds, ScalarF32(instr, ops[next++], "d_scale"));
    in.d_scale = ds;
  }
  if (!in.a->shape.IsArray() || !in.b->shape.IsArray()) {
    return Error(instr, "a and b must be arrays");
  }
  return in;
}

// The free (neither batch nor contracting) dims of a and b.
struct GemmFreeDims {
  std::vector<int64_t> lf, rf;
};

// The dot's dims checked against a, b, D (`d_shape`), c and bias: every dim in range, batch and
// contracting sizes equal, D's dims (batch, lhs free, rhs free), c's D's, bias's D's minor
// dims; the free dims of a and b, and the bias's element count in *bias_count (1 without bias).
absl::StatusOr<GemmFreeDims> CheckDotDims(const HloInstruction& instr, const Fp8GemmConfig& cfg,
                                          const Fp8GemmOperands& in, const Shape& d_shape,
                                          int64_t* bias_count) {
  const Value& a = *in.a;
  const Value& b = *in.b;
  const std::vector<int64_t>& lb = cfg.lb;
  const std::vector<int64_t>& lc = cfg.lc;
  const std::vector<int64_t>& rb = cfg.rb;
  const std::vector<int64_t>& rc = cfg.rc;
  const std::vector<int64_t>& ad = a.shape.dims;
  const std::vector<int64_t>& bd = b.shape.dims;
  for (int64_t d : lb) if (d < 0 || d >= a.shape.rank()) return Error(instr, "bad lhs batch dim");
  for (int64_t d : lc) if (d < 0 || d >= a.shape.rank()) return Error(instr, "bad lhs contracting dim");
  for (int64_t d : rb) if (d < 0 || d >= b.shape.rank()) return Error(instr, "bad rhs batch dim");
  for (int64_t d : rc) if (d < 0 || d >= b.shape.rank()) return Error(instr, "bad rhs contracting dim");
  GemmFreeDims free_dims;
  std::vector<int64_t>& lf = free_dims.lf;
  std::vector<int64_t>& rf = free_dims.rf;
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
                                     Shape(d_shape.element_type, out_dims).ToString(false)));
  }
  if (in.c != nullptr && in.c->shape.dims != out_dims) return Error(instr, "c must have D's dims");
  *bias_count = 1;
  if (in.bias != nullptr) {
    const Value* bias = in.bias;
    const int64_t br = bias->shape.rank();
    if (br > static_cast<int64_t>(out_dims.size())) return Error(instr, "bias rank exceeds D's");
    for (int64_t i = 0; i < br; ++i) {
      if (bias->shape.dims[static_cast<size_t>(i)] !=
          out_dims[out_dims.size() - static_cast<size_t>(br) + static_cast<size_t>(i)]) {
        return Error(instr, "bias must have D's minor dims");
      }
    }
    *bias_count = bias->shape.ElementCount();
  }
  return free_dims;
}

// What the GEMM computes: D, the pre-activation value (GELU_AUX), and amax.
struct Fp8GemmOutputs {
  Value d;
  Value pre;
  float amax = 0.0f;
};

// The GEMM itself (the semantics at the top of this file) into D of `d_shape`: each output
// element (row-major over batch, lhs free, rhs free) summed, scaled, biased, activated, rounded.
Fp8GemmOutputs ComputeFp8Gemm(const Fp8GemmConfig& cfg, const Fp8GemmOperands& in,
                              const GemmFreeDims& free_dims, const Shape& d_shape,
                              int64_t bias_count) {
  const Value& a = *in.a;
  const Value& b = *in.b;
  const Value* c = in.c;
  const Value* bias = in.bias;
  const PrimitiveType dt = d_shape.element_type;
  const bool fp8_out = IsFp8Output(dt);
  const bool aux = cfg.aux, relu = cfg.relu, gelu = cfg.gelu;
  const float sa = in.sa, sb = in.sb, d_scale = in.d_scale;
  const std::vector<int64_t>& ad = a.shape.dims;
  const std::vector<int64_t>& bd = b.shape.dims;
  // Offsets: output is row-major over (batch, lhs free, rhs free).
  const std::vector<int64_t> a_batch = Offsets(ad, cfg.lb), b_batch = Offsets(bd, cfg.rb);
  const std::vector<int64_t> a_free = Offsets(ad, free_dims.lf), b_free = Offsets(bd, free_dims.rf);
  const std::vector<int64_t> a_k = Offsets(ad, cfg.lc), b_k = Offsets(bd, cfg.rc);
  std::vector<double> av(static_cast<size_t>(a.size())), bv(static_cast<size_t>(b.size()));
  for (int64_t i = 0; i < a.size(); ++i) av[static_cast<size_t>(i)] = a.GetDouble(i);
  for (int64_t i = 0; i < b.size(); ++i) bv[static_cast<size_t>(i)] = b.GetDouble(i);

  const float scale = static_cast<float>(cfg.alpha) * sa * sb;
  const float fbeta = static_cast<float>(cfg.beta);
  const double dmax = fp8_out ? MaxFinite(dt) : 0.0;
  Fp8GemmOutputs out;
  out.d = Value::Zeros(d_shape);
  out.pre = aux ? Value::Zeros(d_shape) : Value();
  Value& d = out.d;
  Value& pre = out.pre;
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
  out.amax = amax;
  return out;
}

// The call's result of shape `rs`: D alone, or the tuple of D, the pre-activation value
// (GELU_AUX, index 1), amax (damax_output, at `amax_index`), the workspace and any other element.
Value Fp8GemmResult(const Fp8GemmConfig& cfg, const Shape& rs, size_t amax_index,
                    Fp8GemmOutputs computed) {
  if (!rs.IsTuple()) return std::move(computed.d);
  Value out;
  out.shape = rs;
  out.elements.push_back(Share(std::move(computed.d)));
  for (size_t i = 1; i < rs.tuple_shapes.size(); ++i) {
    Value e;
    if (i == 1 && cfg.aux) {
      e = std::move(computed.pre);
    } else if (i == amax_index && cfg.damax) {
      e = Value::Zeros(rs.tuple_shapes[i]);
      e.f[0] = computed.amax;
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

absl::StatusOr<Value> EvalFp8Gemm(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  ASSIGN_OR_RETURN(const Fp8GemmConfig cfg, ParseFp8GemmConfig(instr));
  // Result D.
  const Shape& rs = instr.shape();
  const Shape d_shape = rs.IsTuple() ? (rs.tuple_shapes.empty() ? Shape() : rs.tuple_shapes[0]) : rs;
  if (!d_shape.IsArray()) return Error(instr, "result has no array D");
  const PrimitiveType dt = d_shape.element_type;
  const bool fp8_out = IsFp8Output(dt);
  const size_t amax_index = cfg.aux ? 2 : 1;
  RETURN_IF_ERROR(CheckResultTuple(instr, cfg, rs, d_shape, amax_index));
  ASSIGN_OR_RETURN(const Fp8GemmOperands in, ReadOperands(instr, ops, cfg, dt, fp8_out));
  int64_t bias_count = 1;
  ASSIGN_OR_RETURN(const GemmFreeDims free_dims,
                   CheckDotDims(instr, cfg, in, d_shape, &bias_count));
  return Fp8GemmResult(cfg, rs, amax_index,
                       ComputeFp8Gemm(cfg, in, free_dims, d_shape, bias_count));
}

}  // namespace

void RegisterFp8GemmCustomCall() {
  RegisterCustomCallEvaluator(std::string(kCublasLtMatmulF8Target), EvalFp8Gemm);
}

}  // namespace weave::eval
