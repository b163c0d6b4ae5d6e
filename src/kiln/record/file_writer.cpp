#include "kiln/record/file_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "kiln/record/crc32c.h"
#include "kiln/record/detail/record_codec.h"
#include "kiln/record/record_reader.h"
#include "kiln/record/shard_reader.h"

namespace kiln::record {
namespace {

[[noreturn]] void io_error(const std::string& path, const char* what) {
  throw FileError(detail::concat(path, ": ", what, ": ", std::strerror(errno)));
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      io_error(path, "write failed");
    }
    p += w;
    n -= size_t(w);
  }
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

uint64_t random_u64() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd();
  v ^=
      uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull;
  return v ? v : 1;
}

std::string temp_prefix(const std::string& final_path) {
  return directory_of(final_path) + "." + file_name_of(final_path) + ".kiln-tmp-";
}

// Removes temporaries that writers killed before commit() left behind: those whose process is
// gone. A live writer's files (another process, or this one) are left alone.
void remove_orphaned_temporaries(const std::string& final_path) {
  std::string dir = directory_of(final_path);
  std::string prefix = "." + file_name_of(final_path) + ".kiln-tmp-";
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) ::unlink((dir + name).c_str());
  }
  ::closedir(d);
}

// Serialises commits into one directory, across processes, without leaving a lock file behind.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir) {
    fd_ = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  void sync() const {
    if (fd_ >= 0) ::fsync(fd_);
  }

 private:
  int fd_ = -1;
};

}  // namespace

struct FileWriter::Shard {
  std::string final_path;
  std::string temp_path;
  int fd = -1;
  uint64_t data_offset = 0;
  uint64_t next_offset = 0;  // where the next page starts
  uint32_t page_count = 0;
  std::vector<uint8_t> page;  // the page being filled
  size_t page_fill = 0;
  uint32_t page_rows = 0;
  uint64_t page_first_row = 0;
  uint64_t rows = 0;
  std::vector<uint8_t> row_table;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> keys;  // per indexed field

  void write(const void* p, size_t n) { write_all(fd, p, n, temp_path); }

  void flush_page(uint32_t page_size) {
    if (page_rows == 0) return;
    PageHeader h{.used_bytes = uint32_t(page_fill),
                 .first_row = page_first_row,
                 .row_count = page_rows,
                 .span = 1};
    encode_page_header(h, page.data());
    std::memset(page.data() + page_fill, 0, page_size - page_fill);
    write(page.data(), page_size);
    next_offset += page_size;
    ++page_count;
    page_rows = 0;
    page_fill = 0;
  }

  void add_record(const uint8_t* payload, uint32_t length, uint32_t page_size) {
    uint32_t crc = crc32c(payload, length);
    uint64_t record_size = kRecordHeaderSize + uint64_t(length);
    if (page_rows > 0 && page_fill + record_size > page_size) flush_page(page_size);
    uint64_t offset;
    if (kPageHeaderSize + record_size > page_size) {
      // A record larger than a page gets a page of its own spanning several page units.
      flush_page(page_size);
      uint64_t used = kPageHeaderSize + record_size;
      uint64_t span = (used + page_size - 1) / page_size;
      uint8_t head[kPageHeaderSize + kRecordHeaderSize];
      encode_page_header(
          {.used_bytes = uint32_t(used), .first_row = rows, .row_count = 1, .span = uint32_t(span)},
          head);
      std::memcpy(head + kPageHeaderSize, &length, 4);
      std::memcpy(head + kPageHeaderSize + 4, &crc, 4);
      write(head, sizeof head);
      write(payload, length);
      std::fill(page.begin(), page.end(), 0);
      for (uint64_t pad = span * page_size - used; pad > 0;) {
        size_t n = size_t(std::min<uint64_t>(pad, page_size));
        write(page.data(), n);
        pad -= n;
      }
      offset = next_offset + kPageHeaderSize;
      next_offset += span * page_size;
      ++page_count;
    } else {
      if (page_rows == 0) {
        page_fill = kPageHeaderSize;
        page_first_row = rows;
      }
      offset = next_offset + page_fill;
      std::memcpy(page.data() + page_fill, &length, 4);
      std::memcpy(page.data() + page_fill + 4, &crc, 4);
      std::memcpy(page.data() + page_fill + kRecordHeaderSize, payload, length);
      page_fill += size_t(record_size);
      ++page_rows;
    }
    uint8_t entry[kRowEntrySize];
    std::memcpy(entry, &offset, 8);
    std::memcpy(entry + 8, &length, 4);
    std::memcpy(entry + 12, &crc, 4);
    row_table.insert(row_table.end(), entry, entry + kRowEntrySize);
    ++rows;
  }
};

std::vector<std::string> FileWriter::shard_paths(const std::string& path, int shard_num) {
  std::vector<std::string> paths;
  if (shard_num == 1) return {path};
  for (int i = 0; i < shard_num; ++i) paths.push_back(path + std::to_string(i));
  return paths;
}

FileWriter::FileWriter(std::string path, int shard_num, WriterOptions options)
    : path_(std::move(path)), options_(options) {
  KILN_CHECK(!path_.empty() && path_.back() != '/', "FileWriter: '", path_, "' is not a file path");
  KILN_CHECK(shard_num >= 1 && uint32_t(shard_num) <= kMaxShards, "FileWriter(", path_,
             "): shard_num ", shard_num, " must be between 1 and ", kMaxShards);
  KILN_CHECK(options_.page_size >= kMinPageSize && options_.page_size <= kMaxPageSize &&
                 std::has_single_bit(options_.page_size),
             "FileWriter(", path_, "): page_size ", options_.page_size,
             " must be a power of two between 4096 and 2^30");
  final_paths_ = shard_paths(path_, shard_num);
  for (const std::string& p : final_paths_)
    KILN_CHECK(file_name_of(p).size() <= kMaxFieldNameBytes, "FileWriter: file name of '", p,
               "' is longer than 255 bytes");
  if (!options_.overwrite)
    for (const std::string& p : final_paths_)
      if (exists(p))
        throw FileError(detail::concat("FileWriter: ", p,
                                       " already exists (pass {.overwrite = true} to replace it)"));
  for (const std::string& p : final_paths_) remove_orphaned_temporaries(p);

  dataset_id_ = random_u64();
  try {
    for (const std::string& p : final_paths_) {
      auto s = std::make_unique<Shard>();
      s->final_path = p;
      char suffix[64];
      std::snprintf(suffix, sizeof suffix, "%ld-%08x", long(::getpid()),
                    unsigned(random_u64() & 0xffffffffu));
      s->temp_path = temp_prefix(p) + suffix;
      s->fd = ::open(s->temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (s->fd < 0) io_error(s->temp_path, "cannot create");
      shards_.push_back(std::move(s));
    }
  } catch (...) {
    abandon_locked();
    throw;
  }
}

FileWriter::~FileWriter() {
  std::lock_guard lock(mutex_);
  if (!committed_) abandon_locked();
}

void FileWriter::abandon_locked() noexcept {
  for (auto& s : shards_) {
    if (s->fd >= 0) ::close(s->fd);
    s->fd = -1;
    ::unlink(s->temp_path.c_str());
  }
  shards_.clear();
}

void FileWriter::add_schema(std::vector<Field> fields) {
  std::lock_guard lock(mutex_);
  KILN_CHECK(!begun_, "FileWriter(", path_, "): add_schema after rows were written");
  schema_ = Schema(std::move(fields));
  has_schema_ = true;
}

void FileWriter::add_index(const std::vector<std::string>& fields) {
  std::lock_guard lock(mutex_);
  KILN_CHECK(has_schema_, "FileWriter(", path_, "): add_index before add_schema");
  KILN_CHECK(!begun_, "FileWriter(", path_, "): add_index after rows were written");
  for (const std::string& name : fields) {
    int i = schema_.require(name);
    KILN_CHECK(is_indexable(schema_[size_t(i)].type), "FileWriter(", path_, "): field '", name,
               "' of type ", field_type_name(schema_[size_t(i)].type),
               " cannot be indexed (only int32, int64, float32, float64 and string)");
    schema_.set_indexed(size_t(i), true);
  }
}

void FileWriter::begin_locked() {
  KILN_CHECK(!committed_, "FileWriter(", path_, "): already committed");
  KILN_CHECK(!failed_, "FileWriter(", path_, "): an earlier write failed; start a new writer");
  if (begun_) return;
  KILN_CHECK(has_schema_, "FileWriter(", path_, "): add_schema before writing rows");
  Meta meta{schema_, {}};
  for (const std::string& p : final_paths_) meta.shard_names.push_back(file_name_of(p));
  std::vector<uint8_t> meta_bytes = encode_meta(meta);
  uint64_t meta_end = kHeaderSize + meta_bytes.size();
  uint64_t data_offset = (meta_end + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
  std::vector<uint8_t> prefix(size_t(data_offset), 0);  // header written again by commit()
  std::memcpy(prefix.data() + kHeaderSize, meta_bytes.data(), meta_bytes.size());
  size_t indexed = 0;
  for (const Field& f : schema_.fields()) indexed += f.indexed;
  try {
    for (auto& s : shards_) {
      s->write(prefix.data(), prefix.size());
      s->data_offset = s->next_offset = data_offset;
      s->page.assign(options_.page_size, 0);
      s->keys.resize(indexed);
    }
  } catch (...) {
    failed_ = true;
    throw;
  }
  begun_ = true;
}

void FileWriter::write_raw_data(const std::vector<Row>& rows) {
  std::lock_guard lock(mutex_);
  begin_locked();
  // Encode the whole batch first, so a bad row rejects the batch without writing any of it.
  payload_.clear();
  keys_.clear();
  std::vector<size_t> ends;
  ends.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    try {
      encode_row(schema_, rows[i], "", payload_, &keys_);
    } catch (const Error& e) {
      throw Error(detail::concat("FileWriter(", path_, "): row ", i, " of the batch (row ",
                                 rows_ + i, " of the set): ", e.what()));
    }
    KILN_CHECK(payload_.size() - (ends.empty() ? 0 : ends.back()) <= kMaxRecordBytes, "FileWriter(",
               path_, "): row ", rows_ + i, " is larger than 2 GiB");
    ends.push_back(payload_.size());
  }
  KILN_CHECK(rows_ + rows.size() <= uint64_t(UINT32_MAX) * shards_.size(), "FileWriter(", path_,
             "): more than 2^32 rows per shard");
  size_t indexed = shards_.front()->keys.size();
  try {
    size_t begin = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      Shard& s = *shards_[rows_ % shards_.size()];
      for (size_t k = 0; k < indexed; ++k) s.keys[k].emplace_back(keys_[i * indexed + k], s.rows);
      s.add_record(payload_.data() + begin, uint32_t(ends[i] - begin), options_.page_size);
      begin = ends[i];
      ++rows_;
    }
  } catch (...) {
    failed_ = true;
    throw;
  }
}

uint64_t FileWriter::rows_written() const {
  std::lock_guard lock(mutex_);
  return rows_;
}

void FileWriter::commit() {
  std::lock_guard lock(mutex_);
  begin_locked();
  try {
    std::vector<uint32_t> indexed_fields;
    for (size_t i = 0; i < schema_.size(); ++i)
      if (schema_[i].indexed) indexed_fields.push_back(uint32_t(i));
    for (size_t si = 0; si < shards_.size(); ++si) {
      Shard& s = *shards_[si];
      s.flush_page(options_.page_size);
      Header h;
      h.dataset_id = dataset_id_;
      h.shard_index = uint32_t(si);
      h.shard_count = uint32_t(shards_.size());
      h.total_rows = rows_;
      h.row_count = s.rows;
      h.page_size = options_.page_size;
      Meta meta{schema_, {}};
      for (const std::string& p : final_paths_) meta.shard_names.push_back(file_name_of(p));
      std::vector<uint8_t> meta_bytes = encode_meta(meta);
      h.meta = {kHeaderSize, meta_bytes.size(), uint32_t(schema_.size()),
                crc32c(meta_bytes.data(), meta_bytes.size())};
      h.data = {s.data_offset, s.next_offset - s.data_offset, s.page_count, 0};
      h.rows = {s.next_offset, s.row_table.size(), uint32_t(s.rows),
                crc32c(s.row_table.data(), s.row_table.size())};
      s.write(s.row_table.data(), s.row_table.size());
      std::vector<uint8_t> index;
      ByteSink sink(index);
      for (size_t k = 0; k < indexed_fields.size(); ++k) {
        auto& entries = s.keys[k];
        std::sort(entries.begin(), entries.end());
        sink.put<uint32_t>(indexed_fields[k]);
        sink.put<uint32_t>(0);
        sink.put<uint64_t>(entries.size());
        for (auto [key, row] : entries) {
          sink.put<uint64_t>(key);
          sink.put<uint64_t>(row);
        }
      }
      h.fields = {h.rows.offset + h.rows.length, index.size(), uint32_t(indexed_fields.size()),
                  crc32c(index.data(), index.size())};
      s.write(index.data(), index.size());
      h.file_size = h.fields.offset + h.fields.length;
      auto header = encode_header(h);
      if (::pwrite(s.fd, header.data(), header.size(), 0) != ssize_t(header.size()))
        io_error(s.temp_path, "cannot write the header");
      if (::fsync(s.fd) != 0) io_error(s.temp_path, "fsync failed");
      if (::close(s.fd) != 0) io_error(s.temp_path, "close failed");
      s.fd = -1;
    }

    DirectoryLock dir_lock(directory_of(path_));
    if (!options_.overwrite)
      for (const std::string& p : final_paths_)
        if (exists(p))
          throw FileError(detail::concat("FileWriter: ", p,
                                         " appeared while writing (another writer?); not "
                                         "replacing it"));
    // Shards of the set being replaced that the new set does not overwrite (it has fewer).
    std::vector<std::string> stale;
    if (options_.overwrite && exists(final_paths_[0])) {
      try {
        auto old = ShardReader::open(final_paths_[0]);
        for (const std::string& p : RecordReader::sibling_paths(*old)) {
          if (std::find(final_paths_.begin(), final_paths_.end(), p) != final_paths_.end())
            continue;
          try {
            if (ShardReader::open(p)->header().dataset_id == old->header().dataset_id)
              stale.push_back(p);
          } catch (const Error&) {
          }
        }
      } catch (const Error&) {
        // Not a readable record set: it is simply replaced.
      }
    }
    for (auto& s : shards_)
      if (::rename(s->temp_path.c_str(), s->final_path.c_str()) != 0)
        io_error(s->final_path, "cannot rename the finished shard into place");
    dir_lock.sync();
    for (const std::string& p : stale) ::unlink(p.c_str());
  } catch (...) {
    failed_ = true;
    abandon_locked();
    throw;
  }
  shards_.clear();
  committed_ = true;
}

}  // namespace kiln::record
