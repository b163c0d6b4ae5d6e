#include "kiln/cli/data_spec.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/data/presets.h"
#include "kiln/data/record_dataset.h"
#include "kiln/data/vision.h"
#include "kiln/record/record_reader.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGrammar =
    "imagefolder:DIR, record:FILES (comma list or glob), fashion-mnist[:DIR] or mnist[:DIR]";
constexpr const char* kDebianMnistDir = "/usr/share/datasets/mnist";
constexpr int64_t kMaxImageSide = 1 << 14;
// Fashion-MNIST's and MNIST's pixel mean and standard deviation after /255.
constexpr float kFashionMean = 0.2860f, kFashionStd = 0.3530f;
constexpr float kMnistMean = 0.1307f, kMnistStd = 0.3081f;

const std::vector<std::string> kFashionClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  if (!s.empty() && s.back() == sep) parts.push_back("");
  return parts;
}

bool has_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Decoded pixels u8 [H, W, C] of one encoded image, keeping its channels.
Tensor decode_keeping_channels(const uint8_t* data, size_t size, const std::string& where) {
  try {
    return data::vision::decode_image(data, size, /*rgb=*/false);
  } catch (const Error& e) {
    throw FileError(where + ": " + e.what());
  }
}

// [H, W] -> [H, W, 1], a view.
Tensor with_channel_axis(const Tensor& image) {
  Tensor c = image.contiguous();
  return c.view_as({c.dim(0), c.dim(1), 1}, {c.dim(1), 1, 1}, c.offset());
}

// The model's input from a source row: [H, W] becomes [H, W, 1], and an image of another size is
// resized to height x width (bilinear).
class ToModelInput : public data::TensorTransform {
 public:
  ToModelInput(int64_t height, int64_t width) : height_(height), width_(width) {}
  std::string name() const override { return "ToModelInput"; }
  Tensor apply_one(const Tensor& input, data::RowRng& rng) const override {
    Tensor image = input;
    if (image.rank() == 2) image = with_channel_axis(image);
    if (image.rank() != 3) {
      throw ShapeError("image rows must be [H, W] or [H, W, C], got " + describe(input));
    }
    if (image.dim(0) == height_ && image.dim(1) == width_) return image;
    return data::vision::Resize({height_, width_}).apply_one(image, rng);
  }

 private:
  int64_t height_, width_;
};

// A batch of rows that already have the model's size, so that of ToModelInput only the channel
// axis is left: u8 [N, H, W] becomes [N, H, W, 1] (a view); [N, H, W, C] stays.
class BatchChannelAxis : public data::TensorTransform {
 public:
  std::string name() const override { return "BatchChannelAxis"; }
  Tensor apply_one(const Tensor& input, data::RowRng&) const override {
    if (input.rank() == 4) return input;
    if (input.rank() != 3) {
      throw ShapeError("a batch of images must be [N, H, W] or [N, H, W, C], got " +
                       describe(input));
    }
    Tensor c = input.contiguous();
    return c.view_as({c.dim(0), c.dim(1), c.dim(2), 1}, {c.dim(1) * c.dim(2), c.dim(2), 1, 1},
                     c.offset());
  }
};

struct SourceChoice {
  data::Dataset rows;  // unbatched: "image" (encoded bytes, or u8 [H, W(, C)]), "label" i32
  bool encoded = false;
  Tensor first_image;    // decoded, [H, W, C]: the data's size (and channels when not encoded)
  int64_t channels = 0;  // encoded: 1 when every image is grayscale, else 3
  ImageDataInfo info;    // classes known; channels and size from the fields above
  Normalization default_normalization;
};

std::vector<std::string> expand_record_files(const std::string& list, const std::string& flag) {
  std::vector<std::string> files;
  for (const std::string& item : split(list, ',')) {
    if (item.empty()) {
      throw Error(flag + ": record:" + list + ": an empty file name in the comma list");
    }
    if (item.find_first_of("*?[") == std::string::npos) {
      std::error_code ec;
      if (!fs::is_regular_file(item, ec))
        throw FileError(flag + ": record file " + item + " does not exist");
      files.push_back(item);
      continue;
    }
    glob_t found{};
    int rc = ::glob(item.c_str(), 0, nullptr, &found);
    std::vector<std::string> matches(found.gl_pathv, found.gl_pathv + found.gl_pathc);
    ::globfree(&found);
    if (rc != 0 || matches.empty()) throw FileError(flag + ": record:" + item + " matches no file");
    files.insert(files.end(), matches.begin(), matches.end());  // glob sorts them
  }
  return files;
}

SourceChoice choose_image_folder(const std::string& dir, const DataRequest& r) {
  std::error_code ec;
  if (dir.empty()) throw Error(r.flag + ": imagefolder needs its folder: imagefolder:DIR");
  if (!fs::is_directory(dir, ec))
    throw FileError(r.flag + ": imagefolder:" + dir + ": " + dir + " is not a folder");
  SourceChoice c;
  // The numbering of ImageFolderDataset and `kiln convert imagefolder`: sorted folder names.
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) c.info.class_names.push_back(e.path().filename().string());
  std::sort(c.info.class_names.begin(), c.info.class_names.end());
  if (c.info.class_names.empty()) {
    throw FileError(r.flag + ": imagefolder:" + dir +
                    " has no class folders (expected DIR/<class>/<image>.png|.jpg)");
  }
  std::string first;
  for (const std::string& cls : c.info.class_names) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(fs::path(dir) / cls))
      if (e.is_regular_file() && has_extension(e.path())) files.push_back(e.path().string());
    if (!files.empty()) {
      first = *std::min_element(files.begin(), files.end());
      break;
    }
  }
  if (first.empty()) throw FileError(r.flag + ": imagefolder:" + dir + " holds no .jpg/.png files");
  std::vector<uint8_t> bytes = read_file(first);
  c.first_image = decode_keeping_channels(bytes.data(), bytes.size(), first);
  c.encoded = true;
  // Every file's header, unless --channels settles it.
  if (r.channels == 0) c.channels = data::image_folder_channels(dir);
  data::ImageFolderOptions o;
  o.shuffle = r.training;
  c.rows = data::ImageFolderDataset(dir, o);
  return c;
}

SourceChoice choose_records(const std::string& list, const DataRequest& r) {
  if (list.empty()) throw Error(r.flag + ": record needs its files: record:FILE[,FILE...]");
  std::vector<std::string> files = expand_record_files(list, r.flag);
  record::RecordReader reader(files);
  const int image = reader.schema().find("image"), label = reader.schema().find("label");
  if (image < 0 || label < 0) {
    throw FileError(r.flag + ": " + files[0] +
                    ": the records need the fields 'image' and 'label' (as `kiln convert` writes)");
  }
  if (reader.num_rows() == 0) throw FileError(r.flag + ": " + files[0] + " holds no rows");
  const int file_name = reader.schema().find("file_name");
  // Class ids and names ("<class>/<file>") from every row: the label and name fields are small,
  // and the set's size is not known otherwise.
  std::map<int64_t, std::string> names;
  record::RowView row;
  reader.read(0, row);
  const bool encoded = row[size_t(image)].field->type == record::FieldType::bytes;
  bool all_gray = true;
  for (uint64_t i = 0; i < reader.num_rows(); ++i) {
    reader.read(i, row);
    if (encoded && all_gray && r.channels == 0) {
      const auto& bytes = row[size_t(image)].data;
      try {
        all_gray = data::vision::encoded_image_channels(bytes.data(), bytes.size()) == 1;
      } catch (const Error& e) {
        throw FileError(r.flag + ": " + files[0] + ": row " + std::to_string(i) +
                        " field 'image': " + e.what());
      }
    }
    int64_t id = row[size_t(label)].as_int();
    if (id < 0 || id > 1'000'000) {
      throw FileError(r.flag + ": " + files[0] + ": row " + std::to_string(i) + " has label " +
                      std::to_string(id) + " (class ids must be from 0 to 1000000)");
    }
    if (names.count(id)) continue;
    std::string name = std::to_string(id);
    if (file_name >= 0) {
      std::string_view f = row[size_t(file_name)].as_string();
      if (auto slash = f.find('/'); slash != std::string_view::npos) name = f.substr(0, slash);
    }
    names[id] = name;
  }
  SourceChoice c;
  const int64_t classes = names.rbegin()->first + 1;
  for (int64_t k = 0; k < classes; ++k)
    c.info.class_names.push_back(names.count(k) ? names[k] : std::to_string(k));
  reader.read(0, row);
  const record::FieldView& first = row[size_t(image)];
  if (encoded) {
    c.encoded = true;
    c.channels = all_gray ? 1 : 3;
    c.first_image = decode_keeping_channels(first.data.data(), first.data.size(),
                                            files[0] + ": row 0 field 'image'");
  } else if ((first.rank == 2 || first.rank == 3) &&
             first.field->type == record::FieldType::ndarray &&
             first.field->elem == record::ElemType::uint8) {
    c.first_image = Tensor::zeros(
        {first.dims[0], first.dims[1], first.rank == 3 ? first.dims[2] : 1}, DType::u8);
  } else {
    throw FileError(r.flag + ": " + files[0] +
                    ": field 'image' must hold encoded images (bytes) or u8 arrays [H, W(, C)]");
  }
  data::RecordDatasetOptions o;
  o.shuffle = r.training ? data::RecordShuffle::global : data::RecordShuffle::none;
  c.rows = data::RecordDataset(files, {"image", "label"}, o);
  return c;
}

SourceChoice choose_idx(const std::string& scheme, const std::string& dir, const DataRequest& r) {
  const bool fashion = scheme == "fashion-mnist";
  std::string folder = !dir.empty() ? dir
                       : fashion    ? data::kDebianFashionMnistDir
                                    : kDebianMnistDir;
  const std::string prefix = r.training ? "train" : "t10k";
  for (const char* kind : {"images-idx3-ubyte", "labels-idx1-ubyte"}) {
    fs::path base = fs::path(folder) / (prefix + "-" + kind);
    if (!fs::exists(base) && !fs::exists(base.string() + ".gz")) {
      if (fashion) {
        throw FileError("Fashion-MNIST not found: " + base.string() +
                        "[.gz] is missing. Install it with `apt-get install "
                        "dataset-fashion-mnist` or pass --data-dir DIR (or " +
                        r.flag + " fashion-mnist:DIR)");
      }
      throw FileError(r.flag + ": MNIST not found: " + base.string() +
                      "[.gz] is missing; give its folder: mnist:DIR");
    }
  }
  SourceChoice c;
  data::MnistOptions o;
  o.usage = r.training ? "train" : "test";
  o.shuffle = r.training;
  c.rows = fashion ? data::Dataset(data::FashionMnistDataset(folder, o))
                   : data::Dataset(data::MnistDataset(folder, o));
  c.first_image = Tensor::zeros({28, 28, 1}, DType::u8);
  if (fashion) {
    c.info.class_names = kFashionClassNames;
    c.default_normalization = {{kFashionMean}, {kFashionStd}};
  } else {
    for (int k = 0; k < 10; ++k) c.info.class_names.push_back(std::to_string(k));
    c.default_normalization = {{kMnistMean}, {kMnistStd}};
  }
  return c;
}

SourceChoice choose_source(const DataRequest& r) {
  const std::string& spec = r.spec;
  auto colon = spec.find(':');
  std::string scheme = spec.substr(0, colon);
  std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (scheme == "imagefolder") return choose_image_folder(arg, r);
  if (scheme == "record") return choose_records(arg, r);
  if (scheme == "fashion-mnist" || scheme == "mnist") return choose_idx(scheme, arg, r);
  throw Error(r.flag + ": unknown data '" + spec + "'; give " + kGrammar);
}

float parse_float(const std::string& text, const std::string& flag, const std::string& item) {
  try {
    size_t used = 0;
    float v = std::stof(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw Error(flag + ": '" + item + "': '" + text + "' is not a finite number");
}

int64_t parse_count(const std::string& text, const std::string& flag, const std::string& item,
                    int64_t lo) {
  try {
    size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used == text.size() && v >= lo && v <= kMaxImageSide && text[0] != '+') return v;
  } catch (const std::exception&) {
  }
  throw Error(flag + ": '" + item + "': '" + text + "' must be an integer from " +
              std::to_string(lo) + " to " + std::to_string(kMaxImageSide));
}

std::vector<float> parse_channel_values(const std::string& text, const std::string& flag,
                                        const std::string& item) {
  std::vector<float> values;
  for (const std::string& part : split(text, '/')) values.push_back(parse_float(part, flag, item));
  return values;
}

}  // namespace

TransformList parse_transforms(const std::string& text, const std::string& flag) {
  TransformList t;
  if (text.empty()) return t;
  constexpr const char* kKnown =
      "known: random_crop:S[:P], hflip, vflip, normalize:MEAN:STD (per channel: 0.5/0.5/0.5)";
  for (const std::string& item : split(text, ',')) {
    if (item.empty()) throw Error(flag + ": an empty item in '" + text + "'");
    std::vector<std::string> parts = split(item, ':');
    const std::string& name = parts[0];
    auto arity = [&](size_t lo, size_t hi, const char* form) {
      if (parts.size() - 1 < lo || parts.size() - 1 > hi)
        throw Error(flag + ": '" + item + "': expected " + form);
    };
    if (name == "random_crop") {
      arity(1, 2, "random_crop:SIZE or random_crop:SIZE:PADDING");
      TransformList::RandomCrop crop;
      crop.size = parse_count(parts[1], flag, item, 1);
      if (parts.size() == 3) crop.padding = parse_count(parts[2], flag, item, 0);
      t.random_crops.push_back(crop);
    } else if (name == "hflip" || name == "vflip") {
      arity(0, 0, (name + " (no arguments)").c_str());
      (name == "hflip" ? t.hflip : t.vflip) = true;
    } else if (name == "normalize") {
      arity(2, 2, "normalize:MEAN:STD");
      if (t.has_normalization) throw Error(flag + ": normalize appears twice");
      t.normalization.mean = parse_channel_values(parts[1], flag, item);
      t.normalization.std = parse_channel_values(parts[2], flag, item);
      if (t.normalization.mean.size() != t.normalization.std.size())
        throw Error(flag + ": '" + item + "': as many means as standard deviations");
      for (float s : t.normalization.std)
        if (!(s > 0)) throw Error(flag + ": '" + item + "': standard deviations must be > 0");
      t.has_normalization = true;
    } else {
      throw Error(flag + ": unknown transform '" + item + "' (" + kKnown + ")");
    }
  }
  return t;
}

std::pair<int64_t, int64_t> parse_image_size(const std::string& text, const std::string& flag) {
  auto x = text.find('x');
  if (x == std::string::npos) {
    int64_t s = parse_count(text, flag, text, 1);
    return {s, s};
  }
  return {parse_count(text.substr(0, x), flag, text, 1),
          parse_count(text.substr(x + 1), flag, text, 1)};
}

std::string default_validation_spec(const std::string& train_spec) {
  std::string scheme = train_spec.substr(0, train_spec.find(':'));
  return scheme == "fashion-mnist" || scheme == "mnist" ? train_spec : "";
}

ImageData open_image_data(const DataRequest& r) {
  if (r.batch_size <= 0) throw Error(r.flag + ": batch size must be > 0");
  SourceChoice c = choose_source(r);
  ImageData out;
  out.info = c.info;
  out.info.num_classes = int64_t(c.info.class_names.size());
  const Tensor& first = c.first_image;
  // Encoded images follow data::image_folder_channels()'s rule; arrays keep their channels.
  out.info.channels = r.channels > 0 ? r.channels : c.encoded ? c.channels : first.dim(2);
  out.info.height = r.height > 0 ? r.height : first.dim(0);
  out.info.width = r.width > 0 ? r.width : first.dim(1);
  if (!c.encoded && out.info.channels != first.dim(2)) {
    throw ShapeError(r.flag + ": " + r.spec + " holds " + std::to_string(first.dim(2)) +
                     "-channel images, but the model takes " + std::to_string(out.info.channels));
  }
  out.normalization = r.transforms.has_normalization ? r.transforms.normalization
                      : r.use_default_normalization  ? c.default_normalization
                                                     : r.normalization;
  const size_t norm_channels = out.normalization.mean.size();
  if (norm_channels != 1 && int64_t(norm_channels) != out.info.channels) {
    throw Error("--transforms: normalize gives " + std::to_string(norm_channels) +
                " values per statistic for " + std::to_string(out.info.channels) +
                "-channel images (give 1 or " + std::to_string(out.info.channels) + ")");
  }

  std::vector<data::Op> row_ops;
  if (c.encoded) {
    row_ops.push_back(data::vision::Decode(
        data::vision::color_mode_for_channels(out.info.channels, r.flag + " " + r.spec)));
  }
  row_ops.push_back(ToModelInput(out.info.height, out.info.width));
  if (r.training) {
    for (const auto& crop : r.transforms.random_crops) {
      if (crop.size != out.info.height || crop.size != out.info.width) {
        throw Error("--transforms: random_crop:" + std::to_string(crop.size) +
                    " must keep the image size " + std::to_string(out.info.height) + "x" +
                    std::to_string(out.info.width) +
                    " (evaluation does not crop; pad with random_crop:S:P, resize with "
                    "--image-size)");
      }
      row_ops.push_back(data::vision::RandomCrop({crop.size, crop.size}, {crop.padding}));
    }
    if (r.transforms.hflip) row_ops.push_back(data::vision::RandomHorizontalFlip());
    if (r.transforms.vflip) row_ops.push_back(data::vision::RandomVerticalFlip());
  }
  std::vector<data::Op> batch_ops;
  data::Dataset ds = c.rows;
  if (!c.encoded && row_ops.size() == 1 && first.dim(0) == out.info.height &&
      first.dim(1) == out.info.width) {
    // Arrays of the model's size and nothing random (IDX images, raw records): rows go straight
    // to the batch. A row stage would cost each row a queue hop and its workers' wake-ups, CPU
    // that competes with training once it uses every core.
    batch_ops.push_back(BatchChannelAxis());
  } else {
    ds = ds.map(std::move(row_ops), {"image"});
  }
  batch_ops.push_back(
      data::image_batch_to_float(1.0 / 255.0, out.normalization.mean, out.normalization.std));
  out.batches = ds.batch(r.batch_size, /*drop_remainder=*/r.training)
                    .map(std::move(batch_ops), {"image"}, {}, {.num_parallel_workers = 1});
  return out;
}

Tensor load_image_for_model(const std::string& path, const ImageDataInfo& info) {
  std::vector<uint8_t> bytes = read_file(path);
  Tensor image;
  try {
    image = data::vision::decode_image(bytes.data(), bytes.size(),
                                       data::vision::color_mode_for_channels(info.channels, path));
  } catch (const Error& e) {
    throw FileError(path + ": " + e.what());
  }
  if (image.rank() == 2) image = with_channel_axis(image);
  if (image.dim(2) != info.channels) {
    throw ShapeError(path + ": decodes to " + std::to_string(image.dim(2)) +
                     " channels, the model takes " + std::to_string(info.channels));
  }
  data::RowRng rng;
  return ToModelInput(info.height, info.width).apply_one(image, rng);
}

}  // namespace kiln::cli
