// The MXFP8 MLP block of `weave demo --mx` (contract in the header).
#include "tools/demo_mx_module.h"

#include "absl/strings/str_replace.h"

namespace weave::tools {

std::string MxDemoModuleText(int64_t tokens, int64_t model, int64_t hidden) {
  static constexpr std::string_view kText = R"hlo(HloModule mxfp8_mlp_block, num_partitions=4

ENTRY mlp {
  tokens = bf16[TOKENS,MODEL] parameter(0), sharding={devices=[4,1]<=[4]}
  w_up = f8e4m3fn[HIDDEN,MODEL] parameter(1), sharding={devices=[4,1]<=[4]}
  w_up_scale = f8e8m0fnu[HIDDEN,MODEL_BLOCKS] parameter(2), sharding={devices=[4,1]<=[4]}
  w_down = f8e4m3fn[MODEL,HIDDEN] parameter(3), sharding={devices=[1,4]<=[4]}
  w_down_scale = f8e8m0fnu[MODEL,HIDDEN_BLOCKS] parameter(4), sharding={devices=[1,4]<=[4]}
  tokens_mx = (f8e4m3fn[TOKENS,MODEL], f8e8m0fnu[TOKENS,MODEL_BLOCKS]) custom-call(tokens), custom_call_target="__op$quantize"
  tokens_q = f8e4m3fn[TOKENS,MODEL] get-tuple-element(tokens_mx), index=0
  tokens_scale = f8e8m0fnu[TOKENS,MODEL_BLOCKS] get-tuple-element(tokens_mx), index=1
  up = bf16[TOKENS,HIDDEN] custom-call(tokens_q, w_up, tokens_scale, w_up_scale), custom_call_target="__op$block_scaled_dot", sharding={devices=[1,4]<=[4]}
  zero = bf16[] constant(0)
  zeros = bf16[TOKENS,HIDDEN] broadcast(zero), dimensions={}
  act = bf16[TOKENS,HIDDEN] maximum(up, zeros)
  act_mx = (f8e4m3fn[TOKENS,HIDDEN], f8e8m0fnu[TOKENS,HIDDEN_BLOCKS]) custom-call(act), custom_call_target="__op$quantize"
  act_q = f8e4m3fn[TOKENS,HIDDEN] get-tuple-element(act_mx), index=0
  act_scale = f8e8m0fnu[TOKENS,HIDDEN_BLOCKS] get-tuple-element(act_mx), index=1
  ROOT down = bf16[TOKENS,MODEL] custom-call(act_q, w_down, act_scale, w_down_scale), custom_call_target="__op$block_scaled_dot", sharding={devices=[4,1]<=[4]}
}
)hlo";
  return absl::StrReplaceAll(std::string(kText), {{"TOKENS", std::to_string(tokens)},
                                     {"MODEL_BLOCKS", std::to_string(model / 32)},
                                     {"HIDDEN_BLOCKS", std::to_string(hidden / 32)},
                                     {"MODEL", std::to_string(model)},
                                     {"HIDDEN", std::to_string(hidden)}});
}

}  // namespace weave::tools
