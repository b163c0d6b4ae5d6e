#include "kiln/data/record_converters.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/data/vision.h"
#include "kiln/record/file_writer.h"

namespace kiln::record {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void read_whole_file(const std::string& path, std::vector<uint8_t>& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(detail::concat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw FileError(detail::concat(path, ": cannot stat: ", std::strerror(errno)));
  }
  out.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      throw FileError(detail::concat(path, ": read failed at byte ", got,
                                     r == 0 ? ": the file shrank" : ": ", std::strerror(errno)));
    }
    got += size_t(r);
  }
  ::close(fd);
}

class ProgressClock {
 public:
  ProgressClock(const ConvertOptions& o, uint64_t total) : o_(o), total_(total) {}
  void update(uint64_t done, bool final = false) {
    if (!o_.progress) return;
    if (!final && done - last_ < 2048) return;
    last_ = done;
    o_.progress({done, total_, seconds_since(t0_)});
  }
  double seconds() const { return seconds_since(t0_); }

 private:
  const ConvertOptions& o_;
  uint64_t total_;
  uint64_t last_ = 0;
  Clock::time_point t0_ = Clock::now();
};

// Reads an IDX file (gzip or plain: zlib reads both) whole, refusing more than `limit` bytes.
std::vector<uint8_t> read_idx(const std::string& path, size_t limit) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw FileError(detail::concat(path, ": cannot open: ", std::strerror(errno)));
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    int n = gzread(f, chunk.data(), unsigned(chunk.size()));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw FileError(detail::concat(path, ": byte ", out.size(), " (uncompressed): ", msg));
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
    if (out.size() > limit) {
      gzclose(f);
      throw FileError(detail::concat(path, ": more than ", limit, " bytes; not an IDX file?"));
    }
  }
  gzclose(f);
  return out;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | b[at + 3];
}

}  // namespace

std::string format_progress(const ConvertProgress& p) {
  double rate = p.seconds > 0 ? double(p.rows_done) / p.seconds : 0;
  char buf[160];
  if (p.rows_total > 0 && rate > 0 && p.rows_done < p.rows_total)
    std::snprintf(buf, sizeof buf, "rows %llu/%llu  %.0f rows/s  ETA %.1f s",
                  (unsigned long long)p.rows_done, (unsigned long long)p.rows_total, rate,
                  double(p.rows_total - p.rows_done) / rate);
  else
    std::snprintf(buf, sizeof buf, "rows %llu/%llu  %.0f rows/s  %.1f s",
                  (unsigned long long)p.rows_done, (unsigned long long)p.rows_total, rate,
                  p.seconds);
  return buf;
}

ConvertResult convert_image_folder(const std::string& dir, const std::string& out,
                                   const ConvertOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw FileError(detail::concat("convert imagefolder: ", dir, " is not a directory"));
  // The same numbering as ImageFolderDataset: sorted class folders, sorted files.
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  std::sort(classes.begin(), classes.end());
  struct Item {
    std::string path, name;
    int32_t label;
  };
  std::vector<Item> items;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(fs::path(dir) / classes[c])) {
      if (!e.is_regular_file()) continue;
      std::string ext = lower(e.path().extension().string());
      if (ext == ".jpg" || ext == ".jpeg" || ext == ".png")
        files.push_back(e.path().filename().string());
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files)
      items.push_back(
          {(fs::path(dir) / classes[c] / f).string(), classes[c] + "/" + f, int32_t(c)});
  }
  if (items.empty())
    throw FileError(
        detail::concat("convert imagefolder: no .jpg/.jpeg/.png files in the class "
                       "folders of ",
                       dir));

  FileWriter writer(out, options.shards,
                    {.overwrite = options.overwrite, .page_size = options.page_size});
  writer.add_schema({Field::scalar("label", FieldType::int32),
                     Field::scalar("image", FieldType::bytes),
                     Field::scalar("file_name", FieldType::string)});
  writer.add_index({"label"});
  ProgressClock progress(options, items.size());

  // Small files cost an open, a read and a close each: read a chunk with a few threads, then
  // hand the chunk to the writer (which copies into its pages) while the buffers are reused.
  const size_t chunk = 512;
  int threads = std::max(1, options.reader_threads);
  std::vector<std::vector<uint8_t>> buffers(chunk);
  std::vector<Row> rows(chunk);
  for (size_t begin = 0; begin < items.size(); begin += chunk) {
    size_t n = std::min(chunk, items.size() - begin);
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) {
        try {
          read_whole_file(items[begin + i].path, buffers[i]);
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!error) error = std::current_exception();
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads && size_t(t) < n; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    if (error) std::rethrow_exception(error);
    rows.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const Item& it = items[begin + i];
      rows[i] = Row{{"label", it.label},
                    {"image", Value::borrowed(std::span<const uint8_t>(buffers[i]))},
                    {"file_name", Value::borrowed(std::string_view(it.name))}};
    }
    writer.write_raw_data(rows);
    progress.update(begin + n);
  }
  writer.commit();
  progress.update(items.size(), true);
  return {items.size(), progress.seconds(), writer.paths()};
}

ConvertResult convert_idx(const std::string& images_path, const std::string& labels_path,
                          const std::string& out, const ConvertOptions& options) {
  const size_t limit = size_t(4) << 30;
  std::vector<uint8_t> images = read_idx(images_path, limit);
  std::vector<uint8_t> labels = read_idx(labels_path, limit);
  if (images.size() < 16 || be32(images, 0) != 0x00000803)
    throw FileError(
        detail::concat(images_path, ": byte 0: not an IDX image file (magic 0x00000803)"));
  if (labels.size() < 8 || be32(labels, 0) != 0x00000801)
    throw FileError(
        detail::concat(labels_path, ": byte 0: not an IDX label file (magic 0x00000801)"));
  uint64_t n = be32(images, 4), h = be32(images, 8), w = be32(images, 12);
  if (h == 0 || w == 0 || h > 65536 || w > 65536 || (images.size() - 16) / (h * w) < n ||
      images.size() != 16 + n * h * w)
    throw FileError(detail::concat(images_path, ": byte 4: ", n, " images of ", h, "x", w,
                                   " do not match the file's ", images.size(), " bytes"));
  if (be32(labels, 4) != n || labels.size() != 8 + n)
    throw FileError(detail::concat(labels_path, ": byte 4: ", be32(labels, 4), " labels in ",
                                   labels.size(), " bytes, but ", images_path, " has ", n,
                                   " images"));
  FileWriter writer(out, options.shards,
                    {.overwrite = options.overwrite, .page_size = options.page_size});
  writer.add_schema({Field::scalar("label", FieldType::int32),
                     options.png
                         ? Field::scalar("image", FieldType::bytes)
                         : Field::array("image", ElemType::uint8, {int64_t(h), int64_t(w)})});
  writer.add_index({"label"});
  ProgressClock progress(options, n);
  const size_t chunk = 4096;
  std::vector<Row> rows;
  std::vector<std::vector<uint8_t>> pngs;
  for (uint64_t begin = 0; begin < n; begin += chunk) {
    size_t m = size_t(std::min<uint64_t>(chunk, n - begin));
    rows.resize(m);
    pngs.resize(m);
    for (size_t i = 0; i < m; ++i) {
      const uint8_t* pixels = images.data() + 16 + (begin + i) * h * w;
      Value image;
      if (options.png) {
        Tensor t = Tensor::from_blob(const_cast<uint8_t*>(pixels), Shape{int64_t(h), int64_t(w)},
                                     DType::u8);
        pngs[i] = data::vision::encode_png(t);
        image = Value::borrowed(std::span<const uint8_t>(pngs[i]));
      } else {
        image = Value::array_view(ElemType::uint8, {int64_t(h), int64_t(w)},
                                  std::span<const uint8_t>(pixels, size_t(h * w)));
      }
      rows[i] = Row{{"label", int32_t(labels[8 + begin + i])}, {"image", std::move(image)}};
    }
    writer.write_raw_data(rows);
    progress.update(begin + m);
  }
  writer.commit();
  progress.update(n, true);
  return {n, progress.seconds(), writer.paths()};
}

}  // namespace kiln::record
