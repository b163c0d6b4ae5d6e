#include "kiln/cli/data_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "kiln/cli/option_checks.h"
#include "kiln/data/bench.h"
#include "kiln/data/source_registry.h"

namespace kiln::cli {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = nullptr;
  try {
    data = app.get_subcommand("data");
  } catch (const CLI::OptionNotFound&) {
    data = app.add_subcommand("data", "data pipeline tools");
    data->require_subcommand(1);
  }
  auto opts = std::make_shared<data::BenchOptions>();
  auto transforms = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  std::string sources_help = "where rows come from:";
  for (auto& s : data::registered_sources()) sources_help += "\n  " + s;
  if (!data::has_source_factory("record")) {
    sources_help += "\n  record:FILE[,FILE...]  record files (once kiln_record registered it)";
  }

  CLI::App* bench = data->add_subcommand(
      "bench", "run a pipeline without training; print samples/s and the per-stage summary");
  bench->add_option("--source", opts->source, sources_help)->capture_default_str();
  bench->add_flag("--decode", opts->decode,
                  "decode JPEG/PNG bytes (in the map workers); without it an image source yields "
                  "the encoded bytes");
  bench
      ->add_option("--channels", opts->channels,
                   "channels --decode gives: 1 (gray) or 3 (RGB); default: 1 when every image "
                   "is grayscale, else 3 (as kiln train and ImageFolderDataset decode)")
      ->check(CLI::IsMember({1, 3}));
  bench->add_option("--transforms", *transforms,
                    "comma-separated: rescale,hflip,vflip,hwc2chw,normalize,randomcrop[:S],"
                    "centercrop:S,resize:S,randomresizedcrop:S,rotate[:D],typecast:DTYPE");
  bench->add_option("--batch-size", opts->batch_size, "rows per batch")
      ->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  bench->add_flag("!--keep-remainder", opts->drop_remainder,
                  "keep the last partial batch (default: drop it)");
  bench
      ->add_option("--workers", opts->workers, "map workers (0: one per core this process may use)")
      ->capture_default_str()
      ->check(integer_in(0, kMaxThreads));
  bench
      ->add_option("--source-workers", opts->source_workers,
                   "source reader threads (0: the source's default)")
      ->check(integer_in(0, kMaxThreads));
  bench->add_option("--batch-workers", opts->batch_workers, "threads assembling batches")
      ->capture_default_str()
      ->check(integer_in(1, kMaxThreads));
  bench->add_option("--epochs", opts->epochs, "passes over the data")
      ->capture_default_str()
      ->check(integer_in(1, 1'000'000));
  bench->add_flag("--shuffle", opts->shuffle, "shuffle in the source");
  bench->add_option("--prefetch", opts->prefetch, "queue capacity in rows (0: config default)")
      ->check(integer_in(0, 1 << 20));
  bench
      ->add_option("--rows-per-block", opts->rows_per_block,
                   "rows per queue hand-off between stages (0: config default)")
      ->check(integer_in(0, 1 << 20));
  bench->add_flag("--json", *json, "end with one JSON line of the results");
  bench->callback([opts, transforms, json] {
    opts->transforms = split_commas(*transforms);
    data::BenchResult r = data::run_data_bench(*opts);
    std::printf("pipeline:\n%s", r.pipeline.c_str());
    std::printf(
        "%lld samples in %lld batches in %.3f s: %.0f samples/s (%d map workers), peak RSS %.1f "
        "MiB\n",
        static_cast<long long>(r.rows), static_cast<long long>(r.batches), r.seconds,
        r.samples_per_sec, r.workers, r.peak_rss_mb);
    std::printf("%s", r.stats.summary().c_str());
    if (*json) std::printf("%s\n", r.to_json(*opts).c_str());
    std::fflush(stdout);
  });
}

}  // namespace kiln::cli
