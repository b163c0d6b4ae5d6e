#pragma once
// The readers under fuzzing take a path (they stat, mmap or gzopen it); this puts the fuzzer's
// bytes in an anonymous in-memory file and names it /proc/self/fd/N, so no disk is touched.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

class FuzzFile {
 public:
  FuzzFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("kiln_fuzz", MFD_CLOEXEC);
    if (fd_ < 0) __builtin_trap();
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) __builtin_trap();
      done += size_t(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~FuzzFile() { ::close(fd_); }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};
