// The global module of `weave demo` (see demo_global_module.h): one text, written by hand in
// XLA's HLO text format in the form JAX lowers a sharded jit function to (global shapes,
// `sharding=` on parameters and sharding constraints as `Sharding` custom calls), instantiated
// at two sizes.
#include "tools/demo_global_module.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace weave::tools {
namespace {

constexpr std::string_view kTemplate = R"hlo(
HloModule weave_demo_global_fp8_block, num_partitions=4

// One pre-norm transformer block (attention + SwiGLU MLP) in global form, as JAX emits it for 4
// devices with tensor and sequence parallelism: {T} tokens ({B} sequences of {S}), width {D}, 4
// heads of {Hd}, MLP width {F}. FP8 (f8e4m3fn) weights and matmul inputs with per-tensor f32
// scales; matmuls in f32. The shardings say who holds what; the SPMD partitioner emits the
// collectives.

sum_f32 {
  sum_a = f32[] parameter(0)
  sum_b = f32[] parameter(1)
  ROOT sum_ab = f32[] add(sum_a, sum_b)
}

max_f32 {
  max_a = f32[] parameter(0)
  max_b = f32[] parameter(1)
  ROOT max_ab = f32[] maximum(max_a, max_b)
}

ENTRY transformer_block {
  resid = bf16[{T},{D}] parameter(0), sharding={devices=[4,1]<=[4]}
  attn_norm_w = bf16[{D}] parameter(1), sharding={replicated}
  act_scale_qkv = f32[] parameter(2), sharding={replicated}
  wq_fp8 = f8e4m3fn[{D},{D}] parameter(3), sharding={devices=[1,4]<=[4]}
  wk_fp8 = f8e4m3fn[{D},{D}] parameter(4), sharding={devices=[1,4]<=[4]}
  wv_fp8 = f8e4m3fn[{D},{D}] parameter(5), sharding={devices=[1,4]<=[4]}
  wq_scale = f32[] parameter(6), sharding={replicated}
  wk_scale = f32[] parameter(7), sharding={replicated}
  wv_scale = f32[] parameter(8), sharding={replicated}
  act_scale_o = f32[] parameter(9), sharding={replicated}
  wo_fp8 = f8e4m3fn[{D},{D}] parameter(10), sharding={devices=[4,1]<=[4]}
  wo_scale = f32[] parameter(11), sharding={replicated}
  mlp_norm_w = bf16[{D}] parameter(12), sharding={replicated}
  act_scale_up = f32[] parameter(13), sharding={replicated}
  wgate_fp8 = f8e4m3fn[{D},{F}] parameter(14), sharding={devices=[1,4]<=[4]}
  wup_fp8 = f8e4m3fn[{D},{F}] parameter(15), sharding={devices=[1,4]<=[4]}
  wgate_scale = f32[] parameter(16), sharding={replicated}
  wup_scale = f32[] parameter(17), sharding={replicated}
  act_scale_down = f32[] parameter(18), sharding={replicated}
  wdown_fp8 = f8e4m3fn[{F},{D}] parameter(19), sharding={devices=[4,1]<=[4]}
  wdown_scale = f32[] parameter(20), sharding={replicated}

  f32_zero = f32[] constant(0)
  inv_width = f32[] constant({inv_width})
  norm_eps = f32[] constant(1e-05)
  fp8_min = f32[] constant(-448)
  fp8_max = f32[] constant(448)

  // ---- attention: RMSNorm, FP8 quantize; Q, K and V read one activation ----
  x = f32[{T},{D}] convert(resid)
  x_sq = f32[{T},{D}] multiply(x, x)
  x_ss = f32[{T}] reduce(x_sq, f32_zero), dimensions={1}, to_apply=sum_f32
  inv_width_b = f32[{T}] broadcast(inv_width), dimensions={}
  x_ms = f32[{T}] multiply(x_ss, inv_width_b)
  norm_eps_b = f32[{T}] broadcast(norm_eps), dimensions={}
  x_ms_eps = f32[{T}] add(x_ms, norm_eps_b)
  x_rs = f32[{T}] rsqrt(x_ms_eps)
  x_rs_b = f32[{T},{D}] broadcast(x_rs), dimensions={0}
  attn_norm_wf = f32[{D}] convert(attn_norm_w)
  attn_norm_wb = f32[{T},{D}] broadcast(attn_norm_wf), dimensions={1}
  x_n0 = f32[{T},{D}] multiply(x, x_rs_b)
  x_n = f32[{T},{D}] multiply(x_n0, attn_norm_wb)
  qkv_in_sb = f32[{T},{D}] broadcast(act_scale_qkv), dimensions={}
  qkv_in_div = f32[{T},{D}] divide(x_n, qkv_in_sb)
  fp8_min_a = f32[{T},{D}] broadcast(fp8_min), dimensions={}
  fp8_max_a = f32[{T},{D}] broadcast(fp8_max), dimensions={}
  qkv_in_clamp = f32[{T},{D}] clamp(fp8_min_a, qkv_in_div, fp8_max_a)
  qkv_in_fp8 = f8e4m3fn[{T},{D}] convert(qkv_in_clamp)
  qkv_in_cvt = f32[{T},{D}] convert(qkv_in_fp8)
  qkv_in_dsb = f32[{T},{D}] broadcast(act_scale_qkv), dimensions={}
  qkv_in = f32[{T},{D}] multiply(qkv_in_cvt, qkv_in_dsb)

  wq_cvt = f32[{D},{D}] convert(wq_fp8)
  wq_sb = f32[{D},{D}] broadcast(wq_scale), dimensions={}
  wq = f32[{D},{D}] multiply(wq_cvt, wq_sb)
  q = f32[{T},{D}] dot(qkv_in, wq), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  q_c = f32[{T},{D}] custom-call(q), custom_call_target="Sharding", sharding={devices=[1,4]<=[4]}
  wk_cvt = f32[{D},{D}] convert(wk_fp8)
  wk_sb = f32[{D},{D}] broadcast(wk_scale), dimensions={}
  wk = f32[{D},{D}] multiply(wk_cvt, wk_sb)
  k = f32[{T},{D}] dot(qkv_in, wk), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  k_c = f32[{T},{D}] custom-call(k), custom_call_target="Sharding", sharding={devices=[1,4]<=[4]}
  wv_cvt = f32[{D},{D}] convert(wv_fp8)
  wv_sb = f32[{D},{D}] broadcast(wv_scale), dimensions={}
  wv = f32[{D},{D}] multiply(wv_cvt, wv_sb)
  v = f32[{T},{D}] dot(qkv_in, wv), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  v_c = f32[{T},{D}] custom-call(v), custom_call_target="Sharding", sharding={devices=[1,4]<=[4]}

  // ---- causal softmax attention, heads in parallel ----
  q4 = f32[{B},{S},4,{Hd}] reshape(q_c)
  k4 = f32[{B},{S},4,{Hd}] reshape(k_c)
  v4 = f32[{B},{S},4,{Hd}] reshape(v_c)
  scores = f32[{B},4,{S},{S}] dot(q4, k4), lhs_batch_dims={0,2}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, rhs_contracting_dims={3}
  inv_sqrt_hd = f32[] constant({inv_sqrt_hd})
  inv_sqrt_hd_b = f32[{B},4,{S},{S}] broadcast(inv_sqrt_hd), dimensions={}
  scores_s = f32[{B},4,{S},{S}] multiply(scores, inv_sqrt_hd_b)
  row_pos = s32[{B},4,{S},{S}] iota(), iota_dimension=2
  col_pos = s32[{B},4,{S},{S}] iota(), iota_dimension=3
  causal = pred[{B},4,{S},{S}] compare(col_pos, row_pos), direction=LE
  masked_value = f32[] constant(-1e+09)
  masked_value_b = f32[{B},4,{S},{S}] broadcast(masked_value), dimensions={}
  scores_m = f32[{B},4,{S},{S}] select(causal, scores_s, masked_value_b)
  neg_inf = f32[] constant(-inf)
  row_max = f32[{B},4,{S}] reduce(scores_m, neg_inf), dimensions={3}, to_apply=max_f32
  row_max_b = f32[{B},4,{S},{S}] broadcast(row_max), dimensions={0,1,2}
  scores_c = f32[{B},4,{S},{S}] subtract(scores_m, row_max_b)
  probs_u = f32[{B},4,{S},{S}] exponential(scores_c)
  row_sum = f32[{B},4,{S}] reduce(probs_u, f32_zero), dimensions={3}, to_apply=sum_f32
  row_sum_b = f32[{B},4,{S},{S}] broadcast(row_sum), dimensions={0,1,2}
  probs = f32[{B},4,{S},{S}] divide(probs_u, row_sum_b)
  ctx4 = f32[{B},4,{S},{Hd}] dot(probs, v4), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, rhs_contracting_dims={1}
  ctx4t = f32[{B},{S},4,{Hd}] transpose(ctx4), dimensions={0,2,1,3}
  ctx = f32[{T},{D}] reshape(ctx4t)
  ctx_c = f32[{T},{D}] custom-call(ctx), custom_call_target="Sharding", sharding={devices=[1,4]<=[4]}

  // ---- output projection: FP8; its partial sums return to the token shards ----
  ctx_sb = f32[{T},{D}] broadcast(act_scale_o), dimensions={}
  ctx_div = f32[{T},{D}] divide(ctx_c, ctx_sb)
  fp8_min_c = f32[{T},{D}] broadcast(fp8_min), dimensions={}
  fp8_max_c = f32[{T},{D}] broadcast(fp8_max), dimensions={}
  ctx_clamp = f32[{T},{D}] clamp(fp8_min_c, ctx_div, fp8_max_c)
  ctx_fp8 = f8e4m3fn[{T},{D}] convert(ctx_clamp)
  ctx_cvt = f32[{T},{D}] convert(ctx_fp8)
  ctx_dsb = f32[{T},{D}] broadcast(act_scale_o), dimensions={}
  ctx_dq = f32[{T},{D}] multiply(ctx_cvt, ctx_dsb)
  wo_cvt = f32[{D},{D}] convert(wo_fp8)
  wo_sb = f32[{D},{D}] broadcast(wo_scale), dimensions={}
  wo = f32[{D},{D}] multiply(wo_cvt, wo_sb)
  attn_out = f32[{T},{D}] dot(ctx_dq, wo), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]<=[4]}
  h = f32[{T},{D}] add(x, attn_out)

  // ---- MLP: RMSNorm, FP8 quantize; gate and up read one activation ----
  h_sq = f32[{T},{D}] multiply(h, h)
  h_ss = f32[{T}] reduce(h_sq, f32_zero), dimensions={1}, to_apply=sum_f32
  h_ms = f32[{T}] multiply(h_ss, inv_width_b)
  h_ms_eps = f32[{T}] add(h_ms, norm_eps_b)
  h_rs = f32[{T}] rsqrt(h_ms_eps)
  h_rs_b = f32[{T},{D}] broadcast(h_rs), dimensions={0}
  mlp_norm_wf = f32[{D}] convert(mlp_norm_w)
  mlp_norm_wb = f32[{T},{D}] broadcast(mlp_norm_wf), dimensions={1}
  h_n0 = f32[{T},{D}] multiply(h, h_rs_b)
  h_n = f32[{T},{D}] multiply(h_n0, mlp_norm_wb)
  up_in_sb = f32[{T},{D}] broadcast(act_scale_up), dimensions={}
  up_in_div = f32[{T},{D}] divide(h_n, up_in_sb)
  up_in_clamp = f32[{T},{D}] clamp(fp8_min_a, up_in_div, fp8_max_a)
  up_in_fp8 = f8e4m3fn[{T},{D}] convert(up_in_clamp)
  up_in_cvt = f32[{T},{D}] convert(up_in_fp8)
  up_in_dsb = f32[{T},{D}] broadcast(act_scale_up), dimensions={}
  up_in = f32[{T},{D}] multiply(up_in_cvt, up_in_dsb)

  wgate_cvt = f32[{D},{F}] convert(wgate_fp8)
  wgate_sb = f32[{D},{F}] broadcast(wgate_scale), dimensions={}
  wgate = f32[{D},{F}] multiply(wgate_cvt, wgate_sb)
  gate = f32[{T},{F}] dot(up_in, wgate), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[1,4]<=[4]}
  wup_cvt = f32[{D},{F}] convert(wup_fp8)
  wup_sb = f32[{D},{F}] broadcast(wup_scale), dimensions={}
  wup = f32[{D},{F}] multiply(wup_cvt, wup_sb)
  up = f32[{T},{F}] dot(up_in, wup), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[1,4]<=[4]}
  gate_sig = f32[{T},{F}] logistic(gate)
  gate_silu = f32[{T},{F}] multiply(gate, gate_sig)
  swiglu = f32[{T},{F}] multiply(gate_silu, up)

  // ---- down projection: FP8, its output in bf16 (as the partitioned demo block); partial sums
  // back to the token shards ----
  down_in_sb = f32[{T},{F}] broadcast(act_scale_down), dimensions={}
  down_in_div = f32[{T},{F}] divide(swiglu, down_in_sb)
  fp8_min_d = f32[{T},{F}] broadcast(fp8_min), dimensions={}
  fp8_max_d = f32[{T},{F}] broadcast(fp8_max), dimensions={}
  down_in_clamp = f32[{T},{F}] clamp(fp8_min_d, down_in_div, fp8_max_d)
  down_in_fp8 = f8e4m3fn[{T},{F}] convert(down_in_clamp)
  down_in_cvt = f32[{T},{F}] convert(down_in_fp8)
  down_in_dsb = f32[{T},{F}] broadcast(act_scale_down), dimensions={}
  down_in = f32[{T},{F}] multiply(down_in_cvt, down_in_dsb)
  wdown_cvt = f32[{F},{D}] convert(wdown_fp8)
  wdown_sb = f32[{F},{D}] broadcast(wdown_scale), dimensions={}
  wdown = f32[{F},{D}] multiply(wdown_cvt, wdown_sb)
  mlp_out = bf16[{T},{D}] dot(down_in, wdown), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]<=[4]}
  mlp_out_f32 = f32[{T},{D}] convert(mlp_out)
  out = f32[{T},{D}] add(h, mlp_out_f32)
  ROOT resid_out = bf16[{T},{D}] convert(out), sharding={devices=[4,1]<=[4]}
}
)hlo";

}  // namespace

std::string DemoGlobalModuleText(const DemoSize& z) {
  const int64_t hd = z.width / 4;
  return absl::StrReplaceAll(
      std::string(kTemplate.substr(1)),
      {{"{inv_width}", absl::StrFormat("%.9g", 1.0 / static_cast<double>(z.width))},
       {"{inv_sqrt_hd}", absl::StrFormat("%.9g", 1.0 / std::sqrt(static_cast<double>(hd)))},
       {"{T}", absl::StrCat(z.tokens())},
       {"{Hd}", absl::StrCat(hd)},
       {"{F}", absl::StrCat(z.mlp_width)},
       {"{D}", absl::StrCat(z.width)},
       {"{B}", absl::StrCat(z.sequences)},
       {"{S}", absl::StrCat(z.sequence_length)}});
}

}  // namespace weave::tools
