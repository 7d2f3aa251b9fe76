// The heap grows in whole, aligned 2 MiB blocks (tools/huge_page_heap.h).
#include "tools/huge_page_heap.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#if defined(WEAVE_WITH_TCMALLOC)
#include <gperftools/malloc_extension.h>
#endif

namespace weave::tools {
namespace {

#if defined(WEAVE_WITH_TCMALLOC)

TEST(HugePageHeapTest, GrowthIsWholeAlignedHugePages) {
  if (const char* env = std::getenv("WEAVE_HUGE_PAGES"); env != nullptr && std::string(env) == "0") {
    GTEST_SKIP() << "WEAVE_HUGE_PAGES=0 turns the huge-page heap off";
  }
  ASSERT_TRUE(UseHugePageHeap());
  EXPECT_TRUE(UseHugePageHeap()) << "a second call reports what the first did";
  SysAllocator* sys = MallocExtension::instance()->GetSystemAllocator();
  ASSERT_NE(sys, nullptr);
  // Sizes below, at and above one huge page, with tcmalloc's own page alignment (8 KiB).
  for (size_t size : {size_t{8192}, size_t{100} << 10, kHugePageBytes, kHugePageBytes + 1}) {
    size_t actual = 0;
    // Never freed: memory straight from the system. Called without tcmalloc's lock, which is
    // safe here: no other thread of the test grows the heap.
    void* p = sys->Alloc(size, &actual, 8192);
    ASSERT_NE(p, nullptr) << size;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << size;
    EXPECT_EQ(actual % kHugePageBytes, 0u) << size;
    EXPECT_GE(actual, size);
    EXPECT_LT(actual, size + kHugePageBytes);
    static_cast<char*>(p)[actual - 1] = 1;  // the whole reported size is usable
  }
  // The heap still works for large and small objects after the switch.
  void* big = std::malloc(size_t{64} << 20);
  ASSERT_NE(big, nullptr);
  static_cast<char*>(big)[(size_t{64} << 20) - 1] = 1;
  std::free(big);
}

// WEAVE_HUGE_PAGES=0 leaves tcmalloc's own system allocator in place. Run in a fresh process
// (the "threadsafe" death-test style re-executes the test binary), since the choice is made once
// per process.
TEST(HugePageHeapDeathTest, EnvironmentTurnsItOff) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("WEAVE_HUGE_PAGES", "0", 1);
        SysAllocator* before = MallocExtension::instance()->GetSystemAllocator();
        const bool installed = UseHugePageHeap();
        const bool unchanged = MallocExtension::instance()->GetSystemAllocator() == before;
        std::exit(!installed && unchanged ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

#else

TEST(HugePageHeapTest, WithoutTcmallocNothingIsInstalled) { EXPECT_FALSE(UseHugePageHeap()); }

#endif

}  // namespace
}  // namespace weave::tools
