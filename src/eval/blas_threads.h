// The BLAS worker threads of a process that may never multiply.
#pragma once

#include <mutex>

namespace weave::eval {

// Stops OpenBLAS's worker threads, which a pthreads build of OpenBLAS (Debian's default
// libopenblas0-pthread) starts when the library loads: each spins in sched_yield until its
// timeout (measured here: about 90 ms of CPU per process, 0.3.21) before it sleeps, so every
// `weave` command that never runs a GEMM (parse, opt, compile without --verify-numerics) paid
// that, on a second core or against the main thread on a busy machine. OpenBLAS starts the
// threads again on the first GEMM that uses them, so the evaluator keeps its threads.
// A no-op with another BLAS (the OpenBLAS entry point, blas_thread_shutdown_, is a weak symbol).
// Call once, at the start of main, before any other thread exists.
void StopIdleBlasThreads();

// One GEMM at a time in the process: held around every cblas call of the evaluator. Its device
// threads (one per simulated device, up to thousands) calling OpenBLAS at once would each take
// an OpenBLAS work buffer (tens of MiB of address space per call), which an address-space limit
// (the XLA conformance runner's 4 GiB) turned into a livelock in the allocator; OpenBLAS spreads
// each GEMM over the cores itself.
std::mutex& BlasMutex();

}  // namespace weave::eval
