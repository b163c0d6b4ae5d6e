#include "kiln/data/source_registry.h"

#include <map>
#include <mutex>

#include "kiln/core/error.h"
#include "kiln/data/record_dataset.h"

namespace kiln::data {
namespace {

struct Entry {
  SourceFactory factory;
  std::string help;
};

MnistOptions mnist_options(const std::string& usage, const SourceOptions& o) {
  MnistOptions m;
  m.usage = usage;
  m.num_parallel_workers = o.num_parallel_workers;
  m.shuffle = o.shuffle;
  m.num_samples = o.num_samples;
  m.num_shards = o.num_shards;
  m.shard_id = o.shard_id;
  return m;
}

// "train", "test", "all", a directory, or "DIR:usage".
std::pair<std::string, std::string> dir_and_usage(const std::string& arg) {
  if (arg.empty()) return {"", "train"};
  if (arg == "train" || arg == "test" || arg == "all") return {"", arg};
  auto colon = arg.rfind(':');
  if (colon != std::string::npos) {
    std::string u = arg.substr(colon + 1);
    if (u == "train" || u == "test" || u == "all") return {arg.substr(0, colon), u};
  }
  return {arg, "train"};
}

struct Registry {
  std::mutex mu;
  std::map<std::string, Entry> entries;
  Registry() {
    entries["fashion-mnist"] = {[](const std::string& arg, const SourceOptions& o) -> Dataset {
                                  auto [dir, usage] = dir_and_usage(arg);
                                  return FashionMnistDataset(dir, mnist_options(usage, o));
                                },
                                "fashion-mnist[:train|:test|:all|:DIR[:usage]]  Fashion-MNIST IDX "
                                "files (default: Debian's)"};
    entries["mnist"] = {[](const std::string& arg, const SourceOptions& o) -> Dataset {
                          auto [dir, usage] = dir_and_usage(arg);
                          if (dir.empty())
                            throw Error("mnist: give the directory: mnist:DIR[:train|:test|:all]");
                          return MnistDataset(dir, mnist_options(usage, o));
                        },
                        "mnist:DIR[:train|:test|:all]  MNIST IDX files"};
    entries["imagefolder"] = {
        [](const std::string& arg, const SourceOptions& o) -> Dataset {
          if (arg.empty()) throw Error("imagefolder: give the directory: imagefolder:DIR");
          ImageFolderOptions io;
          io.num_parallel_workers = o.num_parallel_workers;
          io.shuffle = o.shuffle;
          io.num_samples = o.num_samples;
          io.num_shards = o.num_shards;
          io.shard_id = o.shard_id;
          return ImageFolderDataset(arg, io);
        },
        "imagefolder:DIR  one subfolder per class, JPEG/PNG files (rows hold the encoded bytes)"};
    entries["record"] = {record_source,
                         "record:FILE[,FILE...][:global|files|infile|none]  record files (one "
                         "file: its whole set); columns image, label when the set has both, else "
                         "every field"};
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: factories may run during shutdown
  return *r;
}

}  // namespace

void register_source_factory(const std::string& scheme, SourceFactory factory, std::string help) {
  if (scheme.empty() || scheme.find(':') != std::string::npos) {
    throw Error("register_source_factory: bad scheme '" + scheme + "'");
  }
  if (!factory) throw Error("register_source_factory: empty factory for '" + scheme + "'");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries[scheme] = {std::move(factory), help.empty() ? scheme : std::move(help)};
}

bool has_source_factory(const std::string& scheme) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.entries.count(scheme) > 0;
}

std::vector<std::string> registered_sources() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (auto& [name, e] : r.entries) out.push_back(e.help);
  return out;
}

Dataset make_source(const std::string& spec, const SourceOptions& options) {
  auto colon = spec.find(':');
  std::string scheme = spec.substr(0, colon);
  std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  SourceFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.entries.find(scheme);
    if (it == r.entries.end()) {
      std::string known;
      for (auto& [name, e] : r.entries) {
        if (!known.empty()) known += ", ";
        known += name;
      }
      throw Error("--source: unknown source '" + scheme + "'; known: " + known);
    }
    factory = it->second.factory;
  }
  return factory(arg, options);
}

}  // namespace kiln::data
