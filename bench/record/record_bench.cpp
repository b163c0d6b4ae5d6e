// Record files vs small files, on Fashion-MNIST's 60,000 training images stored as PNG files:
//   1. writes the PNG folder (DIR/png/<label>/<index>.png) once, from the IDX files;
//   2. times `kiln convert imagefolder` into 4 shards (rows/s);
//   3. reads every image's bytes (no decode) from the small files and from the records, side by
//      side, several rounds, warm page cache (and cold with --drop-caches, root only);
//   4. runs the same training input pipeline (decode + rescale + HWC2CHW + batch 64) fed from the
//      folder and from the records.
//
//   record_bench [--work DIR] [--shards 4] [--rounds 3] [--drop-caches] [--json FILE]
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/dataset.h"
#include "kiln/data/record_converters.h"
#include "kiln/data/record_dataset.h"
#include "kiln/data/vision.h"
#include "kiln/record/record_reader.h"

namespace fs = std::filesystem;
using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds of the whole process (all threads). On a shared machine wall time swings with the
// other load; CPU time is the fair measure of how much work each way of reading costs.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Timing {
  double wall = 1e9, cpu = 1e9;  // best of the rounds
  void add(double w, double c) {
    wall = std::min(wall, w);
    cpu = std::min(cpu, c);
  }
};

template <class F>
void timed(Timing& t, F&& f) {
  double c0 = cpu_seconds();
  auto t0 = Clock::now();
  f();
  t.add(since(t0), cpu_seconds() - c0);
}

std::vector<uint8_t> gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw FileError(path + ": cannot open");
  std::vector<uint8_t> out, chunk(1 << 20);
  for (int n; (n = gzread(f, chunk.data(), unsigned(chunk.size()))) > 0;)
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  gzclose(f);
  return out;
}

// DIR/<label>/<index>.png for the 60,000 training images; returns the file count.
size_t make_png_folder(const std::string& dir) {
  std::string marker = dir + "/.complete";
  if (fs::exists(marker)) {
    size_t n = 0;
    for (auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
    return n - 1;
  }
  auto images =
      gunzip(std::string(data::kDebianFashionMnistDir) + "/train-images-idx3-ubyte.gz");
  auto labels =
      gunzip(std::string(data::kDebianFashionMnistDir) + "/train-labels-idx1-ubyte.gz");
  size_t n = labels.size() - 8;
  for (int c = 0; c < 10; ++c) fs::create_directories(dir + "/" + std::to_string(c));
  for (size_t i = 0; i < n; ++i) {
    Tensor img = Tensor::from_blob(images.data() + 16 + i * 784, Shape{28, 28}, DType::u8);
    auto png = data::vision::encode_png(img);
    char name[64];
    std::snprintf(name, sizeof name, "/%d/%05zu.png", int(labels[8 + i]), i);
    std::ofstream(dir + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  }
  std::ofstream(marker) << "ok\n";
  return n;
}

std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> paths;
  for (auto& c : fs::directory_iterator(dir))
    if (c.is_directory())
      for (auto& f : fs::directory_iterator(c.path())) paths.push_back(f.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

// open + fstat + read + close per file, into one reused buffer.
uint64_t read_small_files(const std::vector<std::string>& paths) {
  std::vector<uint8_t> buf(1 << 20);
  uint64_t sum = 0;
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw FileError(p + ": cannot open");
    struct stat st {};
    ::fstat(fd, &st);
    ssize_t got = ::read(fd, buf.data(), size_t(st.st_size));
    ::close(fd);
    if (got != st.st_size) throw FileError(p + ": short read");
    sum += uint64_t(got) + buf[size_t(got) / 2];
  }
  return sum;
}

// Every row's image bytes from the records, with the CRC-32C check on.
uint64_t read_records(const std::string& file) {
  record::RecordReader reader(file,
                              {.verify_checksums = true, .access = record::Access::sequential});
  record::RowView view;
  uint64_t sum = 0;
  for (uint64_t r = 0; r < reader.num_rows(); ++r) {
    reader.read(r, view);
    sum += view[1].data.size() + view[1].data[view[1].data.size() / 2];
  }
  return sum;
}

void drop_caches() {
  ::sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
}

// One epoch; `batched`: rows arrive in batches (count their first dimension).
double pipeline_epoch(const data::Dataset& ds, int64_t* rows, bool batched = true) {
  auto it = ds.create_tuple_iterator({.num_epochs = 1});
  auto t0 = Clock::now();
  *rows = 0;
  for (std::vector<Tensor> batch; it.next(batch);) *rows += batched ? batch[0].dim(0) : 1;
  return since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string work = "/tmp/kiln-record-bench", json_path;
  int shards = 4, rounds = 3;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--work" && i + 1 < argc)
      work = argv[++i];
    else if (a == "--shards" && i + 1 < argc)
      shards = std::atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--drop-caches")
      cold = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--work DIR] [--shards N] [--rounds N] [--drop-caches] "
                   "[--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    std::string png_dir = work + "/png", rec = work + "/rec/fmnist";
    fs::create_directories(work + "/rec");
    auto t0 = Clock::now();
    size_t n = make_png_folder(png_dir);
    std::printf("PNG folder: %zu files (%.1f s to prepare)\n", n, since(t0));

    // 2. Conversion (the folder is warm in the page cache: it was just written or listed).
    read_small_files(list_files(png_dir));
    auto conv = record::convert_image_folder(png_dir, rec, {.shards = shards, .overwrite = true});
    std::string first = conv.files[0];
    double convert_rate = double(conv.rows) / conv.seconds;
    std::printf("convert imagefolder -> %d shards: %llu rows in %.3f s = %.0f rows/s\n", shards,
                (unsigned long long)conv.rows, conv.seconds, convert_rate);

    // 3. Raw reads, alternating, best of `rounds` (warm).
    auto t_list = Clock::now();
    auto paths = list_files(png_dir);
    double list_s = since(t_list);
    Timing files_t, records_t;
    uint64_t files_sum = 0, records_sum = 0;
    for (int r = 0; r < rounds; ++r) {
      timed(files_t, [&] { files_sum = read_small_files(paths); });
      timed(records_t, [&] { records_sum = read_records(first); });
    }
    if (files_sum != records_sum) std::printf("WARNING: byte sums differ\n");
    std::printf(
        "read all image bytes, warm, best of %d: files %.3f s wall / %.3f s CPU (+ %.3f s "
        "listing), records %.3f s wall / %.3f s CPU: records %.1fx faster (wall), %.1fx "
        "less CPU\n",
        rounds, files_t.wall, files_t.cpu, list_s, records_t.wall, records_t.cpu,
        files_t.wall / records_t.wall, files_t.cpu / records_t.cpu);
    double files_cold = 0, records_cold = 0;
    if (cold) {
      drop_caches();
      auto ta = Clock::now();
      read_small_files(list_files(png_dir));
      files_cold = since(ta);
      drop_caches();
      auto tb = Clock::now();
      read_records(first);
      records_cold = since(tb);
      std::printf(
          "read all image bytes, cold cache: files %.3f s (incl. listing), records %.3f s: "
          "records %.1fx faster\n",
          files_cold, records_cold, files_cold / records_cold);
    }

    // Through the pipeline, bytes only (no map): the source stages side by side.
    int64_t rows = 0;
    using namespace kiln::data;
    Timing folder_src, record_src;
    for (int r = 0; r < rounds; ++r) {
      timed(folder_src,
            [&] { pipeline_epoch(ImageFolderDataset(png_dir, {.shuffle = true}), &rows, false); });
      timed(record_src, [&] {
        pipeline_epoch(RecordDataset(first, {"image", "label"}), &rows, false);
      });
    }
    std::printf(
        "pipeline source only (shuffled rows, image bytes): folder %.3f s wall / %.3f s "
        "CPU, records %.3f s wall / %.3f s CPU: %.1fx (wall), %.1fx (CPU)\n",
        folder_src.wall, folder_src.cpu, record_src.wall, record_src.cpu,
        folder_src.wall / record_src.wall, folder_src.cpu / record_src.cpu);

    // 4. Full training input pipeline.
    auto train = [&](Dataset ds) {
      return ds
          .map({vision::Decode(false), vision::Rescale(1.0 / 255, 0), vision::HWC2CHW()}, {"image"})
          .batch(64, true);
    };
    Timing folder_full, record_full;
    for (int r = 0; r < rounds; ++r) {
      timed(folder_full,
            [&] { pipeline_epoch(train(ImageFolderDataset(png_dir, {.shuffle = true})), &rows); });
      timed(record_full, [&] {
        pipeline_epoch(train(RecordDataset(first, {"image", "label"})), &rows);
      });
    }
    std::printf(
        "full pipeline (decode + rescale + HWC2CHW + batch 64, %d map workers), %lld "
        "rows: folder %.3f s wall / %.3f s CPU (%.0f rows/s), records %.3f s wall / %.3f "
        "s CPU (%.0f rows/s): %.2fx (wall), %.2fx (CPU)\n",
        config::get_num_parallel_workers(), (long long)rows, folder_full.wall, folder_full.cpu,
        double(rows) / folder_full.wall, record_full.wall, record_full.cpu,
        double(rows) / record_full.wall, folder_full.wall / record_full.wall,
        folder_full.cpu / record_full.cpu);

    if (!json_path.empty()) {
      std::ofstream j(json_path);
      j << "{\n  \"rows\": " << n << ",\n  \"shards\": " << shards
        << ",\n  \"convert_rows_per_s\": " << convert_rate
        << ",\n  \"read_files_wall_s\": " << files_t.wall
        << ",\n  \"read_files_cpu_s\": " << files_t.cpu
        << ",\n  \"read_records_wall_s\": " << records_t.wall
        << ",\n  \"read_records_cpu_s\": " << records_t.cpu
        << ",\n  \"read_files_cold_s\": " << files_cold
        << ",\n  \"read_records_cold_s\": " << records_cold
        << ",\n  \"pipeline_source_folder_wall_s\": " << folder_src.wall
        << ",\n  \"pipeline_source_records_wall_s\": " << record_src.wall
        << ",\n  \"pipeline_full_folder_wall_s\": " << folder_full.wall
        << ",\n  \"pipeline_full_folder_cpu_s\": " << folder_full.cpu
        << ",\n  \"pipeline_full_records_wall_s\": " << record_full.wall
        << ",\n  \"pipeline_full_records_cpu_s\": " << record_full.cpu << "\n}\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "record_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
