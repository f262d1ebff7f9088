// The process's malloc is tcmalloc's (CMakeLists.txt links it into lft and so into every binary):
// glibc's keeps the freed blocks of a MoE step's changing buffer sizes (docs/performance.md). A
// link order that puts glibc's first, or a linker that drops the library it sees no call into
// (--as-needed), would leave glibc's malloc in place without a word; this notices.
#include <dlfcn.h>

#include <cstdlib>

#include <gperftools/malloc_extension.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

TEST(Allocator, MallocAndTensorsComeFromTcmalloc) {
  void* library = dlopen("libtcmalloc_minimal.so.4", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr) << "libtcmalloc_minimal.so.4 is not loaded";
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "malloc"), dlsym(library, "malloc"));
  void* block = std::malloc(3 << 20);
  EXPECT_EQ(MallocExtension::instance()->GetOwnership(block), MallocExtension::kOwned);
  std::free(block);
  // LibTorch's CPU allocator (posix_memalign) too.
  const at::Tensor t = torch::empty({1 << 20});
  EXPECT_EQ(MallocExtension::instance()->GetOwnership(t.data_ptr()), MallocExtension::kOwned);
  dlclose(library);
}

}  // namespace
