#include "kiln/profile/files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/core/temporary_files.h"

namespace kiln::profile {

void write_file_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw FileError("profiler: cannot create the folder of " + path + ": " + ec.message());
  remove_stale_temporaries_of(path);  // left by writers that were killed
  const std::string temporary = temporary_path(path);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw FileError("profiler: cannot write " + temporary + ": " + std::strerror(errno));
    out.write(text.data(), std::streamsize(text.size()));
    out.flush();
    if (!out) {
      fs::remove(temporary, ec);
      throw FileError("profiler: writing " + temporary + " failed (disk full?)");
    }
  }
  fs::rename(temporary, target, ec);
  if (ec) {
    fs::remove(temporary, ec);
    throw FileError("profiler: cannot rename " + temporary + " to " + path);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("profiler: cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace kiln::profile
