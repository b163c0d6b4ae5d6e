#pragma once
// A read-only memory map of a whole file. Record shards are read through a map so that random
// access costs no system call and sequential reads ride the kernel's readahead.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kiln::record {

enum class Access : uint8_t { normal, sequential, random };

class MappedFile {
 public:
  // Throws FileError naming the path and the system error.
  static std::shared_ptr<MappedFile> open(const std::string& path, Access access = Access::normal);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void advise(Access access) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln::record
