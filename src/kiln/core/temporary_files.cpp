#include "kiln/core/temporary_files.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>

namespace kiln {
namespace fs = std::filesystem;

std::string temporary_path(const std::string& final_path, std::string_view marker) {
  const fs::path target(final_path);
  std::string name = ".";
  name.append(target.filename().string()).append(marker).append(std::to_string(::getpid()));
  return (target.parent_path() / name).string();
}

std::vector<std::string> remove_stale_temporaries(const std::string& directory,
                                                  std::string_view marker, std::string_view name) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(directory, ec)) {
    const std::string file = e.path().filename().string();
    const size_t at = file.rfind(marker);
    if (file.size() < 2 || file[0] != '.' || at == std::string::npos || at < 1) continue;
    if (!name.empty() && std::string_view(file).substr(1, at - 1) != name) continue;
    const char* begin = file.data() + at + marker.size();
    const char* end = file.data() + file.size();
    long pid = 0;
    auto [ptr, pec] = std::from_chars(begin, end, pid);
    if (pec != std::errc() || ptr != end || pid <= 0) continue;
    // kill(pid, 0) fails with ESRCH only when no such process exists.
    const bool alive = pid != long(::getpid()) && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
    if (alive) continue;
    std::error_code rec;
    if (fs::remove(e.path(), rec)) removed.push_back(e.path().string());
  }
  return removed;
}

std::vector<std::string> remove_stale_temporaries_of(const std::string& final_path,
                                                     std::string_view marker) {
  const fs::path target(final_path);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  return remove_stale_temporaries(folder.string(), marker, target.filename().string());
}

}  // namespace kiln
