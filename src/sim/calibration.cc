// The calibration rows C1-C5 and their modules (see calibration.h).
#include "sim/calibration.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gpu/compile_pipeline.h"
#include "hlo/parser.h"
#include "passes/pass.h"
#include "hlo/status_macros.h"

namespace weave::sim {
namespace {

std::string Ty(PrimitiveType t) { return std::string(PrimitiveTypeName(t)); }

std::string Arr(PrimitiveType t, std::vector<int64_t> dims) {
  return absl::StrCat(Ty(t), "[", absl::StrJoin(dims, ","), "]");
}

std::string Group(int64_t n) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(i);
  return absl::StrCat("{{", absl::StrJoin(ids, ","), "}}");
}

// source_target_pairs moving every partition's value `shift` places round the ring.
std::string Pairs(int64_t n, int64_t shift) {
  std::vector<std::string> p;
  for (int64_t j = 0; j < n; ++j) {
    p.push_back(absl::StrCat("{", j, ",", ((j + shift) % n + n) % n, "}"));
  }
  return absl::StrCat("{", absl::StrJoin(p, ","), "}");
}

std::string Queue(bool streams, int64_t q) {
  if (!streams) return "";
  return absl::StrCat(", backend_config={\"operation_queue_id\":\"", q,
                      "\",\"wait_on_operation_queues\":[]}");
}

std::string Waits(bool streams, int64_t q) {
  if (!streams) return "";
  return absl::StrCat(", backend_config={\"operation_queue_id\":\"0\",\"wait_on_operation_queues\":[\"",
                      q, "\"]}");
}

constexpr char kForceEarliest[] = ", backend_config={\"force_earliest_schedule\":true}";

// The s32 row offset of a block: (pid + add) mod nparts, times block (the module's `nparts` and
// `block` constants, which the caller's text defines).
void EmitOffset(std::string* t, const std::string& name, int64_t add) {
  absl::StrAppend(t, "  ", name, ".c = u32[] constant(", add, ")\n");
  absl::StrAppend(t, "  ", name, ".a = u32[] add(pid, ", name, ".c)\n");
  absl::StrAppend(t, "  ", name, ".i = u32[] remainder(", name, ".a, nparts)\n");
  absl::StrAppend(t, "  ", name, ".u = u32[] multiply(", name, ".i, block)\n");
  absl::StrAppend(t, "  ", name, " = s32[] convert(", name, ".u)\n");
}

}  // namespace

std::string TpMatmulBaseModule(const TpMatmul& m) {
  const PrimitiveType t = m.type;
  const int64_t n = m.ring, b = m.rows / m.ring;
  std::string s = absl::StrCat("HloModule ", m.name, "_base, num_partitions=", n, "\n\n");
  if (m.kind == TpMatmul::Kind::kAllGather) {
    absl::StrAppend(&s, "ENTRY main {\n  x = ", Arr(t, {b, m.contracting}), " parameter(0)\n");
    std::vector<std::string> outs, shapes;
    for (size_t d = 0; d < m.cols.size(); ++d) {
      absl::StrAppend(&s, "  w", d, " = ", Arr(t, {m.contracting, m.cols[d]}), " parameter(",
                      d + 1, ")\n");
    }
    absl::StrAppend(&s, "  ag = ", Arr(t, {m.rows, m.contracting}),
                    " all-gather(x), channel_id=1, replica_groups=", Group(n),
                    ", dimensions={0}, use_global_device_ids=true\n");
    for (size_t d = 0; d < m.cols.size(); ++d) {
      absl::StrAppend(&s, "  y", d, " = ", Arr(t, {m.rows, m.cols[d]}), " dot(ag, w", d,
                      "), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n");
      outs.push_back(absl::StrCat("y", d));
      shapes.push_back(Arr(t, {m.rows, m.cols[d]}));
    }
    absl::StrAppend(&s, "  ROOT result = (", absl::StrJoin(shapes, ", "), ") tuple(",
                    absl::StrJoin(outs, ", "), ")\n}\n");
    return s;
  }
  const int64_t c = m.cols.empty() ? 1 : m.cols[0];
  absl::StrAppend(&s, "sum {\n  a = ", Ty(t), "[] parameter(0)\n  b = ", Ty(t),
                  "[] parameter(1)\n  ROOT s = ", Ty(t), "[] add(a, b)\n}\n\n");
  absl::StrAppend(&s, "ENTRY main {\n  x = ", Arr(t, {m.rows, m.contracting}), " parameter(0)\n",
                  "  w = ", Arr(t, {m.contracting, c}), " parameter(1)\n",
                  "  p = ", Arr(t, {m.rows, c}),
                  " dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n",
                  "  ROOT rs = ", Arr(t, {b, c}), " reduce-scatter(p), channel_id=1, ",
                  "replica_groups=", Group(n),
                  ", dimensions={0}, use_global_device_ids=true, to_apply=sum\n}\n");
  return s;
}

std::string TpMatmulDecomposedModule(const TpMatmul& m, bool streams) {
  const PrimitiveType t = m.type;
  const int64_t n = m.ring, b = m.rows / m.ring;
  std::string s = absl::StrCat("HloModule ", m.name, "_decomposed, num_partitions=", n, "\n\n");
  if (m.kind == TpMatmul::Kind::kAllGather) {
    // Rank i receives the shard of rank i+s at step s (one transfer of one shard per step) and
    // writes its GEMMs' rows at block (i+s) mod n of the outputs, which are given (not filled).
    const int64_t dots = static_cast<int64_t>(m.cols.size());
    absl::StrAppend(&s, "ENTRY main {\n  x = ", Arr(t, {b, m.contracting}), " parameter(0)\n");
    for (int64_t d = 0; d < dots; ++d) {
      absl::StrAppend(&s, "  w", d, " = ", Arr(t, {m.contracting, m.cols[d]}), " parameter(",
                      d + 1, ")\n");
      absl::StrAppend(&s, "  out", d, "_0 = ", Arr(t, {m.rows, m.cols[d]}), " parameter(",
                      dots + 1 + d, ")\n");
    }
    absl::StrAppend(&s, "  pid = u32[] partition-id()\n  nparts = u32[] constant(", n,
                    ")\n  block = u32[] constant(", b, ")\n  zero = s32[] constant(0)\n");
    for (int64_t st = 0; st < n; ++st) {
      std::string shard = st == 0 ? "x" : absl::StrCat("shard", st);
      if (st > 0) {
        absl::StrAppend(&s, "  ", shard, " = ", Arr(t, {b, m.contracting}),
                        " collective-permute(x), channel_id=", st,
                        ", source_target_pairs=", Pairs(n, -st), kForceEarliest, "\n");
      }
      std::string off = absl::StrCat("off", st);
      EmitOffset(&s, off, st);
      for (int64_t d = 0; d < dots; ++d) {
        const int64_t q = 1 + st * dots + d;
        absl::StrAppend(&s, "  part", st, "_", d, " = ", Arr(t, {b, m.cols[d]}), " dot(", shard,
                        ", w", d, "), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                        Queue(streams, q), "\n");
        absl::StrAppend(&s, "  out", d, "_", st + 1, " = ", Arr(t, {m.rows, m.cols[d]}),
                        " dynamic-update-slice(out", d, "_", st, ", part", st, "_", d, ", ", off,
                        ", zero)", Waits(streams, q), "\n");
      }
    }
    std::vector<std::string> outs, shapes;
    for (int64_t d = 0; d < dots; ++d) {
      outs.push_back(absl::StrCat("out", d, "_", n));
      shapes.push_back(Arr(t, {m.rows, m.cols[d]}));
    }
    absl::StrAppend(&s, "  ROOT result = (", absl::StrJoin(shapes, ", "), ") tuple(",
                    absl::StrJoin(outs, ", "), ")\n}\n");
    return s;
  }
  // Reduce-scatter: rank i computes the partial product of block (i+s) mod n at step s (its own
  // block last) and sends it to that block's owner; the owner sums what it received with its own
  // partial product in one kernel.
  const int64_t c = m.cols.empty() ? 1 : m.cols[0];
  std::string sum_params, sum_body;
  for (int64_t j = 0; j < n; ++j) {
    absl::StrAppend(&sum_params, "  s", j, " = ", Arr(t, {b, c}), " parameter(", j, ")\n");
  }
  std::string acc = "s0";
  for (int64_t j = 1; j < n; ++j) {
    std::string next = j + 1 == n ? "ROOT total" : absl::StrCat("t", j);
    absl::StrAppend(&sum_body, "  ", next, " = ", Arr(t, {b, c}), " add(", acc, ", s", j, ")\n");
    acc = absl::StrCat("t", j);
  }
  if (n == 1) absl::StrAppend(&sum_body, "  ROOT total = ", Arr(t, {b, c}), " copy(s0)\n");
  absl::StrAppend(&s, "sum_blocks {\n", sum_params, sum_body, "}\n\n");
  absl::StrAppend(&s, "ENTRY main {\n  x = ", Arr(t, {m.rows, m.contracting}), " parameter(0)\n",
                  "  w = ", Arr(t, {m.contracting, c}), " parameter(1)\n",
                  "  pid = u32[] partition-id()\n  nparts = u32[] constant(", n,
                  ")\n  block = u32[] constant(", b, ")\n  zero = s32[] constant(0)\n");
  std::vector<std::string> received;
  for (int64_t k = 1; k <= n; ++k) {
    const int64_t st = k % n;  // blocks i+1, ..., i+n-1, then i's own
    std::string off = absl::StrCat("off", st);
    EmitOffset(&s, off, st);
    absl::StrAppend(&s, "  xs", st, " = ", Arr(t, {b, m.contracting}), " dynamic-slice(x, ", off,
                    ", zero), dynamic_slice_sizes={", b, ",", m.contracting, "}\n");
    absl::StrAppend(&s, "  part", st, " = ", Arr(t, {b, c}), " dot(xs", st,
                    ", w), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                    Queue(streams, k), "\n");
    if (st != 0) {
      absl::StrAppend(&s, "  recv", st, " = ", Arr(t, {b, c}), " collective-permute(part", st,
                      "), channel_id=", st, ", source_target_pairs=", Pairs(n, st),
                      kForceEarliest, "\n");
      received.push_back(absl::StrCat("recv", st));
    }
  }
  absl::StrAppend(&s, "  ROOT y = ", Arr(t, {b, c}), " fusion(part0",
                  received.empty() ? "" : ", ", absl::StrJoin(received, ", "),
                  "), kind=kLoop, calls=sum_blocks\n}\n");
  return s;
}

namespace {

constexpr char kFlux[] =
    "Flux README, performance table (bytedance/flux; Chang et al., arXiv:2406.06858)";
constexpr char kFluxImplAllGather[] =
    "Flux's fused AllGather+GEMM kernel (tiles wait for shards that copy engines pull): "
    "modelled as the ring decomposition with one compute stream per step, copy engines";
constexpr char kFluxImplReduceScatter[] =
    "Flux's fused GEMM+ReduceScatter kernel (the epilogue writes partial tiles to their "
    "owner over NVLink; no communication kernel holds SMs): modelled as the decomposition "
    "with one compute stream per step, with the copy-engine contention";
constexpr char kPyTorchImpl[] =
    "PyTorch async TP (torch.distributed._symmetric_memory): partial GEMMs one after the "
    "other on one stream, copy engines move the shards: one compute stream, copy engines";

// An AllGather+GEMM segment: the [rows, k] operand gathered over the ring, then one dot per
// entry of `cols` (each rank's output columns).
TpMatmul AllGatherSegment(std::string name, int64_t rows, int64_t k, std::vector<int64_t> cols,
                          PrimitiveType t) {
  TpMatmul m;
  m.kind = TpMatmul::Kind::kAllGather;
  m.name = std::move(name);
  m.rows = rows;
  m.contracting = k;
  m.cols = std::move(cols);
  m.type = t;
  return m;
}

// A GEMM+ReduceScatter segment: each rank's [rows, k_local] x [k_local, cols] partial product,
// reduce-scattered over the ring.
TpMatmul ReduceScatterSegment(std::string name, int64_t rows, int64_t k_local, int64_t cols,
                              PrimitiveType t) {
  TpMatmul m;
  m.kind = TpMatmul::Kind::kReduceScatter;
  m.name = std::move(name);
  m.rows = rows;
  m.contracting = k_local;
  m.cols = {cols};
  m.type = t;
  return m;
}

// C1 and C2: Flux's fused kernels on 8x H800, appended to `r`.
void AddFluxRows(std::vector<CalibrationRow>* r) {
  {
    CalibrationRow c;
    c.id = "C1";
    c.source = kFlux;
    c.hardware = "8x H800 SXM (NVLink 200 GB/s per direction), TP 8, fp16";
    c.shape = "AG+GEMM M=4096 K=12288 N=49152";
    c.system = "h800x8";
    c.overrides = {"collective_engine=copy_engine"};
    c.implementation = kFluxImplAllGather;
    c.streams = true;
    c.segments = {AllGatherSegment("c1_ag_gemm", 4096, 12288, {49152 / 8}, PrimitiveType::F16)};
    c.published_base_us = 1429;
    c.published_overlapped_us = 957;
    c.published_speedup = 1.49;
    r->push_back(c);
  }
  {
    CalibrationRow c;
    c.id = "C2";
    c.source = kFlux;
    c.hardware = "8x H800 SXM (NVLink 200 GB/s per direction), TP 8, fp16";
    c.shape = "GEMM+RS M=4096 K=49152 N=12288";
    c.system = "h800x8";
    c.overrides = {"collective_engine=copy_engine"};
    c.implementation = kFluxImplReduceScatter;
    c.streams = true;
    c.segments = {
        ReduceScatterSegment("c2_gemm_rs", 4096, 49152 / 8, 12288, PrimitiveType::F16)};
    c.published_base_us = 1408;
    c.published_overlapped_us = 932;
    c.published_speedup = 1.51;
    r->push_back(c);
  }
}

// C3: PyTorch's small-M AllGather+GEMM on H100.
CalibrationRow PyTorchSmallMRow() {
  CalibrationRow c;
  c.id = "C3";
  c.source = "PyTorch PR 143160 (_multimem_all_gather_matmul for small M)";
  c.hardware = "H100, TP 8 (assumed), bf16 (assumed)";
  c.shape = "AG+GEMM M=2048 N=3584 K=8192";
  c.system = "h100x8";
  c.overrides = {"collective_engine=copy_engine"};
  c.implementation = kPyTorchImpl;
  c.streams = false;
  c.segments = {AllGatherSegment("c3_ag_gemm", 2048, 8192, {3584}, PrimitiveType::BF16)};
  c.published_base_us = 301;
  c.published_overlapped_us = 354;
  c.published_speedup = 0.85;
  return c;
}

// C4 and C5: one Llama3 forward at one local batch size (one row per published batch). Llama3
// layers, TP 8, sequence 8192: Q/K/V (heads 64/8/8 for 70B, 32/8/8 for 8B, head dim 128),
// output projection, gate and up, down projection.
CalibrationRow LlamaRow(std::string id, std::string model, int64_t batch, int64_t hidden,
                        int64_t q_local, int64_t kv_local, int64_t ffn_local, int64_t layers,
                        double base_ms, double overlapped_ms, double speedup) {
  CalibrationRow c;
  c.id = absl::StrCat(id, " b=", batch);
  c.source = "\"Introducing Async Tensor Parallelism in PyTorch\" (PyTorch dev-discuss), Fig. 9";
  c.hardware = "8x H100 (500 W), TP 8, bf16, seq 8192";
  c.shape = absl::StrCat("Llama3 ", model, " forward, local batch ", batch, " (", layers,
                         " layers x 4 TP matmuls)");
  c.system = "h100x8";
  // The published runs capped the GPUs at 500 W (700 W is the H100 SXM default): dense
  // GEMMs sustain lower clocks. Assumed: 0.7 of peak inside a tile instead of 0.85.
  c.overrides = {"collective_engine=copy_engine", "gemm.efficiency=0.7"};
  c.implementation =
      absl::StrCat(kPyTorchImpl, "; GEMMs at 0.7 of peak for the 500 W cap (assumed)");
  c.streams = false;
  const int64_t tokens = batch * 8192;
  const std::string tag = absl::StrCat("llama3_", model, "_b", batch);
  const PrimitiveType t = PrimitiveType::BF16;
  c.segments = {AllGatherSegment(tag + "_qkv", tokens, hidden, {q_local, kv_local, kv_local}, t),
                ReduceScatterSegment(tag + "_o", tokens, q_local, hidden, t),
                AllGatherSegment(tag + "_gate_up", tokens, hidden, {ffn_local, ffn_local}, t),
                ReduceScatterSegment(tag + "_down", tokens, ffn_local, hidden, t)};
  c.layers = layers;
  c.published_base_us = base_ms * 1e3;
  c.published_overlapped_us = overlapped_ms * 1e3;
  c.published_speedup = speedup;
  return c;
}

// The rows C1-C5, in table order (never freed: CalibrationRows hands out references).
std::vector<CalibrationRow>* NewCalibrationRows() {
  auto* r = new std::vector<CalibrationRow>;
  AddFluxRows(r);
  r->push_back(PyTorchSmallMRow());
  r->push_back(LlamaRow("C4", "70B", 12, 8192, 1024, 128, 3584, 80, 5629, 4724, 1.19));
  r->push_back(LlamaRow("C4", "70B", 8, 8192, 1024, 128, 3584, 80, 3765, 3124, 1.21));
  r->push_back(LlamaRow("C4", "70B", 4, 8192, 1024, 128, 3584, 80, 1937, 1610, 1.20));
  r->push_back(LlamaRow("C5", "8B", 12, 4096, 512, 128, 1792, 32, 880, 678, 1.30));
  r->push_back(LlamaRow("C5", "8B", 8, 4096, 512, 128, 1792, 32, 597, 464, 1.29));
  return r;
}

}  // namespace

const std::vector<CalibrationRow>& CalibrationRows() {
  static const std::vector<CalibrationRow>* rows = NewCalibrationRows();
  return *rows;
}

namespace {

absl::StatusOr<double> SimulateText(const std::string& text, const SystemSpec& system) {
  ASSIGN_OR_RETURN(std::unique_ptr<HloModule> m, ParseHloModule(text, "<calibration>"));
  ASSIGN_OR_RETURN(SimResult r, SimulateModule(*m, system, {}));
  return r.total_us;
}

// The base module through Weave's compile pipeline (no cost gate), simulated as it is and with
// its GEMMs of less than one wave one after another (the cost gate's conservative bound, the
// slower of the two): {as is, bound}.
absl::StatusOr<std::pair<double, double>> SimulateWeave(const std::string& text,
                                                        const SystemSpec& system) {
  ASSIGN_OR_RETURN(std::unique_ptr<HloModule> m, ParseHloModule(text, "<calibration>"));
  std::vector<std::string> unavailable;  // passes missing from this build are left out
  ASSIGN_OR_RETURN(std::unique_ptr<HloPassPipeline> pipeline,
                   MakeCompilePipeline(CompilePipelinePassNames(), PassOptions(), &unavailable));
  RETURN_IF_ERROR(pipeline->Run(m.get()));
  ASSIGN_OR_RETURN(SimResult r, SimulateModule(*m, system, {}));
  SimOptions one;
  one.serial_sub_wave_gemms = true;
  ASSIGN_OR_RETURN(SimResult s, SimulateModule(*m, system, one));
  return std::make_pair(r.total_us, std::max(r.total_us, s.total_us));
}

}  // namespace

absl::StatusOr<std::vector<CalibrationResult>> RunCalibration() {
  std::vector<CalibrationResult> out;
  for (const CalibrationRow& row : CalibrationRows()) {
    absl::StatusOr<SystemSpec> sys = LoadSystem(row.system);
    for (const std::string& o : row.overrides) {
      if (!sys.ok()) break;
      sys = OverrideSystemValue(*sys, o);
    }
    if (!sys.ok()) return sys.status();
    double base = 0, decomposed = 0, weave = 0, weave_one = 0;
    for (const TpMatmul& seg : row.segments) {
      const std::string base_text = TpMatmulBaseModule(seg);
      ASSIGN_OR_RETURN(double b, SimulateText(base_text, *sys));
      ASSIGN_OR_RETURN(double d,
                       SimulateText(TpMatmulDecomposedModule(seg, row.streams), *sys));
      ASSIGN_OR_RETURN(auto w, SimulateWeave(base_text, *sys));
      base += b;
      decomposed += d;
      weave += w.first;
      weave_one += w.second;
    }
    CalibrationResult res;
    res.row = &row;
    res.weave_us = weave;
    res.weave_speedup = weave > 0 ? base / weave : 0;
    res.weave_bound_us = weave_one;
    res.weave_bound_speedup = weave_one > 0 ? base / weave_one : 0;
    if (row.layers > 0) {
      res.saving_per_layer_us = base - decomposed;
      const double saving = res.saving_per_layer_us * static_cast<double>(row.layers);
      res.predicted_overlapped_us = row.published_base_us - saving;
      res.predicted_speedup = res.predicted_overlapped_us > 0
                                  ? row.published_base_us / res.predicted_overlapped_us
                                  : 0;
    } else {
      res.predicted_base_us = base;
      res.base_ratio = base / row.published_base_us;
      res.predicted_overlapped_us = decomposed;
      res.predicted_speedup = decomposed > 0 ? base / decomposed : 0;
    }
    res.speedup_ratio = res.predicted_speedup / row.published_speedup;
    out.push_back(res);
  }
  return out;
}

std::string CalibrationTable(const std::vector<CalibrationResult>& results) {
  std::string o =
      "Calibration against published measurements (../shared/specs/performance-model.md, rows "
      "C1-C5)\n"
      "Tolerances: speedup within 15%, non-overlapped time within 10% (whole-model rows: the "
      "saving over the layers' TP matmuls is compared; their non-overlapped time includes "
      "attention and is not modelled).\n\n";
  absl::StrAppendFormat(&o, "%-8s %-9s %10s %10s %6s   %10s %10s   %8s %8s %6s   %s\n", "row",
                        "system", "base pub", "base pred", "ratio", "ovl pub", "ovl pred",
                        "spd pub", "spd pred", "ratio", "Weave's loop (pred; bound)");
  auto ms_or_us = [](double us) {
    return us >= 10000 ? absl::StrFormat("%.0f ms", us / 1e3)
                       : us >= 1000 ? absl::StrFormat("%.3f ms", us / 1e3)
                                    : absl::StrFormat("%.0f us", us);
  };
  for (const CalibrationResult& r : results) {
    const CalibrationRow& row = *r.row;
    absl::StrAppendFormat(
        &o, "%-8s %-9s %10s %10s %6s   %10s %10s   %8.2f %8.2f %6.3f   %.2fx (%s); %.2fx\n",
        row.id,
        row.system, ms_or_us(row.published_base_us),
        r.predicted_base_us ? ms_or_us(*r.predicted_base_us) : std::string("-"),
        r.base_ratio ? absl::StrFormat("%.3f", *r.base_ratio) : std::string("-"),
        ms_or_us(row.published_overlapped_us), ms_or_us(r.predicted_overlapped_us),
        row.published_speedup, r.predicted_speedup, r.speedup_ratio, r.weave_speedup,
        ms_or_us(r.weave_us * (row.layers > 0 ? static_cast<double>(row.layers) : 1.0)),
        r.weave_bound_speedup);
  }
  absl::StrAppend(&o, "\nRows (what was measured, how it is modelled):\n");
  for (const CalibrationResult& r : results) {
    const CalibrationRow& row = *r.row;
    absl::StrAppendFormat(&o, "  %s: %s; %s; %s. %s on %s%s%s.", row.id, row.source,
                          row.hardware, row.shape, row.implementation, row.system,
                          row.overrides.empty() ? "" : " with ",
                          absl::StrJoin(row.overrides, ", "));
    if (row.layers > 0) {
      absl::StrAppendFormat(&o, " Saving per layer %.1f us x %d layers.", r.saving_per_layer_us,
                            row.layers);
    }
    absl::StrAppend(&o, "\n");
  }
  absl::StrAppend(&o,
                  "\"Weave's loop\": the base module through weave's pipeline (decomposer, "
                  "handler, ...; no cost gate), speedup over the base module on the same system"
                  " (whole-model rows: per layer times the layers); \"bound\": the speedup the "
                  "cost gate counts, with the loop's GEMMs of less than one wave one after another "
                  "(the slower of the two; SimOptions::serial_sub_wave_gemms).\n");
  return o;
}

}  // namespace weave::sim
