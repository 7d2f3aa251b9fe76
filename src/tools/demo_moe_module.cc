// The module `weave demo --moe` compiles: an expert-parallel (MoE) FFN block on 4 partitions,
// written by hand in XLA's HLO text format in partitioned form: the tokens a partition routes to
// each expert are exchanged with an all-to-all (dispatch), each partition runs its expert's FP8
// matmuls on the tokens it received, and a second all-to-all sends the results back (combine).
#include "tools/demo_moe_module.h"

namespace weave::tools {

std::string_view MoeDemoModuleText() {
  static constexpr std::string_view kText = R"hlo(
HloModule weave_demo_ep4_fp8_moe_ffn, entry_computation_layout={(bf16[128,128]{1,0}, bf16[128,4,32]{2,1,0}, bf16[128,4,32]{2,1,0}, bf16[], f8e4m3fn[128,512]{1,0}, bf16[], bf16[], f8e4m3fn[256,128]{1,0}, bf16[])->bf16[128,128]{1,0}}, num_partitions=4

// One mixture-of-experts FFN block, expert parallel over 4 partitions (expert e lives on
// partition e), tokens data parallel. Each partition routes its 128 tokens with a top-k dispatch
// mask into a [experts=4, capacity=32, width=128] buffer (GShard's dispatch einsum), quantizes it
// to FP8 and exchanges it with an all-to-all over the expert dim, so that partition e holds the
// tokens every partition sent to expert e. The expert is a SwiGLU FFN (fused gate/up weight,
// hidden width 256) with FP8 weights and activations; its output goes back with a second
// all-to-all and is summed into the tokens by the combine einsum.

ENTRY moe_ffn {
  tokens = bf16[128,128]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}
  dispatch_mask = bf16[128,4,32]{2,1,0} parameter(1), sharding={devices=[4,1,1]<=[4]}
  combine_weights = bf16[128,4,32]{2,1,0} parameter(2), sharding={devices=[4,1,1]<=[4]}
  dispatch_scale = bf16[] parameter(3), sharding={replicated}
  w_gate_up_fp8 = f8e4m3fn[128,512]{1,0} parameter(4), sharding={devices=[4,1]<=[4]}
  w_gate_up_scale = bf16[] parameter(5), sharding={replicated}
  hidden_scale = bf16[] parameter(6), sharding={replicated}
  w_down_fp8 = f8e4m3fn[256,128]{1,0} parameter(7), sharding={devices=[4,1]<=[4]}
  w_down_scale = bf16[] parameter(8), sharding={replicated}

  fp8_min = bf16[] constant(-448)
  fp8_max = bf16[] constant(448)

  // ---- dispatch: route, quantize to FP8, exchange over the experts ----
  routed = bf16[4,32,128]{2,1,0} dot(dispatch_mask, tokens), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  routed_sb = bf16[4,32,128]{2,1,0} broadcast(dispatch_scale), dimensions={}
  routed_div = bf16[4,32,128]{2,1,0} divide(routed, routed_sb)
  routed_min = bf16[4,32,128]{2,1,0} broadcast(fp8_min), dimensions={}
  routed_max = bf16[4,32,128]{2,1,0} broadcast(fp8_max), dimensions={}
  routed_clamp = bf16[4,32,128]{2,1,0} clamp(routed_min, routed_div, routed_max)
  routed_fp8 = f8e4m3fn[4,32,128]{2,1,0} convert(routed_clamp)
  routed_cvt = bf16[4,32,128]{2,1,0} convert(routed_fp8)
  routed_dsb = bf16[4,32,128]{2,1,0} broadcast(dispatch_scale), dimensions={}
  routed_dq = bf16[4,32,128]{2,1,0} multiply(routed_cvt, routed_dsb)
  dispatched = bf16[4,32,128]{2,1,0} all-to-all(routed_dq), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}

  // ---- the local expert: SwiGLU with FP8 weights ----
  w_gate_up_cvt = bf16[128,512]{1,0} convert(w_gate_up_fp8)
  w_gate_up_sb = bf16[128,512]{1,0} broadcast(w_gate_up_scale), dimensions={}
  w_gate_up = bf16[128,512]{1,0} multiply(w_gate_up_cvt, w_gate_up_sb)
  gate_up = bf16[4,32,512]{2,1,0} dot(dispatched, w_gate_up), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  gate = bf16[4,32,256]{2,1,0} slice(gate_up), slice={[0:4], [0:32], [0:256]}
  up = bf16[4,32,256]{2,1,0} slice(gate_up), slice={[0:4], [0:32], [256:512]}
  gate_f = f32[4,32,256]{2,1,0} convert(gate)
  up_f = f32[4,32,256]{2,1,0} convert(up)
  gate_sig = f32[4,32,256]{2,1,0} logistic(gate_f)
  gate_silu = f32[4,32,256]{2,1,0} multiply(gate_f, gate_sig)
  hidden_f = f32[4,32,256]{2,1,0} multiply(gate_silu, up_f)
  hidden = bf16[4,32,256]{2,1,0} convert(hidden_f)
  hidden_sb = bf16[4,32,256]{2,1,0} broadcast(hidden_scale), dimensions={}
  hidden_div = bf16[4,32,256]{2,1,0} divide(hidden, hidden_sb)
  hidden_min = bf16[4,32,256]{2,1,0} broadcast(fp8_min), dimensions={}
  hidden_max = bf16[4,32,256]{2,1,0} broadcast(fp8_max), dimensions={}
  hidden_clamp = bf16[4,32,256]{2,1,0} clamp(hidden_min, hidden_div, hidden_max)
  hidden_fp8 = f8e4m3fn[4,32,256]{2,1,0} convert(hidden_clamp)
  hidden_cvt = bf16[4,32,256]{2,1,0} convert(hidden_fp8)
  hidden_dsb = bf16[4,32,256]{2,1,0} broadcast(hidden_scale), dimensions={}
  hidden_dq = bf16[4,32,256]{2,1,0} multiply(hidden_cvt, hidden_dsb)
  w_down_cvt = bf16[256,128]{1,0} convert(w_down_fp8)
  w_down_sb = bf16[256,128]{1,0} broadcast(w_down_scale), dimensions={}
  w_down = bf16[256,128]{1,0} multiply(w_down_cvt, w_down_sb)
  expert_out = bf16[4,32,128]{2,1,0} dot(hidden_dq, w_down), lhs_contracting_dims={2}, rhs_contracting_dims={0}

  // ---- combine: send the results back, weight them into the tokens ----
  returned = bf16[4,32,128]{2,1,0} all-to-all(expert_out), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT moe_out = bf16[128,128]{1,0} dot(combine_weights, returned), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}
}
)hlo";
  return kText.substr(1);  // drop the newline after the opening delimiter
}

}  // namespace weave::tools
