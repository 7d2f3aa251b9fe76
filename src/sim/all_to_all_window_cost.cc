#include "sim/all_to_all_window_cost.h"

#include <memory>
#include <string>

#include "gpu/fp8_gemm_rewriter.h"
#include "passes/collective_quantizer.h"

namespace weave::sim {

absl::StatusOr<double> EstimateAllToAllWindowRegionUs(const HloModule& region,
                                                      const SystemSpec& system,
                                                      double compute_capability) {
  std::unique_ptr<HloModule> m = region.Clone();
  CollectiveQuantizer quantizer;
  if (absl::StatusOr<bool> r = quantizer.Run(m.get()); !r.ok()) return r.status();
  Fp8GemmRewriter rewriter(compute_capability);
  if (absl::StatusOr<bool> r = rewriter.Run(m.get()); !r.ok()) return r.status();
  absl::StatusOr<SimResult> sim = SimulateModule(*m, system, SimOptions{});
  if (!sim.ok()) return sim.status();
  return sim->total_us;
}

AllToAllWindowCostModel MakeAllToAllWindowCostModel(const SystemSpec& system,
                                                    double compute_capability) {
  AllToAllWindowCostModel model;
  model.system = system.name.empty() ? system.origin : system.name;
  model.estimate_us = [system, compute_capability](const HloModule& region) {
    return EstimateAllToAllWindowRegionUs(region, system, compute_capability);
  };
  return model;
}

absl::Status AttachAllToAllWindowCostModel(HloPass* pass, std::string_view system,
                                           double compute_capability) {
  auto* a2a = dynamic_cast<AllToAllWindowedEinsum*>(pass);
  if (a2a == nullptr) return absl::OkStatus();
  absl::StatusOr<SystemSpec> spec = LoadSystem(system);
  if (!spec.ok()) return spec.status();
  a2a->set_cost_model(MakeAllToAllWindowCostModel(*spec, compute_capability));
  return absl::OkStatus();
}

}  // namespace weave::sim
