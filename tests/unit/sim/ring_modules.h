// Test helpers: generators of partitioned modules for the performance-model tests.
//  - PlainAllGatherModule: all-gather of a row-sharded activation [M/N, K] -> [M, K], then one dot
//    per local weight [K, n_j] (what SPMD partitioning leaves without windowed einsum).
//  - WindowedAllGatherModule: the same computation as a fully unrolled all-gather windowed loop
//    (trip count 1, wrapped in a trivial while), annotated the way the windowed einsum handler
//    does it: each dot on its own operation_queue_id, the merging dynamic-update-slice waiting on
//    that queue, each ring collective-permute with force_earliest_schedule.
// With `fp8` the ring carries f8e4m3fn shards and the GEMMs are `__cublas$lt$matmul$f8` custom
// calls (FP8 weights, scalar f32 scales), output bf16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weave::sim::testing {

struct RingSpec {
  int64_t n = 8;             // ring size (partitions)
  int64_t m = 8192;          // rows of the gathered activation
  int64_t k = 8192;          // contracting size
  std::vector<int64_t> cols = {1024, 128, 128};  // local weight columns n_j
  bool fp8 = false;
  int64_t loops = 1;  // WindowedAllGatherModule: independent loops (benchmarks), each its own body
};

inline std::string WireType(const RingSpec& r) { return r.fp8 ? "f8e4m3fn" : "bf16"; }

inline std::string Arr(const std::string& t, std::vector<int64_t> dims) {
  return absl::StrCat(t, "[", absl::StrJoin(dims, ","), "]");
}

// `dot(a, w)` or the FP8 cuBLASLt custom call, as one instruction line (without name).
inline std::string Gemm(const RingSpec& r, const std::string& a, const std::string& w,
                        int64_t rows, int64_t cols, const std::string& queue_config) {
  if (!r.fp8) {
    return absl::StrCat(Arr("bf16", {rows, cols}), " dot(", a, ", ", w,
                        "), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                        queue_config.empty() ? "" : ", backend_config=" + queue_config);
  }
  std::string cfg = queue_config.empty()
                        ? std::string("{\"operation_queue_id\":\"0\",\"wait_on_operation_queues\":[]")
                        : queue_config.substr(0, queue_config.size() - 1);
  absl::StrAppend(&cfg,
                  ",\"gemm_backend_config\":{\"alpha_real\":1,\"beta\":0,\"dot_dimension_numbers\":"
                  "{\"lhs_contracting_dimensions\":[\"1\"],\"rhs_contracting_dimensions\":[\"0\"],"
                  "\"lhs_batch_dimensions\":[],\"rhs_batch_dimensions\":[]},\"alpha_imag\":0,"
                  "\"epilogue\":\"DEFAULT\"}}");
  return absl::StrCat("(", Arr("bf16", {rows, cols}), ", s8[33554432]) custom-call(", a, ", ", w,
                      ", sa, sb), custom_call_target=\"__cublas$lt$matmul$f8\", backend_config=",
                      cfg);
}

inline std::string Header(const std::string& name, const RingSpec& r) {
  return absl::StrCat("HloModule ", name, ", num_partitions=", r.n, "\n\n");
}

inline std::string EntryParams(const RingSpec& r, bool sharded_x) {
  std::string out;
  std::string wt = WireType(r);
  absl::StrAppend(&out, "  x = ", Arr(wt, {sharded_x ? r.m / r.n : r.m, r.k}),
                  " parameter(0)\n");
  for (size_t j = 0; j < r.cols.size(); ++j) {
    absl::StrAppend(&out, "  w", j, " = ", Arr(wt, {r.k, r.cols[j]}), " parameter(", j + 1,
                    ")\n");
  }
  if (r.fp8) {
    absl::StrAppend(&out, "  sa = f32[] parameter(", r.cols.size() + 1, ")\n");
    absl::StrAppend(&out, "  sb = f32[] parameter(", r.cols.size() + 2, ")\n");
  }
  return out;
}

inline std::string PlainAllGatherModule(const RingSpec& r) {
  std::string out = Header("plain_all_gather_dots", r);
  std::vector<std::string> ids;
  for (int64_t i = 0; i < r.n; ++i) ids.push_back(absl::StrCat(i));
  absl::StrAppend(&out, "ENTRY main {\n", EntryParams(r, true));
  absl::StrAppend(&out, "  gathered = ", Arr(WireType(r), {r.m, r.k}),
                  " all-gather(x), channel_id=1, replica_groups={{", absl::StrJoin(ids, ","),
                  "}}, dimensions={0}, use_global_device_ids=true\n");
  std::vector<std::string> outs, shapes;
  for (size_t j = 0; j < r.cols.size(); ++j) {
    std::string g = Gemm(r, "gathered", absl::StrCat("w", j), r.m, r.cols[j], "");
    absl::StrAppend(&out, "  y", j, " = ", g, "\n");
    if (r.fp8) {
      absl::StrAppend(&out, "  r", j, " = ", Arr("bf16", {r.m, r.cols[j]}),
                      " get-tuple-element(y", j, "), index=0\n");
      outs.push_back(absl::StrCat("r", j));
    } else {
      outs.push_back(absl::StrCat("y", j));
    }
    shapes.push_back(Arr("bf16", {r.m, r.cols[j]}));
  }
  absl::StrAppend(&out, "  ROOT out = (", absl::StrJoin(shapes, ", "), ") tuple(",
                  absl::StrJoin(outs, ", "), ")\n}\n");
  return out;
}

inline std::string WindowedAllGatherModule(const RingSpec& r) {
  const int64_t rows = r.m / r.n;
  const std::string wt = WireType(r);
  const size_t nw = r.cols.size();
  // Loop state: (shard, w_0..w_{J-1}, out_0..out_{J-1}, [sa, sb,] counter).
  std::vector<std::string> state = {Arr(wt, {rows, r.k})};
  for (size_t j = 0; j < nw; ++j) state.push_back(Arr(wt, {r.k, r.cols[j]}));
  for (size_t j = 0; j < nw; ++j) state.push_back(Arr("bf16", {r.m, r.cols[j]}));
  if (r.fp8) {
    state.push_back("f32[]");
    state.push_back("f32[]");
  }
  state.push_back("u32[]");
  const std::string tuple_shape = absl::StrCat("(", absl::StrJoin(state, ", "), ")");
  const size_t counter = state.size() - 1;

  std::vector<std::string> pairs, table;
  for (int64_t s = 0; s < r.n; ++s) {
    pairs.push_back(absl::StrCat("{", s, ",", (s + r.n - 1) % r.n, "}"));
    table.push_back(absl::StrCat(s * rows));
  }
  std::string out = Header("windowed_all_gather_dots", r);
  int64_t queue = 1;  // operation_queue_id, unique across the module
  for (int64_t copy = 0; copy < r.loops; ++copy) {
  const std::string sfx = copy == 0 ? "" : absl::StrCat(".", copy);
  absl::StrAppend(&out, "windowed_dot_general_body_ag", sfx, " {\n  st = ", tuple_shape,
                  " parameter(0)\n");
  absl::StrAppend(&out, "  s0 = ", state[0], " get-tuple-element(st), index=0\n");
  for (size_t j = 0; j < nw; ++j) {
    absl::StrAppend(&out, "  w", j, " = ", state[1 + j], " get-tuple-element(st), index=", 1 + j,
                    "\n");
    absl::StrAppend(&out, "  o", j, "_0 = ", state[1 + nw + j],
                    " get-tuple-element(st), index=", 1 + nw + j, "\n");
  }
  if (r.fp8) {
    absl::StrAppend(&out, "  sa = f32[] get-tuple-element(st), index=", 1 + 2 * nw, "\n");
    absl::StrAppend(&out, "  sb = f32[] get-tuple-element(st), index=", 2 + 2 * nw, "\n");
  }
  absl::StrAppend(&out, "  k = u32[] get-tuple-element(st), index=", counter, "\n");
  absl::StrAppend(&out, "  pid = u32[] partition-id()\n  nparts = u32[] constant(", r.n, ")\n");
  absl::StrAppend(&out, "  table = s32[", r.n, "] constant({", absl::StrJoin(table, ", "), "})\n");
  absl::StrAppend(&out, "  zero = s32[] constant(0)\n");
  for (int64_t i = 0; i < r.n; ++i) {
    if (i + 1 < r.n) {
      absl::StrAppend(&out, "  s", i + 1, " = ", state[0], " collective-permute(s", i,
                      "), channel_id=", copy * r.n + i + 1, ", source_target_pairs={",
                      absl::StrJoin(pairs, ","),
                      "}, backend_config={\"operation_queue_id\":\"0\",\"wait_on_operation_"
                      "queues\":[],\"force_earliest_schedule\":true}\n");
    }
    absl::StrAppend(&out, "  c", i, " = u32[] constant(", i, ")\n");
    absl::StrAppend(&out, "  kp", i, " = u32[] add(c", i, ", pid)\n");
    absl::StrAppend(&out, "  blk", i, " = u32[] remainder(kp", i, ", nparts)\n");
    absl::StrAppend(&out, "  offv", i, " = s32[1] dynamic-slice(table, blk", i,
                    "), dynamic_slice_sizes={1}\n");
    absl::StrAppend(&out, "  off", i, " = s32[] reshape(offv", i, ")\n");
    for (size_t j = 0; j < nw; ++j, ++queue) {
      std::string qcfg = absl::StrCat("{\"operation_queue_id\":\"", queue,
                                      "\",\"wait_on_operation_queues\":[],"
                                      "\"force_earliest_schedule\":false}");
      std::string part = absl::StrCat("d", i, "_", j);
      absl::StrAppend(&out, "  ", part, " = ",
                      Gemm(r, absl::StrCat("s", i), absl::StrCat("w", j), rows, r.cols[j], qcfg),
                      "\n");
      if (r.fp8) {
        absl::StrAppend(&out, "  e", i, "_", j, " = ", Arr("bf16", {rows, r.cols[j]}),
                        " get-tuple-element(", part, "), index=0\n");
        part = absl::StrCat("e", i, "_", j);
      }
      absl::StrAppend(&out, "  o", j, "_", i + 1, " = ", state[1 + nw + j],
                      " dynamic-update-slice(o", j, "_", i, ", ", part, ", off", i,
                      ", zero), backend_config={\"operation_queue_id\":\"0\","
                      "\"wait_on_operation_queues\":[\"",
                      queue, "\"],\"force_earliest_schedule\":false}\n");
    }
  }
  absl::StrAppend(&out, "  one = u32[] constant(1)\n  k1 = u32[] add(k, one)\n");
  std::vector<std::string> root = {absl::StrCat("s", r.n - 1)};
  for (size_t j = 0; j < nw; ++j) root.push_back(absl::StrCat("w", j));
  for (size_t j = 0; j < nw; ++j) root.push_back(absl::StrCat("o", j, "_", r.n));
  if (r.fp8) {
    root.push_back("sa");
    root.push_back("sb");
  }
  root.push_back("k1");
  absl::StrAppend(&out, "  ROOT next = ", tuple_shape, " tuple(", absl::StrJoin(root, ", "),
                  ")\n}\n\n");
  absl::StrAppend(&out, "windowed_dot_general_cond_ag", sfx, " {\n  cst = ", tuple_shape,
                  " parameter(0)\n  ck = u32[] get-tuple-element(cst), index=", counter,
                  "\n  trips = u32[] constant(1)\n  ROOT more = pred[] compare(ck, trips), "
                  "direction=LT\n}\n\n");
  }
  absl::StrAppend(&out, "ENTRY main {\n", EntryParams(r, true));
  absl::StrAppend(&out, "  fz = bf16[] constant(0)\n");
  std::vector<std::string> outs, shapes;
  for (int64_t copy = 0; copy < r.loops; ++copy) {
  const std::string sfx = copy == 0 ? "" : absl::StrCat(".", copy);
  std::vector<std::string> init = {"x"};
  for (size_t j = 0; j < nw; ++j) init.push_back(absl::StrCat("w", j));
  for (size_t j = 0; j < nw; ++j) {
    absl::StrAppend(&out, "  z", j, sfx, " = ", state[1 + nw + j],
                    " broadcast(fz), dimensions={}\n");
    init.push_back(absl::StrCat("z", j, sfx));
  }
  if (r.fp8) {
    init.push_back("sa");
    init.push_back("sb");
  }
  absl::StrAppend(&out, "  k0", sfx, " = u32[] constant(0)\n");
  init.push_back(absl::StrCat("k0", sfx));
  absl::StrAppend(&out, "  init", sfx, " = ", tuple_shape, " tuple(", absl::StrJoin(init, ", "),
                  ")\n");
  absl::StrAppend(&out, "  loop", sfx, " = ", tuple_shape, " while(init", sfx,
                  "), condition=windowed_dot_general_cond_ag", sfx,
                  ", body=windowed_dot_general_body_ag", sfx,
                  ", frontend_attributes={skip-simplify-while-loops_trip-count-one=\"true\"}, "
                  "backend_config={\"known_trip_count\":{\"n\":\"1\"}}\n");
  for (size_t j = 0; j < nw; ++j) {
    absl::StrAppend(&out, "  y", j, sfx, " = ", state[1 + nw + j], " get-tuple-element(loop",
                    sfx, "), index=", 1 + nw + j, "\n");
    outs.push_back(absl::StrCat("y", j, sfx));
    shapes.push_back(state[1 + nw + j]);
  }
  }
  absl::StrAppend(&out, "  ROOT out = (", absl::StrJoin(shapes, ", "), ") tuple(",
                  absl::StrJoin(outs, ", "), ")\n}\n");
  return out;
}

}  // namespace weave::sim::testing
