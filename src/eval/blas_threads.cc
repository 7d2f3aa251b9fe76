// See blas_threads.h.
#include "eval/blas_threads.h"

// OpenBLAS's own call for stopping its thread server (it uses it around fork); absent elsewhere.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

namespace weave::eval {

void StopIdleBlasThreads() {
  if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
}

std::mutex& BlasMutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}

}  // namespace weave::eval
