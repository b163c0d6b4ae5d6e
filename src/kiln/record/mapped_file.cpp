#include "kiln/record/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/core/error.h"

namespace kiln::record {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, Access access) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(detail::concat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw FileError(detail::concat(path, ": cannot stat: ", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FileError(detail::concat(path, ": not a regular file"));
  }
  std::shared_ptr<MappedFile> m(new MappedFile);
  m->path_ = path;
  m->size_ = size_t(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw FileError(
          detail::concat(path, ": cannot map ", m->size_, " bytes: ", std::strerror(e)));
    }
    m->data_ = static_cast<const uint8_t*>(p);
    m->advise(access);
  }
  ::close(fd);  // the mapping keeps the file alive
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::advise(Access access) const {
  if (!data_) return;
  int advice = access == Access::sequential ? MADV_SEQUENTIAL
               : access == Access::random   ? MADV_RANDOM
                                            : MADV_NORMAL;
  ::madvise(const_cast<uint8_t*>(data_), size_, advice);
}

}  // namespace kiln::record
