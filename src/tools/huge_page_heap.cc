// See huge_page_heap.h.
#include "tools/huge_page_heap.h"

#include <cstdlib>
#include <cstring>

#if defined(WEAVE_WITH_TCMALLOC)
#include <sys/mman.h>

#include <gperftools/malloc_extension.h>
#endif

namespace weave::tools {

#if defined(WEAVE_WITH_TCMALLOC)
namespace {

// Wraps tcmalloc's own system allocator (sbrk, then mmap): asks it for whole, aligned huge pages
// and tells the kernel to back them with huge pages. tcmalloc uses the whole of *actual_size.
class HugePageSysAllocator : public SysAllocator {
 public:
  explicit HugePageSysAllocator(SysAllocator* base) : base_(base) {}

  void* Alloc(size_t size, size_t* actual_size, size_t alignment) override {
    const size_t rounded = (size + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    if (rounded < size) return nullptr;  // overflow
    size_t got = rounded;
    void* p = base_->Alloc(rounded, &got, alignment < kHugePageBytes ? kHugePageBytes : alignment);
    if (p == nullptr) return nullptr;
    // Advice only: without transparent huge pages this fails and the memory is plain pages.
    (void)madvise(p, got, MADV_HUGEPAGE);
    if (actual_size != nullptr) *actual_size = got;
    return p;
  }

 private:
  SysAllocator* base_;
};

bool Install() {
  const char* env = std::getenv("WEAVE_HUGE_PAGES");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  MallocExtension* ext = MallocExtension::instance();
  SysAllocator* base = ext == nullptr ? nullptr : ext->GetSystemAllocator();
  if (base == nullptr) return false;
  static HugePageSysAllocator* const wrapper = new HugePageSysAllocator(base);  // lives forever
  ext->SetSystemAllocator(wrapper);
  return true;
}

}  // namespace

bool UseHugePageHeap() {
  static const bool installed = Install();
  return installed;
}

#else  // not linked with tcmalloc

bool UseHugePageHeap() { return false; }

#endif

}  // namespace weave::tools
