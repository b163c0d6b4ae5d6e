#include "kiln/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "kiln/core/error.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

// Gzip data is read in pieces of this size, so memory grows only with bytes really there.
constexpr size_t kGzipChunk = size_t(4) << 20;

// Reads up to n bytes of the (uncompressed) stream; returns how many there were.
size_t read_some(gzFile f, const std::string& path, unsigned char* out, size_t n, uint64_t offset,
                 const char* what) {
  size_t got = 0;
  while (got < n) {
    unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
    int r = gzread(f, out + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw FileError(kiln::detail::concat(path, ": cannot decompress ", what, " at byte offset ",
                                           offset + got, " of the uncompressed data: ", msg));
    }
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

// Reads exactly n bytes; names the file and offset when the data ends first.
void read_exact(gzFile f, const std::string& path, unsigned char* out, size_t n, uint64_t offset,
                const char* what) {
  size_t got = read_some(f, path, out, n, offset, what);
  if (got < n) {
    throw FileError(kiln::detail::concat(path, ": truncated: ", what, " needs ", n,
                                         " bytes from byte offset ", offset,
                                         " but the data ends at ", offset + got));
  }
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

}  // namespace

IdxArray read_idx(const std::string& path, uint32_t expected_rank) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw FileError(path + ": is a folder, not an IDX file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw FileError(path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  // Large buffers for the 26 MB Fashion-MNIST files; small ones for small files (zlib allocates
  // three times this, and faulting megabytes in for a few bytes costs milliseconds).
  uint64_t file_bytes = fs::file_size(path, ec);
  if (ec || file_bytes > (uint64_t(1) << 50)) file_bytes = 0;
  gzbuffer(f, unsigned(std::clamp<uint64_t>(file_bytes, 8 << 10, 1 << 20)));
  unsigned char magic[4];
  read_exact(f, path, magic, 4, 0, "the IDX magic number");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] != expected_rank) {
    throw FileError(kiln::detail::concat(path, ": not an IDX file of unsigned bytes with ",
                                         expected_rank, " dimensions (magic at byte offset 0 is ",
                                         int(magic[0]), " ", int(magic[1]), " ", int(magic[2]), " ",
                                         int(magic[3]), ")"));
  }
  IdxArray a;
  const uint64_t header = 4 + 4 * uint64_t(expected_rank);
  uint64_t total = 1;
  for (uint32_t d = 0; d < expected_rank; ++d) {
    unsigned char b[4];
    read_exact(f, path, b, 4, 4 + 4 * d, "a dimension");
    int64_t v = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | b[3];
    if (v <= 0 || v > (int64_t(1) << 31)) {
      throw FileError(kiln::detail::concat(path, ": bad dimension ", d, " = ", v,
                                           " at byte offset ", 4 + 4 * d,
                                           " (must be 1 to 2147483648)"));
    }
    a.dims.push_back(v);
    if (__builtin_mul_overflow(total, uint64_t(v), &total) || total > uint64_t(INT64_MAX)) {
      throw FileError(kiln::detail::concat(path, ": dimensions ", dims_text(a.dims),
                                           " (byte offsets 4 to ", 4 + 4 * d + 3,
                                           ") overflow a 64-bit element count"));
    }
  }
  auto data_mismatch = [&](uint64_t held) {
    return FileError(kiln::detail::concat(
        path, ": dimensions ", dims_text(a.dims), " (byte offsets 4 to ", header - 1, ") need ",
        total, " bytes of data from byte offset ", header, ", but the ",
        gzdirect(f) ? "file" : "uncompressed stream", " holds ", held));
  };
  if (gzdirect(f)) {
    // A plain file: its size must be exactly the header plus the data the dimensions describe.
    uint64_t size = fs::file_size(path, ec);
    if (ec) throw FileError(path + ": cannot read its size: " + ec.message());
    if (size < header || size - header != total) throw data_mismatch(size - std::min(size, header));
    a.data = Tensor::empty(Shape(a.dims), DType::u8);
    read_exact(f, path, static_cast<unsigned char*>(a.data.raw_data()), size_t(total), header,
               "the data");
    return a;
  }
  // Gzip: the uncompressed size is known only by decompressing, so memory grows with the data
  // found, never with what the header claims.
  auto bytes = std::make_shared<std::vector<unsigned char>>();
  // Deflate expands at most 1032:1, so this much may really be there; it saves regrowing.
  bytes->reserve(size_t(std::min<uint64_t>(total, 1032 * file_bytes + 4096)));
  while (bytes->size() < total) {
    size_t want = size_t(std::min<uint64_t>(kGzipChunk, total - bytes->size()));
    size_t at = bytes->size();
    bytes->resize(at + want);
    size_t got = read_some(f, path, bytes->data() + at, want, header + at, "the data");
    if (got < want) {
      throw FileError(kiln::detail::concat(path, ": truncated: the data needs ", total,
                                           " bytes from byte offset ", header,
                                           " but the data ends at ", header + at + got));
    }
  }
  unsigned char extra;
  if (read_some(f, path, &extra, 1, header + total, "the data") != 0) {
    throw FileError(kiln::detail::concat(path, ": dimensions ", dims_text(a.dims),
                                         " (byte offsets 4 to ", header - 1, ") describe ", total,
                                         " bytes of data, but the uncompressed stream goes on "
                                         "past byte offset ",
                                         header + total));
  }
  a.data = Tensor::from_blob(bytes->data(), Shape(a.dims), DType::u8, bytes);
  return a;
}

}  // namespace kiln::data
