// The performance model's all-to-all (used by CollectiveTimeUs, simulator.h, for `all-to-all` and
// `ragged-all-to-all`), and with it the all-to-all windowed einsum's chunked exchanges
// (windowed_einsum/all_to_all_windowed_einsum.h).
//
// NCCL has no ring algorithm for all-to-all: it is a group of G-1 point-to-point transfers
// (ncclGroupStart, one ncclSend and one ncclRecv per peer, ncclGroupEnd: NCCL user guide,
// "Point-to-point communication", all-to-all example; nccl-tests' alltoall does the same). On the
// switched NVLink fabric of the built-in systems (NVSwitch) those transfers run at once, sharing
// the device's per-direction link bandwidth, so an all-to-all is ONE step:
//
//   t = latency_us + (G-1)/G * bytes / (link_gbps * link_efficiency)
//
// with `bytes` one device's operand (it keeps 1/G of it) and G the group size. A ring model would
// charge G-1 latencies per exchange, which would make every chunk of a windowed all-to-all pay
// (G-1) x latency_us and hide the real trade-off (per-chunk latency against overlap).
#pragma once

#include <cstdint>

#include "sim/simulator.h"

namespace weave::sim {

// Microseconds of one all-to-all of `bytes` per device over a group of `group_size` on `s`
// (0 for groups of one or no data).
double AllToAllTimeUs(const SystemSpec& s, double bytes, int64_t group_size);

}  // namespace weave::sim
