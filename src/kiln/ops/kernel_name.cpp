#include "kiln/ops/kernel_name.h"

#include <mutex>
#include <set>

namespace kiln::ops {

const char* intern_kernel_name(std::string_view name) {
  static std::mutex mutex;
  // Never destroyed: primitives built by static objects may intern after main() returns.
  static auto* names = new std::set<std::string, std::less<>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = names->find(name);
  if (it == names->end()) it = names->emplace(name).first;
  return it->c_str();
}

std::string join_kernel_notes(const KernelNotes& notes) {
  std::string joined;
  for (int i = 0; i < notes.count; ++i) {
    bool repeated = false;
    for (int j = 0; j < i; ++j) repeated = repeated || notes.names[j] == notes.names[i];
    if (repeated) continue;
    if (!joined.empty()) joined += " + ";
    joined += notes.names[i];
  }
  return joined;
}

}  // namespace kiln::ops
