#include "kiln/train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"

namespace kiln::train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; Kiln writes it as stored in memory");

// Refuses absurd headers before allocating for them (the format's own reference limit).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::boolean:
      return "BOOL";
  }
  return "?";
}

bool dtype_from_safetensors(const std::string& s, DType& out) {
  static const std::pair<const char*, DType> kTable[] = {
      {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16},   {"I32", DType::i32},
      {"I64", DType::i64}, {"U8", DType::u8},   {"BOOL", DType::boolean}};
  for (auto& [name, t] : kTable) {
    if (s == name) {
      out = t;
      return true;
    }
  }
  return false;
}

[[noreturn]] void throw_file_error(const std::string& source, const std::string& what,
                                   uint64_t offset) {
  throw FileError(source + ": " + what + " (at byte offset " + std::to_string(offset) + ")");
}

std::string errno_text() {
  return std::strerror(errno);
}

uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0) {
  return uint32_t(::crc32_z(crc, static_cast<const Bytef*>(data), n));
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

bool is_checksum_key(const std::string& key) {
  return key == kChecksumKey || key.rfind(kChecksumPrefix, 0) == 0;
}

// The metadata's own checksum: every entry but the checksums, as key NUL value NUL, in key order.
uint32_t metadata_crc(const std::map<std::string, std::string>& metadata) {
  uint32_t crc = 0;
  for (const auto& [k, v] : metadata) {
    if (k.rfind(kChecksumPrefix, 0) == 0) continue;
    crc = crc32_of(k.data(), k.size() + 1, crc);  // c_str's NUL included
    crc = crc32_of(v.data(), v.size() + 1, crc);
  }
  return crc;
}

}  // namespace

std::string encode_safetensors(const std::vector<nn::NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> meta = metadata;
  for (const auto& [k, v] : metadata) {
    if (is_checksum_key(k)) {
      throw Error("save_checkpoint: metadata key '" + k + "' is reserved for checksums");
    }
  }
  std::vector<Tensor> dense;
  dense.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (t.is_traced()) throw Error("save_checkpoint: '" + name + "' is a traced tensor (no data)");
    dense.push_back(t.contiguous());
    meta[kChecksumPrefix + name] = hex32(crc32_of(dense.back().raw_data(), dense.back().nbytes()));
  }
  meta[kChecksumKey] = "crc32";
  meta[std::string(kChecksumPrefix) + "__metadata__"] = hex32(metadata_crc(meta));
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || name.empty()) {
      throw Error("save_checkpoint: invalid tensor name '" + name + "'");
    }
    if (header.contains(name)) throw Error("save_checkpoint: duplicate tensor name '" + name + "'");
    uint64_t bytes = t.nbytes();
    header[name] = {{"dtype", safetensors_dtype(t.dtype())},
                    {"shape", t.shape().dims()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string out;
  out.reserve(8 + json.size() + offset);
  uint64_t n = json.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += json;
  for (const Tensor& c : dense) out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  return out;
}

namespace {

// Checks and removes the checksum entries of the metadata (see safetensors.h). Files without them
// (other tools', or Kiln's before checksums) load unverified.
void verify_checksums(SafetensorsFile& file, const std::string& source) {
  std::map<std::string, std::string>& meta = file.metadata;
  auto marker = meta.find(kChecksumKey);
  bool any = marker != meta.end();
  for (const auto& [k, v] : meta) any = any || is_checksum_key(k);
  if (!any) return;
  if (marker == meta.end() || marker->second != "crc32") {
    throw_file_error(source,
                     marker == meta.end()
                         ? "__metadata__ holds checksums but no '" + std::string(kChecksumKey) +
                               "' entry (damaged header)"
                         : "__metadata__ '" + std::string(kChecksumKey) + "' is '" +
                               marker->second + "'; this version of Kiln checks only crc32",
                     8);
  }
  auto stored = [&](const std::string& what, const std::string& key) {
    auto it = meta.find(key);
    if (it == meta.end())
      throw_file_error(source, what + " has no checksum '" + key + "' (damaged header)", 8);
    uint32_t v = 0;
    auto [ptr, ec] =
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), v, 16);
    if (it->second.size() != 8 || ec != std::errc() || ptr != it->second.data() + 8) {
      throw_file_error(source, "checksum '" + key + "' is not 8 hex digits: '" + it->second + "'",
                       8);
    }
    return v;
  };
  const std::string meta_key = std::string(kChecksumPrefix) + "__metadata__";
  uint32_t want = stored("__metadata__", meta_key);
  uint32_t got = metadata_crc(meta);
  if (got != want) {
    throw_file_error(source,
                     "__metadata__ fails its checksum (crc32 " + hex32(got) + ", stored " +
                         hex32(want) + "): the header is damaged",
                     8);
  }
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const auto& [name, t] = file.tensors[i];
    want = stored("tensor '" + name + "'", kChecksumPrefix + name);
    got = crc32_of(t.raw_data(), t.nbytes());
    if (got != want) {
      throw_file_error(source,
                       "tensor '" + name + "' fails its checksum (crc32 of its " +
                           std::to_string(t.nbytes()) + " bytes is " + hex32(got) + ", stored " +
                           hex32(want) + "): the data is damaged",
                       file.byte_offsets[i]);
    }
  }
  // Every tensor and the metadata had one; any other is a checksum of a tensor that is gone.
  size_t checksums = std::erase_if(meta, [](const auto& kv) { return is_checksum_key(kv.first); });
  if (checksums != file.tensors.size() + 2) {
    throw_file_error(
        source, "__metadata__ holds checksums of tensors the file does not have (damaged header)",
        8);
  }
  file.verified = true;
}

}  // namespace

SafetensorsFile decode_safetensors(const std::string& bytes, const std::string& source) {
  const uint64_t size = bytes.size();
  if (size < 8)
    throw_file_error(
        source, "file is " + std::to_string(size) + " bytes, too short for a safetensors header",
        0);
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    throw_file_error(source,
                     "header length " + std::to_string(header_len) + " exceeds the " +
                         std::to_string(size - 8) +
                         " bytes that follow (truncated or not a safetensors file)",
                     0);
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + int64_t(data_start));
  } catch (const nlohmann::json::parse_error& e) {
    throw_file_error(source, std::string("header is not valid JSON: ") + e.what(),
                     8 + (e.byte > 0 ? e.byte - 1 : 0));
  } catch (const nlohmann::json::exception& e) {
    // Valid syntax the parser still refuses, e.g. a number beyond a double's range (1e999).
    throw_file_error(source, std::string("header is not usable JSON: ") + e.what(), 8);
  }
  if (!header.is_object()) throw_file_error(source, "header is not a JSON object", 8);

  SafetensorsFile file;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw_file_error(source, "__metadata__ is not an object", 8);
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          throw_file_error(source, "__metadata__ value '" + m.key() + "' is not a string", 8);
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (name.empty()) throw_file_error(source, "a tensor has an empty name", 8);
    auto bad = [&](const std::string& what) {
      throw_file_error(source, "tensor '" + name + "': " + what, 8);
    };
    if (!entry.is_object()) bad("entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) bad("missing dtype");
    DType dtype;
    if (!dtype_from_safetensors(entry["dtype"].get<std::string>(), dtype)) {
      bad("unsupported dtype '" + entry["dtype"].get<std::string>() + "'");
    }
    if (!entry.contains("shape") || !entry["shape"].is_array()) bad("missing shape");
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) bad("shape has a non-integer or negative dimension");
      uint64_t v = d.get<uint64_t>();
      if (v > uint64_t(std::numeric_limits<int64_t>::max()) ||
          (v != 0 && numel > std::numeric_limits<uint64_t>::max() / v)) {
        bad("shape overflows");
      }
      numel *= v;
      dims.push_back(int64_t(v));
    }
    if (dims.size() > 8) bad("rank " + std::to_string(dims.size()) + " is above 8");
    const auto& offs = entry.contains("data_offsets") ? entry["data_offsets"] : nlohmann::json();
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
        !offs[1].is_number_unsigned()) {
      bad("data_offsets is not [begin, end]");
    }
    uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      throw_file_error(source,
                       "tensor '" + name + "': data [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") lies outside the " + std::to_string(data_size) +
                           "-byte data section (truncated file?)",
                       data_start + std::min(begin, data_size));
    }
    uint64_t es = dtype_size(dtype);
    if (numel > std::numeric_limits<uint64_t>::max() / es || end - begin != numel * es) {
      throw_file_error(source,
                       "tensor '" + name + "': " + std::to_string(end - begin) +
                           " bytes of data for shape " + Shape(dims).str() + " " +
                           std::string(dtype_name(dtype)),
                       data_start + begin);
    }
    Tensor t = Tensor::empty(Shape(dims), dtype);
    if (end > begin) std::memcpy(t.raw_data(), bytes.data() + data_start + begin, end - begin);
    file.byte_offsets.push_back(data_start + begin);
    ranges.push_back({begin, end, file.tensors.size()});
    file.tensors.emplace_back(name, std::move(t));
  }
  // Overlapping ranges mean a crafted or corrupted header.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      throw_file_error(source,
                       "tensors '" + file.tensors[ranges[i - 1].index].first + "' and '" +
                           file.tensors[ranges[i].index].first + "' overlap",
                       data_start + ranges[i].begin);
    }
  }
  // Data order, as written.
  std::vector<nn::NamedTensor> ordered;
  ordered.reserve(ranges.size());
  std::vector<uint64_t> offsets;
  for (const Range& r : ranges) {
    ordered.push_back(std::move(file.tensors[r.index]));
    offsets.push_back(file.byte_offsets[r.index]);
  }
  file.tensors = std::move(ordered);
  file.byte_offsets = std::move(offsets);
  verify_checksums(file, source);
  return file;
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp =
      (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw FileError(path + ": cannot create temporary file " + tmp + ": " + errno_text());
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw FileError(path + ": write failed at byte offset " + std::to_string(done) + ": " + why);
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw FileError(path + ": flushing to disk failed: " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw FileError(path + ": rename from " + tmp + " failed: " + why);
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // makes the rename itself durable
    ::close(dfd);
  }
}

std::string read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path + ": cannot open: " + errno_text());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw FileError(path + ": cannot read its size: " + errno_text());
  if (S_ISDIR(st.st_mode)) throw FileError(path + ": is a folder, not a file");
  if (!S_ISREG(st.st_mode)) throw FileError(path + ": is not a regular file");
  // The size is the file's real one (not a length read from inside it), so allocating it is safe.
  std::string bytes(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw FileError(path + ": read failed at byte offset " + std::to_string(done) + ": " +
                      errno_text());
    }
    if (n == 0) {
      throw FileError(path + ": the file shrank while being read: it ends at byte offset " +
                      std::to_string(done) + " of " + std::to_string(bytes.size()));
    }
    done += size_t(n);
  }
  return bytes;
}

}  // namespace kiln::train
