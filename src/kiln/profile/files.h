#pragma once
// Writing and reading the profiler's files.
#include <string>

namespace kiln::profile {

// Writes `text` to a temporary name beside `path` and renames it into place (creating the
// folder), first removing the temporaries that killed writers of `path` left
// (core/temporary_files.h); throws FileError naming the path on failure.
void write_file_atomically(const std::string& path, const std::string& text);
// The whole file; throws FileError naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace kiln::profile
