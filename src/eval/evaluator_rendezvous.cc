// The evaluator's rendezvous (eval/evaluator_rendezvous.h).
#include "eval/evaluator_rendezvous.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "eval/evaluator_internal.h"

namespace weave::eval::internal {

using absl::InvalidArgumentError;

std::string Coordinator::DeviceName(int64_t d) const {
  if (r_ == 1) return absl::StrCat("partition ", d);
  return absl::StrCat("device ", d, " (replica ", d / n_, ", partition ", d % n_, ")");
}

absl::StatusOr<ValuePtr> Coordinator::Exchange(int64_t device, const HloInstruction* instr,
                                               int64_t count, std::vector<ValuePtr> contribution,
                                               const CollectiveFn& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) return Aborted();
  Slot& slot = slots_[{instr, count}];
  if (slot.contrib.empty()) slot.contrib.resize(static_cast<size_t>(devices_));
  slot.contrib[static_cast<size_t>(device)] = std::move(contribution);
  ++slot.arrived;
  if (slot.arrived == devices_) {
    auto results = fn(slot.contrib);
    if (!results.ok()) {
      FailLocked(device, absl::Status(results.status().code(),
                                      absl::StrCat(Describe(instr), ": ",
                                                   results.status().message())));
      return Aborted();
    }
    slot.results = std::move(*results);
    slot.contrib.clear();
    slot.done = true;
    // The blocked devices are released now (not when their threads wake up), so that a device
    // racing ahead to its next collective does not see them as still blocked.
    waiting_ -= slot.waiters;
    cv_.notify_all();
  } else {
    ++waiting_;
    ++slot.waiters;
    where_[static_cast<size_t>(device)] =
        absl::StrCat("waits at ", Describe(instr), " (execution ", count + 1, ")");
    CheckDeadlockLocked();
    cv_.wait(lock, [&] { return slot.done || failed_; });
    if (!slot.done) return Aborted();
    where_[static_cast<size_t>(device)] = "running";
  }
  ValuePtr mine = slot.results[static_cast<size_t>(device)];
  if (++slot.fetched == devices_) slots_.erase({instr, count});
  return mine;
}

void Coordinator::Finish(int64_t device) {
  std::lock_guard<std::mutex> lock(mu_);
  --running_;
  where_[static_cast<size_t>(device)] = "finished the entry computation";
  CheckDeadlockLocked();
}

void Coordinator::Fail(int64_t device, const absl::Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  FailLocked(device, s);
}

bool Coordinator::failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

absl::Status Coordinator::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

absl::Status Coordinator::Aborted() const {
  return absl::AbortedError("aborted because another device failed");
}

void Coordinator::FailLocked(int64_t device, const absl::Status& s) {
  if (!failed_) {
    failed_ = true;
    if (absl::IsAborted(s)) {
      failure_ = s;
    } else {
      failure_ = absl::Status(s.code(), devices_ == 1 ? std::string(s.message())
                                                      : absl::StrCat(DeviceName(device), ": ",
                                                                     s.message()));
    }
  }
  cv_.notify_all();
}

void Coordinator::CheckDeadlockLocked() {
  if (failed_ || waiting_ == 0) return;
  // Every slot needs all devices: a finished device, or every running device blocked, means
  // the waiting devices can never meet.
  if (running_ < devices_ || waiting_ == running_) {
    std::vector<std::string> lines;
    for (int64_t d = 0; d < devices_; ++d) {
      lines.push_back(absl::StrCat(DeviceName(d), " ", where_[static_cast<size_t>(d)]));
    }
    failed_ = true;
    failure_ = InvalidArgumentError(absl::StrCat(
        "mismatched collectives: the devices cannot meet (they reach different collectives, "
        "or some finished while others wait): ",
        absl::StrJoin(lines, "; ")));
    cv_.notify_all();
  }
}

}  // namespace weave::eval::internal
