// The generated layer stack (layer_stack_module.h): one layer template instantiated per layer,
// each layer reading the previous one's residual shard.
#include "tools/layer_stack_module.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace weave::tools {
namespace {

// Shared by every layer: reducers, the residual input, rotary tables, constants.
constexpr std::string_view kHead = R"hlo(HloModule weave_layer_stack_{P}p_{N}l, num_partitions={P}

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

sum_bf16 {
  sum16_a = bf16[] parameter(0)
  sum16_b = bf16[] parameter(1)
  ROOT sum16_ab = bf16[] add(sum16_a, sum16_b)
}

ENTRY layer_stack {
  resid_in = bf16[{Tp},{D}]{1,0} parameter(0), sharding={devices=[{P},1]<=[{P}]}
  rope_cos = bf16[{T},{Hd}]{1,0} parameter(1), sharding={replicated}
  rope_sin = bf16[{T},{Hd}]{1,0} parameter(2), sharding={replicated}
  f32_zero = f32[] constant(0)
  inv_width = f32[] constant({inv_width})
  norm_eps = f32[] constant(1e-05)
  inv_width_b = f32[{Tp}]{0} broadcast(inv_width), dimensions={}
  norm_eps_b = f32[{Tp}]{0} broadcast(norm_eps), dimensions={}
  inv_sqrt_hd = f32[] constant({inv_sqrt_hd})
  masked_value = f32[] constant(-1e+09)
  neg_inf = f32[] constant(-inf)
  fp8_min = bf16[] constant(-448)
  fp8_max = bf16[] constant(448)
  row_pos = s32[{B},{S},{S}]{2,1,0} iota(), iota_dimension=1
  col_pos = s32[{B},{S},{S}]{2,1,0} iota(), iota_dimension=2
  causal = pred[{B},{S},{S}]{2,1,0} compare(col_pos, row_pos), direction=LE
)hlo";

// One layer; {I} is the input residual, {L} the layer's name prefix, {W...} the text defining the
// weights as the dots read them, {A...} the text defining the activations entering the
// all-gathers and the RS dots, and {qkv_in}, {ctx_in}, {up_in}, {down_in} those activations'
// names (plain bf16 values, or FP8 dequantizations, spliced in by the generator).
constexpr std::string_view kLayer = R"hlo(
  {L}x = f32[{Tp},{D}]{1,0} convert({I})
  {L}x_sq = f32[{Tp},{D}]{1,0} multiply({L}x, {L}x)
  {L}x_ss = f32[{Tp}]{0} reduce({L}x_sq, f32_zero), dimensions={1}, to_apply=sum_f32
  {L}x_ms = f32[{Tp}]{0} multiply({L}x_ss, inv_width_b)
  {L}x_ms_eps = f32[{Tp}]{0} add({L}x_ms, norm_eps_b)
  {L}x_rs = f32[{Tp}]{0} rsqrt({L}x_ms_eps)
  {L}x_rs_b = f32[{Tp},{D}]{1,0} broadcast({L}x_rs), dimensions={0}
  {L}attn_norm_wf = f32[{D}]{0} convert({L}attn_norm_w)
  {L}attn_norm_wb = f32[{Tp},{D}]{1,0} broadcast({L}attn_norm_wf), dimensions={1}
  {L}x_n0 = f32[{Tp},{D}]{1,0} multiply({L}x, {L}x_rs_b)
  {L}x_n1 = f32[{Tp},{D}]{1,0} multiply({L}x_n0, {L}attn_norm_wb)
  {L}x_n = bf16[{Tp},{D}]{1,0} convert({L}x_n1)
{Aqkv}  {L}qkv_ag = bf16[{T},{D}]{1,0} all-gather({qkv_in}), channel_id={C1}, replica_groups={{{G}}}, dimensions={0}, use_global_device_ids=true
{Wq}  {L}q = bf16[{T},{Hd}]{1,0} dot({L}qkv_ag, {L}wq), lhs_contracting_dims={1}, rhs_contracting_dims={0}
{Wk}  {L}k = bf16[{T},{Hd}]{1,0} dot({L}qkv_ag, {L}wk), lhs_contracting_dims={1}, rhs_contracting_dims={0}
{Wv}  {L}v = bf16[{T},{Hd}]{1,0} dot({L}qkv_ag, {L}wv), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  {L}q_lo = bf16[{T},{Hh}]{1,0} slice({L}q), slice={[0:{T}], [0:{Hh}]}
  {L}q_hi = bf16[{T},{Hh}]{1,0} slice({L}q), slice={[0:{T}], [{Hh}:{Hd}]}
  {L}q_hi_neg = bf16[{T},{Hh}]{1,0} negate({L}q_hi)
  {L}q_rot = bf16[{T},{Hd}]{1,0} concatenate({L}q_hi_neg, {L}q_lo), dimensions={1}
  {L}q_c = bf16[{T},{Hd}]{1,0} multiply({L}q, rope_cos)
  {L}q_s = bf16[{T},{Hd}]{1,0} multiply({L}q_rot, rope_sin)
  {L}q_r = bf16[{T},{Hd}]{1,0} add({L}q_c, {L}q_s)
  {L}k_lo = bf16[{T},{Hh}]{1,0} slice({L}k), slice={[0:{T}], [0:{Hh}]}
  {L}k_hi = bf16[{T},{Hh}]{1,0} slice({L}k), slice={[0:{T}], [{Hh}:{Hd}]}
  {L}k_hi_neg = bf16[{T},{Hh}]{1,0} negate({L}k_hi)
  {L}k_rot = bf16[{T},{Hd}]{1,0} concatenate({L}k_hi_neg, {L}k_lo), dimensions={1}
  {L}k_c = bf16[{T},{Hd}]{1,0} multiply({L}k, rope_cos)
  {L}k_s = bf16[{T},{Hd}]{1,0} multiply({L}k_rot, rope_sin)
  {L}k_r = bf16[{T},{Hd}]{1,0} add({L}k_c, {L}k_s)
  {L}q3 = bf16[{B},{S},{Hd}]{2,1,0} reshape({L}q_r)
  {L}k3 = bf16[{B},{S},{Hd}]{2,1,0} reshape({L}k_r)
  {L}v3 = bf16[{B},{S},{Hd}]{2,1,0} reshape({L}v)
  {L}scores = f32[{B},{S},{S}]{2,1,0} dot({L}q3, {L}k3), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  {L}inv_sqrt_hd_b = f32[{B},{S},{S}]{2,1,0} broadcast(inv_sqrt_hd), dimensions={}
  {L}scores_s = f32[{B},{S},{S}]{2,1,0} multiply({L}scores, {L}inv_sqrt_hd_b)
  {L}masked_b = f32[{B},{S},{S}]{2,1,0} broadcast(masked_value), dimensions={}
  {L}scores_m = f32[{B},{S},{S}]{2,1,0} select(causal, {L}scores_s, {L}masked_b)
  {L}row_max = f32[{B},{S}]{1,0} reduce({L}scores_m, neg_inf), dimensions={2}, to_apply=max_f32
  {L}row_max_b = f32[{B},{S},{S}]{2,1,0} broadcast({L}row_max), dimensions={0,1}
  {L}scores_c = f32[{B},{S},{S}]{2,1,0} subtract({L}scores_m, {L}row_max_b)
  {L}probs_u = f32[{B},{S},{S}]{2,1,0} exponential({L}scores_c)
  {L}row_sum = f32[{B},{S}]{1,0} reduce({L}probs_u, f32_zero), dimensions={2}, to_apply=sum_f32
  {L}row_sum_b = f32[{B},{S},{S}]{2,1,0} broadcast({L}row_sum), dimensions={0,1}
  {L}probs = f32[{B},{S},{S}]{2,1,0} divide({L}probs_u, {L}row_sum_b)
  {L}probs16 = bf16[{B},{S},{S}]{2,1,0} convert({L}probs)
  {L}ctx3 = bf16[{B},{S},{Hd}]{2,1,0} dot({L}probs16, {L}v3), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  {L}ctx = bf16[{T},{Hd}]{1,0} reshape({L}ctx3)
{Actx}{Wo}  {L}attn_partial = bf16[{T},{D}]{1,0} dot({ctx_in}, {L}wo), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  {L}attn_out = bf16[{Tp},{D}]{1,0} reduce-scatter({L}attn_partial), channel_id={C2}, replica_groups={{{G}}}, dimensions={0}, use_global_device_ids=true, to_apply=sum_bf16
  {L}attn_outf = f32[{Tp},{D}]{1,0} convert({L}attn_out)
  {L}h = f32[{Tp},{D}]{1,0} add({L}x, {L}attn_outf)
  {L}h_sq = f32[{Tp},{D}]{1,0} multiply({L}h, {L}h)
  {L}h_ss = f32[{Tp}]{0} reduce({L}h_sq, f32_zero), dimensions={1}, to_apply=sum_f32
  {L}h_ms = f32[{Tp}]{0} multiply({L}h_ss, inv_width_b)
  {L}h_ms_eps = f32[{Tp}]{0} add({L}h_ms, norm_eps_b)
  {L}h_rs = f32[{Tp}]{0} rsqrt({L}h_ms_eps)
  {L}h_rs_b = f32[{Tp},{D}]{1,0} broadcast({L}h_rs), dimensions={0}
  {L}mlp_norm_wf = f32[{D}]{0} convert({L}mlp_norm_w)
  {L}mlp_norm_wb = f32[{Tp},{D}]{1,0} broadcast({L}mlp_norm_wf), dimensions={1}
  {L}h_n0 = f32[{Tp},{D}]{1,0} multiply({L}h, {L}h_rs_b)
  {L}h_n1 = f32[{Tp},{D}]{1,0} multiply({L}h_n0, {L}mlp_norm_wb)
  {L}h_n = bf16[{Tp},{D}]{1,0} convert({L}h_n1)
{Aup}  {L}up_ag = bf16[{T},{D}]{1,0} all-gather({up_in}), channel_id={C3}, replica_groups={{{G}}}, dimensions={0}, use_global_device_ids=true
{Wgate}  {L}gate = bf16[{T},{Fp}]{1,0} dot({L}up_ag, {L}wgate), lhs_contracting_dims={1}, rhs_contracting_dims={0}
{Wup}  {L}up = bf16[{T},{Fp}]{1,0} dot({L}up_ag, {L}wup), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  {L}gate_sig = bf16[{T},{Fp}]{1,0} logistic({L}gate)
  {L}gate_silu = bf16[{T},{Fp}]{1,0} multiply({L}gate, {L}gate_sig)
  {L}swiglu = bf16[{T},{Fp}]{1,0} multiply({L}gate_silu, {L}up)
{Adown}{Wdown}  {L}down_partial = bf16[{T},{D}]{1,0} dot({down_in}, {L}wdown), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  {L}mlp_out = bf16[{Tp},{D}]{1,0} reduce-scatter({L}down_partial), channel_id={C4}, replica_groups={{{G}}}, dimensions={0}, use_global_device_ids=true, to_apply=sum_bf16
  {L}mlp_outf = f32[{Tp},{D}]{1,0} convert({L}mlp_out)
  {L}out = f32[{Tp},{D}]{1,0} add({L}h, {L}mlp_outf)
  {L}resid = bf16[{Tp},{D}]{1,0} convert({L}out)
)hlo";

// Instructions of the module besides the layers (reducers, shared parameters and constants).
constexpr int64_t kSharedInstructions = 26;

struct Param {
  std::string name, shape;
  bool replicated;
};

// A weight as its dots read it: a bf16 parameter, or (FP8) an f8e4m3fn parameter dequantized by
// a bf16 per-tensor scale. Appends its parameters to `params` and returns the text defining
// `{L}<name>` (empty for a plain parameter, defined in the parameter list).
std::string Weight(const std::string& l, const std::string& name, const std::string& dims,
                   bool fp8, std::vector<Param>* params) {
  const std::string w = l + name;
  if (!fp8) {
    params->push_back({w, absl::StrCat("bf16", dims), false});
    return "";
  }
  params->push_back({w + "_fp8", absl::StrCat("f8e4m3fn", dims), false});
  params->push_back({w + "_scale", "bf16[]", true});
  return absl::StrCat("  ", w, "_cvt = bf16", dims, " convert(", w, "_fp8)\n", "  ", w,
                      "_sb = bf16", dims, " broadcast(", w, "_scale), dimensions={}\n", "  ", w,
                      " = bf16", dims, " multiply(", w, "_cvt, ", w, "_sb)\n");
}

// The text defining activation `{L}<out>`, the FP8 quantize-dequantize of `{L}<in>` with a
// per-tensor bf16 scale (appended to `params`); empty for a bf16 layer, which reads `{L}<in>`.
std::string Activation(const std::string& l, const std::string& in, const std::string& out,
                       const std::string& dims, bool fp8, std::vector<Param>* params) {
  const std::string a = l + out;
  if (!fp8) return "";
  params->push_back({a + "_scale", "bf16[]", true});
  const std::string t = absl::StrCat("bf16", dims);
  return absl::StrCat(
      "  ", a, "_sb = ", t, " broadcast(", a, "_scale), dimensions={}\n",                    //
      "  ", a, "_div = ", t, " divide(", l, in, ", ", a, "_sb)\n",                            //
      "  ", a, "_lo = ", t, " broadcast(fp8_min), dimensions={}\n",                           //
      "  ", a, "_hi = ", t, " broadcast(fp8_max), dimensions={}\n",                           //
      "  ", a, "_clamp = ", t, " clamp(", a, "_lo, ", a, "_div, ", a, "_hi)\n",               //
      "  ", a, "_fp8 = f8e4m3fn", dims, " convert(", a, "_clamp)\n",                          //
      "  ", a, "_cvt = ", t, " convert(", a, "_fp8)\n",                                       //
      "  ", a, " = ", t, " multiply(", a, "_cvt, ", a, "_sb)\n");
}

std::string Dims(int64_t a, int64_t b) { return absl::StrCat("[", a, ",", b, "]{1,0}"); }

}  // namespace

LayerStackSize LayerStackSize::Llama8B() {
  LayerStackSize z;
  z.partitions = 4;
  z.sequences = 1;
  z.sequence_length = 8192;
  z.width = 4096;
  z.mlp_width = 14336;
  return z;
}

int64_t LayerStackInstructionsPerLayer(bool fp8) { return fp8 ? 147 : 83; }

int64_t LayerStackLayersFor(int64_t instructions, int64_t fp8_every) {
  // Average instructions per layer over one period of FP8 / bf16 layers.
  const int64_t period = fp8_every > 0 ? fp8_every : 1;
  const int64_t fp8_layers = fp8_every > 0 ? 1 : 0;
  const int64_t per_period = fp8_layers * LayerStackInstructionsPerLayer(true) +
                             (period - fp8_layers) * LayerStackInstructionsPerLayer(false);
  const int64_t body = std::max<int64_t>(0, instructions - kSharedInstructions);
  return std::max<int64_t>(1, (body * period + per_period / 2) / per_period);
}

std::string LayerStackModuleText(int64_t layers, const LayerStackSize& z, int64_t fp8_every) {
  const int64_t p = z.partitions;
  const int64_t t = z.tokens(), tp = t / p, d = z.width, hd = d / p, hh = hd / 2,
                fp = z.mlp_width / p;
  std::string group;
  for (int64_t i = 0; i < p; ++i) absl::StrAppend(&group, i ? "," : "", i);
  const std::vector<std::pair<std::string, std::string>> sizes = {
      {"{Tp}", absl::StrCat(tp)}, {"{T}", absl::StrCat(t)},   {"{Hd}", absl::StrCat(hd)},
      {"{Hh}", absl::StrCat(hh)}, {"{Fp}", absl::StrCat(fp)}, {"{D}", absl::StrCat(d)},
      {"{B}", absl::StrCat(z.sequences)}, {"{S}", absl::StrCat(z.sequence_length)},
      {"{P}", absl::StrCat(p)},   {"{G}", group}};
  std::vector<std::pair<std::string, std::string>> head_subs = sizes;
  head_subs.push_back({"{N}", absl::StrCat(layers)});
  head_subs.push_back({"{inv_width}", absl::StrFormat("%.9g", 1.0 / static_cast<double>(d))});
  head_subs.push_back(
      {"{inv_sqrt_hd}", absl::StrFormat("%.9g", 1.0 / std::sqrt(static_cast<double>(hd)))});
  std::string text = absl::StrReplaceAll(absl::string_view(kHead.data(), kHead.size()), head_subs);

  std::vector<Param> params;
  std::string body;
  std::string input = "resid_in";
  for (int64_t n = 0; n < layers; ++n) {
    const bool fp8 = fp8_every > 0 && n % fp8_every == 0;
    const std::string l = absl::StrCat("l", n, "_");
    params.push_back({l + "attn_norm_w", absl::StrCat("bf16[", d, "]{0}"), true});
    params.push_back({l + "mlp_norm_w", absl::StrCat("bf16[", d, "]{0}"), true});
    std::vector<std::pair<std::string, std::string>> subs = sizes;
    subs.push_back({"{L}", l});
    subs.push_back({"{I}", input});
    for (int c = 1; c <= 4; ++c) {
      subs.push_back({absl::StrCat("{C", c, "}"), absl::StrCat(4 * n + c)});
    }
    // The activations entering the all-gathers and the RS dots: the values themselves in a
    // bf16 layer, their FP8 quantize-dequantize in an FP8 layer.
    auto act = [&](const std::string& key, const std::string& in, const std::string& out,
                   const std::string& dims) {
      subs.push_back({absl::StrCat("{A", key, "}"), Activation(l, in, out, dims, fp8, &params)});
      subs.push_back({absl::StrCat("{", out, "}"), l + (fp8 ? out : in)});
    };
    act("qkv", "x_n", "qkv_in", Dims(tp, d));
    subs.push_back({"{Wq}", Weight(l, "wq", Dims(d, hd), fp8, &params)});
    subs.push_back({"{Wk}", Weight(l, "wk", Dims(d, hd), fp8, &params)});
    subs.push_back({"{Wv}", Weight(l, "wv", Dims(d, hd), fp8, &params)});
    act("ctx", "ctx", "ctx_in", Dims(t, hd));
    subs.push_back({"{Wo}", Weight(l, "wo", Dims(hd, d), fp8, &params)});
    act("up", "h_n", "up_in", Dims(tp, d));
    subs.push_back({"{Wgate}", Weight(l, "wgate", Dims(d, fp), fp8, &params)});
    subs.push_back({"{Wup}", Weight(l, "wup", Dims(d, fp), fp8, &params)});
    act("down", "swiglu", "down_in", Dims(t, fp));
    subs.push_back({"{Wdown}", Weight(l, "wdown", Dims(fp, d), fp8, &params)});
    // Every key is a whole `{...}` token, so one left-to-right pass replaces them all (the
    // inserted texts hold no placeholders).
    const std::string layer = absl::StrReplaceAll(absl::string_view(kLayer.data(), kLayer.size()), subs);
    body += layer;
    input = l + "resid";
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& q = params[i];
    absl::StrAppend(&text, "  ", q.name, " = ", q.shape, " parameter(", i + 3, ")",
                    q.replicated ? ", sharding={replicated}" : "", "\n");
  }
  absl::StrAppend(&text, body, "  ROOT resid_out = bf16", Dims(tp, d), " copy(", input,
                  ")\n}\n");
  return text;
}

}  // namespace weave::tools
