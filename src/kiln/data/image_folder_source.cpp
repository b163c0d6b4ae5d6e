// ImageFolderDataset: one subfolder per class; rows are a file's bytes, or its decoded pixels.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/data/config.h"
#include "kiln/data/dataset.h"
#include "kiln/data/vision.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Tensor read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw FileError(path + ": cannot stat: " + std::strerror(errno));
  Tensor bytes = Tensor::empty(Shape{int64_t(st.st_size)}, DType::u8);
  auto* p = static_cast<char*>(bytes.raw_data());
  size_t got = 0, size = size_t(st.st_size);
  while (got < size) {
    ssize_t r = ::read(fd, p + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw FileError(kiln::detail::concat(path, ": read failed at byte offset ", got, ": ",
                                           std::strerror(errno)));
    if (r == 0)
      throw FileError(
          kiln::detail::concat(path, ": file shrank while reading: ends at byte offset ", got));
    got += size_t(r);
  }
  return bytes;
}

// The first `limit` bytes of a file (fewer when it is shorter).
std::vector<uint8_t> read_head(const std::string& path, size_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path + ": cannot open: " + std::strerror(errno));
  std::vector<uint8_t> head(limit);
  size_t got = 0;
  while (got < limit) {
    ssize_t r = ::pread(fd, head.data() + got, limit - got, off_t(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += size_t(r);
  }
  ::close(fd);
  head.resize(got);
  return head;
}

// The channels ColorMode::file decodes a file to, from its header.
int64_t file_channels(const std::string& path) {
  // Enough for any PNG and for a JPEG whose metadata is not unusually large.
  constexpr size_t kHeadBytes = 64 << 10;
  std::vector<uint8_t> head = read_head(path, kHeadBytes);
  try {
    int64_t c = vision::encoded_image_channels(head.data(), head.size());
    if (c == 0 && head.size() == kHeadBytes) {
      Tensor all = read_file(path);
      c = vision::encoded_image_channels(all.data<uint8_t>(), size_t(all.numel()));
    }
    if (c == 0) throw Error("no image header (truncated file?)");
    return c;
  } catch (const Error& e) {
    throw FileError("ImageFolderDataset: " + path + ": " + e.what());
  }
}

class ImageFolderSource : public Source {
 public:
  ImageFolderSource(const std::string& dir, const ImageFolderOptions& o)
      : dir_(dir), decode_(o.decode) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      throw FileError("ImageFolderDataset: dataset_dir " + dir + " is not a directory");
    }
    std::vector<std::string> exts = o.extensions;
    if (exts.empty()) exts = {".jpg", ".jpeg", ".png"};
    for (auto& e : exts) e = lower(e);
    std::map<std::string, int> classes = o.class_indexing;
    if (classes.empty()) {
      std::vector<std::string> names;
      for (auto& entry : fs::directory_iterator(dir)) {
        if (entry.is_directory()) names.push_back(entry.path().filename().string());
      }
      std::sort(names.begin(), names.end());
      for (size_t i = 0; i < names.size(); ++i) classes[names[i]] = int(i);
    }
    for (auto& [name, label] : classes) {
      fs::path sub = fs::path(dir) / name;
      if (!fs::is_directory(sub, ec)) {
        throw FileError("ImageFolderDataset: class_indexing names folder '" + name +
                        "' which is not in " + dir);
      }
      std::vector<std::string> files;
      for (auto& entry : fs::directory_iterator(sub)) {
        if (!entry.is_regular_file()) continue;
        std::string ext = lower(entry.path().extension().string());
        if (std::find(exts.begin(), exts.end(), ext) != exts.end())
          files.push_back(entry.path().string());
      }
      std::sort(files.begin(), files.end());
      for (auto& f : files) {
        paths_.push_back(std::move(f));
        labels_.push_back(label);
      }
    }
    if (paths_.empty()) {
      throw FileError(
          "ImageFolderDataset: no image files (.jpg, .jpeg, .png) in the class folders of " + dir);
    }
    if (decode_) {
      mode_ = vision::color_mode_for_channels(o.channels == 0 ? channels() : o.channels,
                                              "ImageFolderDataset");
    }
  }

  // 1 when every file is grayscale, else 3.
  int64_t channels() const {
    for (const std::string& path : paths_) {
      if (file_channels(path) != 1) return 3;
    }
    return 1;
  }
  std::string name() const override { return "ImageFolderDataset"; }
  std::vector<std::string> column_names() const override { return {"image", "label"}; }
  int64_t num_rows() const override { return int64_t(paths_.size()); }
  std::string describe(int64_t index) const override {
    if (index < 0 || index >= num_rows()) return "row " + std::to_string(index) + " of " + dir_;
    return "file " + paths_[size_t(index)];
  }
  int default_workers() const override {
    return decode_ ? config::get_num_parallel_workers()
                   : std::min(2, std::max(1, available_cores()));
  }
  std::unique_ptr<SourceReader> make_reader() const override {
    struct Reader : SourceReader {
      const ImageFolderSource* s;
      void read(int64_t index, std::vector<Tensor>& columns) override {
        Tensor bytes = read_file(s->paths_[size_t(index)]);
        if (s->decode_)
          bytes = vision::decode_image(bytes.data<uint8_t>(), size_t(bytes.numel()), s->mode_);
        columns.reserve(2);
        columns.push_back(std::move(bytes));
        columns.push_back(Tensor::scalar(double(s->labels_[size_t(index)]), DType::i32));
      }
    };
    auto r = std::make_unique<Reader>();
    r->s = this;
    return r;
  }

 private:
  std::string dir_;
  bool decode_;
  vision::ColorMode mode_ = vision::ColorMode::rgb;
  std::vector<std::string> paths_;
  std::vector<int> labels_;
};

}  // namespace

ImageFolderDataset::ImageFolderDataset(std::string dataset_dir, ImageFolderOptions o)
    : Dataset(from_source(std::make_shared<ImageFolderSource>(dataset_dir, o),
                          SourceOptions{o.num_parallel_workers, o.shuffle, o.num_samples,
                                        o.num_shards, o.shard_id})) {}

int64_t image_folder_channels(const std::string& dataset_dir, const ImageFolderOptions& options) {
  ImageFolderOptions listing = options;
  listing.decode = false;
  return ImageFolderSource(dataset_dir, listing).channels();
}

}  // namespace kiln::data
