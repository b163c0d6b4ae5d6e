#include "kiln/data/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "kiln/core/allocator.h"
#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/source_registry.h"
#include "kiln/data/vision.h"

namespace kiln::data {
namespace {

int64_t parse_size(const std::string& name, const std::string& arg, int64_t fallback) {
  if (arg.empty()) return fallback;
  try {
    size_t used = 0;
    int64_t v = std::stoll(arg, &used);
    if (used == arg.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw Error("--transforms: " + name + ":" + arg + ": expected a positive integer after ':'");
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

Op make_named_transform(const std::string& spec) {
  auto colon = spec.find(':');
  std::string name = spec.substr(0, colon);
  std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (name == "rescale") return vision::Rescale(1.0 / 255.0, 0.0);
  if (name == "hflip") return vision::RandomHorizontalFlip();
  if (name == "vflip") return vision::RandomVerticalFlip();
  if (name == "hwc2chw") return vision::HWC2CHW();
  if (name == "normalize") return vision::Normalize({0.5f}, {0.5f});
  if (name == "decode") return vision::Decode(vision::ColorMode::file);
  if (name == "randomcrop") {
    int64_t s = parse_size(name, arg, 28);
    return vision::RandomCrop({s, s}, {4});
  }
  if (name == "centercrop") return vision::CenterCrop({parse_size(name, arg, 24)});
  if (name == "resize") return vision::Resize({parse_size(name, arg, 32)});
  if (name == "randomresizedcrop") {
    int64_t s = parse_size(name, arg, 24);
    return vision::RandomResizedCrop({s, s});
  }
  if (name == "rotate") {
    double d = double(parse_size(name, arg, 90));
    return vision::RandomRotation({-d, d});
  }
  if (name == "typecast") return transforms::TypeCast(dtype_from_name(arg.empty() ? "f32" : arg));
  throw Error("--transforms: unknown transform '" + name +
              "' (known: rescale, hflip, vflip, hwc2chw, normalize, randomcrop[:S], centercrop:S, "
              "resize:S, randomresizedcrop:S, rotate[:D], decode, typecast:DTYPE)");
}

int64_t bench_decode_channels(const BenchOptions& o) {
  if (o.channels != 0) return o.channels;
  const std::string scheme = o.source.substr(0, o.source.find(':'));
  if (scheme == "imagefolder" && o.source.size() > scheme.size() + 1) {
    return image_folder_channels(o.source.substr(scheme.size() + 1));
  }
  auto rows = make_source(o.source, {.shuffle = false}).create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> row;
  while (rows.next(row)) {
    const Tensor bytes = row[0].contiguous();
    if (bytes.dtype() != DType::u8 || bytes.rank() != 1) {
      throw Error("--decode: " + o.source + " holds no encoded images (its first column is " +
                  describe(row[0]) + ")");
    }
    const int64_t c = vision::encoded_image_channels(bytes.data<uint8_t>(), size_t(bytes.numel()));
    if (c != 1) return 3;
  }
  return 1;
}

Dataset build_bench_pipeline(const BenchOptions& o) {
  if (o.batch_size <= 0) throw Error("--batch-size must be positive");
  if (o.epochs <= 0) throw Error("--epochs must be positive");
  if (o.workers < 0) throw Error("--workers must be >= 0");
  SourceOptions so;
  so.num_parallel_workers = o.source_workers;
  so.shuffle = o.shuffle;
  Dataset ds = make_source(o.source, so);
  const bool decodes = o.decode || std::count(o.transforms.begin(), o.transforms.end(), "decode");
  const vision::ColorMode mode =
      decodes ? vision::color_mode_for_channels(bench_decode_channels(o), "--channels")
              : vision::ColorMode::rgb;
  std::vector<Op> ops;
  if (o.decode) ops.push_back(vision::Decode(mode));
  for (auto& t : o.transforms)
    ops.push_back(t == "decode" ? Op(vision::Decode(mode)) : make_named_transform(t));
  if (!ops.empty()) {
    MapOptions mo;
    mo.num_parallel_workers = o.workers;
    mo.prefetch_size = o.prefetch;
    ds = ds.map(std::move(ops), {ds.get_col_names()[0]}, {}, mo);
  }
  BatchOptions bo;
  bo.num_parallel_workers = o.batch_workers;
  bo.prefetch_size = o.prefetch;
  return ds.batch(o.batch_size, o.drop_remainder, bo);
}

BenchResult run_data_bench(const BenchOptions& o) {
  int old_prefetch = config::get_prefetch_size();
  int old_rows_per_block = config::get_rows_per_block();
  if (o.prefetch > 0) config::set_prefetch_size(o.prefetch);
  if (o.rows_per_block > 0) config::set_rows_per_block(o.rows_per_block);
  Dataset ds = build_bench_pipeline(o);
  BenchResult r;
  r.pipeline = ds.describe();
  r.workers = o.workers > 0 ? o.workers : config::get_num_parallel_workers();
  auto t0 = std::chrono::steady_clock::now();
  IteratorOptions io;
  io.num_epochs = o.epochs;
  auto it = ds.create_tuple_iterator(io);
  std::vector<Tensor> row;
  for (int64_t e = 0; e < o.epochs; ++e) {
    while (it.next(row)) {
      ++r.batches;
      r.rows += row[0].rank() > 0 ? row[0].dim(0) : 1;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.stats = it.stats();
  it.stop();
  config::set_prefetch_size(old_prefetch);
  config::set_rows_per_block(old_rows_per_block);
  r.samples_per_sec = r.seconds > 0 ? double(r.rows) / r.seconds : 0;
  r.peak_rss_mb = peak_rss_mb();
  return r;
}

std::string BenchResult::to_json(const BenchOptions& o) const {
  char head[512];
  std::snprintf(head, sizeof head,
                "{\"samples_per_sec\":%.1f,\"rows\":%lld,\"batches\":%lld,\"workers\":%d,"
                "\"peak_rss_mb\":%.1f,\"seconds\":%.4f,\"batch_size\":%lld,\"epochs\":%lld,",
                samples_per_sec, static_cast<long long>(rows), static_cast<long long>(batches),
                workers, peak_rss_mb, seconds, static_cast<long long>(o.batch_size),
                static_cast<long long>(o.epochs));
  std::string s = head;
  s += "\"source\":\"";
  s += json_escape(o.source);
  s += "\",\"decode\":";
  s += o.decode ? "true" : "false";
  s += ",\"transforms\":[";
  for (size_t i = 0; i < o.transforms.size(); ++i) {
    if (i) s += ",";
    s += '"';
    s += json_escape(o.transforms[i]);
    s += '"';
  }
  s += "],\"pipeline\":" + stats.to_json() + "}";
  return s;
}

}  // namespace kiln::data
