// The module `weave demo` compiles: a tensor-parallel FP8 transformer block on 4 partitions,
// written by hand in XLA's HLO text format, in partitioned form (as XLA's SPMD partitioner leaves
// it): per block one all-gather of the FP8-dequantized activation shared by the Q, K and V
// projections, one shared by the gate and up projections, and the output and down projections
// reduce-scattered back to the token shards. One text, instantiated at two sizes (demo_module.h).
#include "tools/demo_module.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace weave::tools {
namespace {

constexpr std::string_view kTemplate = R"hlo(
HloModule weave_demo_tp4_fp8_block, entry_computation_layout={{entry_layout}}, num_partitions=4

// One pre-norm transformer block (attention + SwiGLU MLP), tensor parallel over 4 partitions with
// sequence parallelism, after SPMD partitioning. Global sizes: {T} tokens ({B} sequences of {S}),
// model width {D}, 4 attention heads of {Hd}, MLP width {F}. Each partition holds {Tp} tokens of the
// residual stream, one head, and a quarter of the MLP. Weights and the activations entering each
// matmul are FP8 (f8e4m3fn) with per-tensor f32 scales; matmuls compute in f32. The output
// projection's partial sums are reduce-scattered in f32 (they feed the MLP's FP8 quantization),
// the down projection's in bf16.

sum_bf16 {
  sum_bf16_a = bf16[] parameter(0)
  sum_bf16_b = bf16[] parameter(1)
  ROOT sum_bf16_ab = bf16[] add(sum_bf16_a, sum_bf16_b)
}

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
  resid = bf16[{Tp},{D}]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}
  attn_norm_w = bf16[{D}]{0} parameter(1), sharding={replicated}
  act_scale_qkv = f32[] parameter(2), sharding={replicated}
  wq_fp8 = f8e4m3fn[{D},{Hd}]{1,0} parameter(3), sharding={devices=[1,4]<=[4]}
  wk_fp8 = f8e4m3fn[{D},{Hd}]{1,0} parameter(4), sharding={devices=[1,4]<=[4]}
  wv_fp8 = f8e4m3fn[{D},{Hd}]{1,0} parameter(5), sharding={devices=[1,4]<=[4]}
  wq_scale = f32[] parameter(6), sharding={replicated}
  wk_scale = f32[] parameter(7), sharding={replicated}
  wv_scale = f32[] parameter(8), sharding={replicated}
  act_scale_o = f32[] parameter(9), sharding={replicated}
  wo_fp8 = f8e4m3fn[{Hd},{D}]{1,0} parameter(10), sharding={devices=[4,1]<=[4]}
  wo_scale = f32[] parameter(11), sharding={replicated}
  mlp_norm_w = bf16[{D}]{0} parameter(12), sharding={replicated}
  act_scale_up = f32[] parameter(13), sharding={replicated}
  wgate_fp8 = f8e4m3fn[{D},{Fp}]{1,0} parameter(14), sharding={devices=[1,4]<=[4]}
  wup_fp8 = f8e4m3fn[{D},{Fp}]{1,0} parameter(15), sharding={devices=[1,4]<=[4]}
  wgate_scale = f32[] parameter(16), sharding={replicated}
  wup_scale = f32[] parameter(17), sharding={replicated}
  act_scale_down = f32[] parameter(18), sharding={replicated}
  wdown_fp8 = f8e4m3fn[{Fp},{D}]{1,0} parameter(19), sharding={devices=[4,1]<=[4]}
  wdown_scale = f32[] parameter(20), sharding={replicated}

  f32_zero = f32[] constant(0)
  inv_width = f32[] constant({inv_width})
  norm_eps = f32[] constant(1e-05)
  fp8_min = f32[] constant(-448)
  fp8_max = f32[] constant(448)

  // ---- attention: RMSNorm, FP8 quantize, one all-gather for Q, K and V ----
  x = f32[{Tp},{D}]{1,0} convert(resid)
  x_sq = f32[{Tp},{D}]{1,0} multiply(x, x)
  x_ss = f32[{Tp}]{0} reduce(x_sq, f32_zero), dimensions={1}, to_apply=sum_f32
  inv_width_b = f32[{Tp}]{0} broadcast(inv_width), dimensions={}
  x_ms = f32[{Tp}]{0} multiply(x_ss, inv_width_b)
  norm_eps_b = f32[{Tp}]{0} broadcast(norm_eps), dimensions={}
  x_ms_eps = f32[{Tp}]{0} add(x_ms, norm_eps_b)
  x_rs = f32[{Tp}]{0} rsqrt(x_ms_eps)
  x_rs_b = f32[{Tp},{D}]{1,0} broadcast(x_rs), dimensions={0}
  attn_norm_wf = f32[{D}]{0} convert(attn_norm_w)
  attn_norm_wb = f32[{Tp},{D}]{1,0} broadcast(attn_norm_wf), dimensions={1}
  x_n0 = f32[{Tp},{D}]{1,0} multiply(x, x_rs_b)
  x_n = f32[{Tp},{D}]{1,0} multiply(x_n0, attn_norm_wb)
  qkv_in_sb = f32[{Tp},{D}]{1,0} broadcast(act_scale_qkv), dimensions={}
  qkv_in_div = f32[{Tp},{D}]{1,0} divide(x_n, qkv_in_sb)
  fp8_min_a = f32[{Tp},{D}]{1,0} broadcast(fp8_min), dimensions={}
  fp8_max_a = f32[{Tp},{D}]{1,0} broadcast(fp8_max), dimensions={}
  qkv_in_clamp = f32[{Tp},{D}]{1,0} clamp(fp8_min_a, qkv_in_div, fp8_max_a)
  qkv_in_fp8 = f8e4m3fn[{Tp},{D}]{1,0} convert(qkv_in_clamp)
  qkv_in_cvt = f32[{Tp},{D}]{1,0} convert(qkv_in_fp8)
  qkv_in_dsb = f32[{Tp},{D}]{1,0} broadcast(act_scale_qkv), dimensions={}
  qkv_in = f32[{Tp},{D}]{1,0} multiply(qkv_in_cvt, qkv_in_dsb)
  qkv_in_ag = f32[{T},{D}]{1,0} all-gather(qkv_in), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true

  wq_cvt = f32[{D},{Hd}]{1,0} convert(wq_fp8)
  wq_sb = f32[{D},{Hd}]{1,0} broadcast(wq_scale), dimensions={}
  wq = f32[{D},{Hd}]{1,0} multiply(wq_cvt, wq_sb)
  q = f32[{T},{Hd}]{1,0} dot(qkv_in_ag, wq), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  wk_cvt = f32[{D},{Hd}]{1,0} convert(wk_fp8)
  wk_sb = f32[{D},{Hd}]{1,0} broadcast(wk_scale), dimensions={}
  wk = f32[{D},{Hd}]{1,0} multiply(wk_cvt, wk_sb)
  k = f32[{T},{Hd}]{1,0} dot(qkv_in_ag, wk), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  wv_cvt = f32[{D},{Hd}]{1,0} convert(wv_fp8)
  wv_sb = f32[{D},{Hd}]{1,0} broadcast(wv_scale), dimensions={}
  wv = f32[{D},{Hd}]{1,0} multiply(wv_cvt, wv_sb)
  v = f32[{T},{Hd}]{1,0} dot(qkv_in_ag, wv), lhs_contracting_dims={1}, rhs_contracting_dims={0}

  // ---- causal softmax attention of the local head ----
  q3 = f32[{B},{S},{Hd}]{2,1,0} reshape(q)
  k3 = f32[{B},{S},{Hd}]{2,1,0} reshape(k)
  v3 = f32[{B},{S},{Hd}]{2,1,0} reshape(v)
  scores = f32[{B},{S},{S}]{2,1,0} dot(q3, k3), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  inv_sqrt_hd = f32[] constant({inv_sqrt_hd})
  inv_sqrt_hd_b = f32[{B},{S},{S}]{2,1,0} broadcast(inv_sqrt_hd), dimensions={}
  scores_s = f32[{B},{S},{S}]{2,1,0} multiply(scores, inv_sqrt_hd_b)
  row_pos = s32[{B},{S},{S}]{2,1,0} iota(), iota_dimension=1
  col_pos = s32[{B},{S},{S}]{2,1,0} iota(), iota_dimension=2
  causal = pred[{B},{S},{S}]{2,1,0} compare(col_pos, row_pos), direction=LE
  masked_value = f32[] constant(-1e+09)
  masked_value_b = f32[{B},{S},{S}]{2,1,0} broadcast(masked_value), dimensions={}
  scores_m = f32[{B},{S},{S}]{2,1,0} select(causal, scores_s, masked_value_b)
  neg_inf = f32[] constant(-inf)
  row_max = f32[{B},{S}]{1,0} reduce(scores_m, neg_inf), dimensions={2}, to_apply=max_f32
  row_max_b = f32[{B},{S},{S}]{2,1,0} broadcast(row_max), dimensions={0,1}
  scores_c = f32[{B},{S},{S}]{2,1,0} subtract(scores_m, row_max_b)
  probs_u = f32[{B},{S},{S}]{2,1,0} exponential(scores_c)
  row_sum = f32[{B},{S}]{1,0} reduce(probs_u, f32_zero), dimensions={2}, to_apply=sum_f32
  row_sum_b = f32[{B},{S},{S}]{2,1,0} broadcast(row_sum), dimensions={0,1}
  probs = f32[{B},{S},{S}]{2,1,0} divide(probs_u, row_sum_b)
  ctx3 = f32[{B},{S},{Hd}]{2,1,0} dot(probs, v3), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ctx = f32[{T},{Hd}]{1,0} reshape(ctx3)

  // ---- output projection: FP8, partial sums reduce-scattered back to the token shards ----
  ctx_sb = f32[{T},{Hd}]{1,0} broadcast(act_scale_o), dimensions={}
  ctx_div = f32[{T},{Hd}]{1,0} divide(ctx, ctx_sb)
  fp8_min_c = f32[{T},{Hd}]{1,0} broadcast(fp8_min), dimensions={}
  fp8_max_c = f32[{T},{Hd}]{1,0} broadcast(fp8_max), dimensions={}
  ctx_clamp = f32[{T},{Hd}]{1,0} clamp(fp8_min_c, ctx_div, fp8_max_c)
  ctx_fp8 = f8e4m3fn[{T},{Hd}]{1,0} convert(ctx_clamp)
  ctx_cvt = f32[{T},{Hd}]{1,0} convert(ctx_fp8)
  ctx_dsb = f32[{T},{Hd}]{1,0} broadcast(act_scale_o), dimensions={}
  ctx_dq = f32[{T},{Hd}]{1,0} multiply(ctx_cvt, ctx_dsb)
  wo_cvt = f32[{Hd},{D}]{1,0} convert(wo_fp8)
  wo_sb = f32[{Hd},{D}]{1,0} broadcast(wo_scale), dimensions={}
  wo = f32[{Hd},{D}]{1,0} multiply(wo_cvt, wo_sb)
  attn_partial = f32[{T},{D}]{1,0} dot(ctx_dq, wo), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  attn_out = f32[{Tp},{D}]{1,0} reduce-scatter(attn_partial), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=sum_f32
  h = f32[{Tp},{D}]{1,0} add(x, attn_out)

  // ---- MLP: RMSNorm, FP8 quantize, one all-gather for gate and up ----
  h_sq = f32[{Tp},{D}]{1,0} multiply(h, h)
  h_ss = f32[{Tp}]{0} reduce(h_sq, f32_zero), dimensions={1}, to_apply=sum_f32
  h_ms = f32[{Tp}]{0} multiply(h_ss, inv_width_b)
  h_ms_eps = f32[{Tp}]{0} add(h_ms, norm_eps_b)
  h_rs = f32[{Tp}]{0} rsqrt(h_ms_eps)
  h_rs_b = f32[{Tp},{D}]{1,0} broadcast(h_rs), dimensions={0}
  mlp_norm_wf = f32[{D}]{0} convert(mlp_norm_w)
  mlp_norm_wb = f32[{Tp},{D}]{1,0} broadcast(mlp_norm_wf), dimensions={1}
  h_n0 = f32[{Tp},{D}]{1,0} multiply(h, h_rs_b)
  h_n = f32[{Tp},{D}]{1,0} multiply(h_n0, mlp_norm_wb)
  up_in_sb = f32[{Tp},{D}]{1,0} broadcast(act_scale_up), dimensions={}
  up_in_div = f32[{Tp},{D}]{1,0} divide(h_n, up_in_sb)
  up_in_clamp = f32[{Tp},{D}]{1,0} clamp(fp8_min_a, up_in_div, fp8_max_a)
  up_in_fp8 = f8e4m3fn[{Tp},{D}]{1,0} convert(up_in_clamp)
  up_in_cvt = f32[{Tp},{D}]{1,0} convert(up_in_fp8)
  up_in_dsb = f32[{Tp},{D}]{1,0} broadcast(act_scale_up), dimensions={}
  up_in = f32[{Tp},{D}]{1,0} multiply(up_in_cvt, up_in_dsb)
  up_in_ag = f32[{T},{D}]{1,0} all-gather(up_in), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true

  wgate_cvt = f32[{D},{Fp}]{1,0} convert(wgate_fp8)
  wgate_sb = f32[{D},{Fp}]{1,0} broadcast(wgate_scale), dimensions={}
  wgate = f32[{D},{Fp}]{1,0} multiply(wgate_cvt, wgate_sb)
  gate = f32[{T},{Fp}]{1,0} dot(up_in_ag, wgate), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  wup_cvt = f32[{D},{Fp}]{1,0} convert(wup_fp8)
  wup_sb = f32[{D},{Fp}]{1,0} broadcast(wup_scale), dimensions={}
  wup = f32[{D},{Fp}]{1,0} multiply(wup_cvt, wup_sb)
  up = f32[{T},{Fp}]{1,0} dot(up_in_ag, wup), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  gate_sig = f32[{T},{Fp}]{1,0} logistic(gate)
  gate_silu = f32[{T},{Fp}]{1,0} multiply(gate, gate_sig)
  swiglu = f32[{T},{Fp}]{1,0} multiply(gate_silu, up)

  // ---- down projection: FP8, reduce-scattered ----
  down_in_sb = f32[{T},{Fp}]{1,0} broadcast(act_scale_down), dimensions={}
  down_in_div = f32[{T},{Fp}]{1,0} divide(swiglu, down_in_sb)
  fp8_min_d = f32[{T},{Fp}]{1,0} broadcast(fp8_min), dimensions={}
  fp8_max_d = f32[{T},{Fp}]{1,0} broadcast(fp8_max), dimensions={}
  down_in_clamp = f32[{T},{Fp}]{1,0} clamp(fp8_min_d, down_in_div, fp8_max_d)
  down_in_fp8 = f8e4m3fn[{T},{Fp}]{1,0} convert(down_in_clamp)
  down_in_cvt = f32[{T},{Fp}]{1,0} convert(down_in_fp8)
  down_in_dsb = f32[{T},{Fp}]{1,0} broadcast(act_scale_down), dimensions={}
  down_in = f32[{T},{Fp}]{1,0} multiply(down_in_cvt, down_in_dsb)
  wdown_cvt = f32[{Fp},{D}]{1,0} convert(wdown_fp8)
  wdown_sb = f32[{Fp},{D}]{1,0} broadcast(wdown_scale), dimensions={}
  wdown = f32[{Fp},{D}]{1,0} multiply(wdown_cvt, wdown_sb)
  down_partial = bf16[{T},{D}]{1,0} dot(down_in, wdown), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  mlp_out = bf16[{Tp},{D}]{1,0} reduce-scatter(down_partial), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=sum_bf16
  mlp_out_f32 = f32[{Tp},{D}]{1,0} convert(mlp_out)
  out = f32[{Tp},{D}]{1,0} add(h, mlp_out_f32)
  ROOT resid_out = bf16[{Tp},{D}]{1,0} convert(out)
}
)hlo";

}  // namespace

DemoSize DemoSize::Small() { return {2, 16, 64, 128}; }
DemoSize DemoSize::Full() { return {4, 2048, 4096, 4096}; }

std::string DemoSize::ToString() const {
  return absl::StrFormat("%d tokens (%d sequences of %d), width %d, MLP width %d", tokens(),
                         sequences, sequence_length, width, mlp_width);
}

std::string DemoModuleText(const DemoSize& z) {
  const int64_t tp = z.tokens() / 4, hd = z.width / 4, fp = z.mlp_width / 4;
  const std::string tpd = absl::StrCat("[", tp, ",", z.width, "]{1,0}");
  const std::string d = absl::StrCat("[", z.width, "]{0}");
  const std::string entry_layout = absl::StrCat(
      "(bf16", tpd, ", bf16", d, ", f32[], f8e4m3fn[", z.width, ",", hd, "]{1,0}, f8e4m3fn[",
      z.width, ",", hd, "]{1,0}, f8e4m3fn[", z.width, ",", hd,
      "]{1,0}, f32[], f32[], f32[], f32[], f8e4m3fn[", hd, ",", z.width, "]{1,0}, f32[], bf16", d,
      ", f32[], f8e4m3fn[", z.width, ",", fp, "]{1,0}, f8e4m3fn[", z.width, ",", fp,
      "]{1,0}, f32[], f32[], f32[], f8e4m3fn[", fp, ",", z.width, "]{1,0}, f32[])->bf16", tpd);
  const std::string inv_width = absl::StrFormat("%.9g", 1.0 / static_cast<double>(z.width));
  const std::string inv_sqrt_hd =
      absl::StrFormat("%.9g", 1.0 / std::sqrt(static_cast<double>(hd)));
  const std::string tp_s = absl::StrCat(tp), t_s = absl::StrCat(z.tokens()),
                    hd_s = absl::StrCat(hd), fp_s = absl::StrCat(fp),
                    f_s = absl::StrCat(z.mlp_width), d_s = absl::StrCat(z.width),
                    b_s = absl::StrCat(z.sequences), s_s = absl::StrCat(z.sequence_length);
  std::string text = absl::StrReplaceAll(
      std::string(kTemplate.substr(1)),  // without the newline after the opening delimiter
      {{"{entry_layout}", entry_layout},
       {"{inv_width}", inv_width},
       {"{inv_sqrt_hd}", inv_sqrt_hd},
       {"{Tp}", tp_s},
       {"{T}", t_s},
       {"{Hd}", hd_s},
       {"{Fp}", fp_s},
       {"{F}", f_s},
       {"{D}", d_s},
       {"{B}", b_s},
       {"{S}", s_s}});
  return text;
}

}  // namespace weave::tools
