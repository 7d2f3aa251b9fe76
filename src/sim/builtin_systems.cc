// Built-in system files, embedded so that `weave simulate --system=NAME` works from any
// directory. Each string is byte-identical to systems/<name>.json (checked by
// tests/unit/sim/system_test.cc): edit both together.
#include <string_view>

namespace weave::sim::internal {

struct BuiltinSystem {
  std::string_view name;
  std::string_view json;
};

extern const BuiltinSystem kBuiltinSystems[];
extern const int kNumBuiltinSystems;

const BuiltinSystem kBuiltinSystems[] = {
    {"a100x8", R"json({
  "name": "a100x8",
  "description": "8x NVIDIA A100 SXM4 80GB, NVLink3 through NVSwitch (HGX A100 8-GPU)",
  "source": "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: dense BF16/FP16 312 TFLOP/s, TF32 156 TFLOP/s, FP64 tensor 19.5 TFLOP/s, no FP8 (FP8 GEMMs fall back to the FP16 rate), HBM2e 2039 GB/s, NVLink 600 GB/s bidirectional = 300 GB/s per direction; 108 SMs. latency_us, efficiencies and contention are model estimates (performance-model.md).",
  "num_gpus": 8,
  "sm_count": 108,
  "matmul_tflops": {"bf16": 312, "f16": 312, "f32": 156, "fp8": 0, "f64": 19.5},
  "hbm_gbps": 2039,
  "link_gbps": 300,
  "latency_us": 4.0,
  "link_efficiency": 0.8,
  "contention": 0.1,
  "gemm": {"efficiency": 0.75, "tiled": true, "tile_m": 128, "tile_n": 128, "tile_k": 64, "overhead_us": 1.0}
}
)json"},
    {"h100x8", R"json({
  "name": "h100x8",
  "description": "8x NVIDIA H100 SXM5 80GB, NVLink4 through NVSwitch (HGX H100 8-GPU)",
  "source": "NVIDIA H100 Tensor Core GPU datasheet, SXM5 column: dense = half of the with-sparsity figures (BF16/FP16 989 TFLOP/s, FP8 1979 TFLOP/s, TF32 494.5 TFLOP/s, FP64 tensor 67 TFLOP/s), HBM3 3.35 TB/s, NVLink 900 GB/s bidirectional = 450 GB/s per direction; 132 SMs (H100 SXM5). latency_us, efficiencies and contention are model estimates (performance-model.md: GEMMs reach 60-80% of peak, NVLink collectives 70-85%, a few microseconds per ring step).",
  "num_gpus": 8,
  "sm_count": 132,
  "matmul_tflops": {"bf16": 989, "f16": 989, "f32": 494.5, "fp8": 1979, "f64": 67},
  "hbm_gbps": 3350,
  "link_gbps": 450,
  "latency_us": 3.0,
  "link_efficiency": 0.8,
  "contention": 0.1,
  "gemm": {"efficiency": 0.75, "tiled": true, "tile_m": 128, "tile_n": 128, "tile_k": 64, "overhead_us": 1.0}
}
)json"},
    {"h200x8", R"json({
  "name": "h200x8",
  "description": "8x NVIDIA H200 SXM 141GB, NVLink4 through NVSwitch (HGX H200 8-GPU)",
  "source": "NVIDIA H200 Tensor Core GPU datasheet, SXM column: same tensor cores as H100 SXM5 (dense BF16/FP16 989 TFLOP/s, FP8 1979 TFLOP/s, TF32 494.5 TFLOP/s, FP64 tensor 67 TFLOP/s), HBM3e 141 GB at 4.8 TB/s, NVLink 900 GB/s bidirectional = 450 GB/s per direction; 132 SMs. latency_us, efficiencies and contention are model estimates (performance-model.md).",
  "num_gpus": 8,
  "sm_count": 132,
  "matmul_tflops": {"bf16": 989, "f16": 989, "f32": 494.5, "fp8": 1979, "f64": 67},
  "hbm_gbps": 4800,
  "link_gbps": 450,
  "latency_us": 3.0,
  "link_efficiency": 0.8,
  "contention": 0.1,
  "gemm": {"efficiency": 0.75, "tiled": true, "tile_m": 128, "tile_n": 128, "tile_k": 64, "overhead_us": 1.0}
}
)json"},
};
const int kNumBuiltinSystems = 3;

}  // namespace weave::sim::internal
