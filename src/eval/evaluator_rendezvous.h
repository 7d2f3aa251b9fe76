// The evaluator's rendezvous: every device of a run (one thread each) meets the others at each
// execution of a collective, and a deadlock (devices that reach different collectives, or some
// that finished while others wait) is detected without timeouts. Internal to the evaluator
// (eval/evaluator.h describes the contract).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "eval/value.h"
#include "hlo/ir.h"

namespace weave::eval::internal {

// All devices' contributions (indexed by device) -> each device's result.
using CollectiveFn =
    std::function<absl::StatusOr<std::vector<ValuePtr>>(const std::vector<std::vector<ValuePtr>>&)>;

// Devices are numbered replica * num_partitions + partition.
class Coordinator {
 public:
  Coordinator(int64_t num_partitions, int64_t replica_count)
      : n_(num_partitions), r_(replica_count), devices_(num_partitions * replica_count),
        running_(devices_), where_(static_cast<size_t>(devices_), "running") {}

  // "partition d", or "device d (replica r, partition p)" when there are replicas.
  std::string DeviceName(int64_t d) const;

  // Blocks until every device contributed to execution `count` of `instr`, then the last one to
  // arrive runs `fn` on all contributions; returns this device's result. Aborted when another
  // device failed; InvalidArgument (through failure()) when the devices cannot meet.
  absl::StatusOr<ValuePtr> Exchange(int64_t device, const HloInstruction* instr, int64_t count,
                                    std::vector<ValuePtr> contribution, const CollectiveFn& fn);

  // `device` finished its entry computation.
  void Finish(int64_t device);
  // `device` failed with `s`: the first failure is kept and every waiting device is released.
  void Fail(int64_t device, const absl::Status& s);

  bool failed();
  absl::Status failure();

 private:
  struct Slot {
    std::vector<std::vector<ValuePtr>> contrib;
    std::vector<ValuePtr> results;
    int64_t arrived = 0, fetched = 0, waiters = 0;
    bool done = false;
  };

  absl::Status Aborted() const;
  void FailLocked(int64_t device, const absl::Status& s);
  void CheckDeadlockLocked();

  const int64_t n_, r_, devices_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t running_;
  int64_t waiting_ = 0;
  std::vector<std::string> where_;
  std::map<std::pair<const HloInstruction*, int64_t>, Slot> slots_;
  bool failed_ = false;
  absl::Status failure_;
};

}  // namespace weave::eval::internal
