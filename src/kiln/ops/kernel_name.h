#pragma once
// The kernels a launch ran, named for the profiler: oneDNN's implementation
// (primitive_desc::impl_info_str(), "brgconv:avx512_core", a reorder as "reorder jit:uni") or
// one of Kiln's own ("kiln:winograd_f4x4_3x3"). Kernels note their name on the calling thread
// each time they run; an observed launch clears the notes before it runs and the observer takes
// them after. With nothing observing, a note is one thread-local store and the list stays full.
#include <string>
#include <string_view>

namespace kiln::ops {

struct KernelNotes {
  static constexpr int kCapacity = 4;  // a launch rarely runs more (reorder, kernel, reorder)
  const char* names[kCapacity];
  int count;
};

inline constinit thread_local KernelNotes t_kernel_notes{{}, 0};

// `name` must live as long as the process: a literal, or intern_kernel_name()'s result.
inline void note_kernel(const char* name) {
  KernelNotes& n = t_kernel_notes;
  if (n.count < KernelNotes::kCapacity) n.names[n.count++] = name;
}
inline void clear_kernel_notes() {
  t_kernel_notes.count = 0;
}

// A copy of `name` that is never freed (one per distinct name; thread-safe). For names known
// only at run time, such as oneDNN's; called when a primitive is built, not when it runs.
const char* intern_kernel_name(std::string_view name);

// The calling thread's notes since the last clear, and clears them.
inline KernelNotes take_kernel_notes() {
  KernelNotes taken = t_kernel_notes;
  t_kernel_notes.count = 0;
  return taken;
}
// The names joined with " + ", each once: "reorder jit:uni + brgconv:avx512_core"; "" for none.
std::string join_kernel_notes(const KernelNotes& notes);

}  // namespace kiln::ops
