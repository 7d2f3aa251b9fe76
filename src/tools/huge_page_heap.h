// The heap of a `weave` process grows in 2 MiB transparent huge pages.
#pragma once

#include <cstddef>

namespace weave::tools {

// The size a heap growth request is rounded up to, and the alignment it gets: one x86-64
// transparent huge page, 2 MiB.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Makes tcmalloc (gperftools, the allocator `weave` links: see CMakeLists.txt) take memory from
// the system in whole, aligned 2 MiB blocks and mark each with madvise(MADV_HUGEPAGE), so that
// the kernel backs the heap with transparent huge pages where its setting is `madvise` or
// `always` (/sys/kernel/mm/transparent_hugepage/enabled).
//
// Why: a compile touches most of its heap's pages once, and the first touch of a 4 KiB page is
// a kernel fault; 2 MiB pages make those faults (and TLB misses) rare. Figures: bench/NOTES.md.
//
// Call once, at the start of main (threads that already exist are no matter: tcmalloc switches
// its system allocator under its own lock). Returns true when the allocator was installed, false
// (and changes nothing) when the environment sets WEAVE_HUGE_PAGES to exactly "0", or when the
// binary is not linked with tcmalloc (the sanitizer builds). A second call returns what the first
// did. Where the kernel has no transparent huge pages the madvise call fails harmlessly and the
// heap behaves as before, 2 MiB-aligned. With TCMALLOC_HEAP_LIMIT_MB set, one growth may pass the
// limit by up to 2 MiB (tcmalloc checks the size before the rounding).
bool UseHugePageHeap();

}  // namespace weave::tools
