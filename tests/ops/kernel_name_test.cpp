// Kernels name themselves for the profiler: notes collected per thread, cleared when taken,
// names interned once; a oneDNN primitive notes its implementation and Kiln's own kernels theirs.
#include "kiln/ops/kernel_name.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "kiln/ops/functional.h"

namespace kiln::ops::kernel_name_test {
namespace {

TEST(KernelName, NotesAreTakenOnceAndJoinedWithoutRepeats) {
  clear_kernel_notes();
  note_kernel("reorder jit:uni");
  note_kernel("brgconv:avx512_core");
  note_kernel("reorder jit:uni");
  EXPECT_EQ(join_kernel_notes(take_kernel_notes()), "reorder jit:uni + brgconv:avx512_core");
  EXPECT_EQ(take_kernel_notes().count, 0);
  for (int i = 0; i < 2 * KernelNotes::kCapacity; ++i) note_kernel("k");  // never overflows
  EXPECT_EQ(take_kernel_notes().count, KernelNotes::kCapacity);
}

TEST(KernelName, NotesArePerThread) {
  clear_kernel_notes();
  note_kernel("here");
  std::thread([] {
    EXPECT_EQ(take_kernel_notes().count, 0);
    note_kernel("there");
  }).join();
  EXPECT_EQ(join_kernel_notes(take_kernel_notes()), "here");
}

TEST(KernelName, InternedNamesAreOneCopyEach) {
  const char* a = intern_kernel_name(std::string("brg:avx512_core"));
  const char* b = intern_kernel_name("brg:avx512_core");
  EXPECT_EQ(a, b);
  EXPECT_STREQ(a, "brg:avx512_core");
  EXPECT_NE(intern_kernel_name("jit:uni"), a);
}

TEST(KernelName, OneDnnMatmulNotesItsImplementation) {
  Tensor a = Tensor::ones({32, 64}), b = Tensor::ones({64, 16});
  clear_kernel_notes();
  matmul(a, b);
  const std::string noted = join_kernel_notes(take_kernel_notes());
  EXPECT_FALSE(noted.empty());
  EXPECT_EQ(noted.rfind("kiln:", 0), std::string::npos) << noted << " is oneDNN's, not Kiln's";
}

}  // namespace
}  // namespace kiln::ops::kernel_name_test
