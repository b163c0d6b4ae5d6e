// Checkpoint files: saving and loading tensors, listing a folder's checkpoints, cleaning up after
// killed writers, and the training state (where to resume) validated field by field. Depends
// only on core and safetensors.cpp (not on networks or optimizers), so the checkpoint fuzzer and
// the sanitizer build of the reader tests compile it alone.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "kiln/core/error.h"
#include "kiln/core/temporary_files.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/safetensors.h"

namespace kiln::train {
namespace {

// Far beyond any real run (2^40 steps), small enough that sums and products of these stay exact.
constexpr int64_t kMaxCounter = int64_t(1) << 40;

int64_t metadata_int(const Checkpoint& c, const std::string& key) {
  auto it = c.metadata.find(key);
  if (it == c.metadata.end()) {
    throw FileError(c.source + ": metadata '" + key +
                    "' is missing (not a training checkpoint, or a damaged one)");
  }
  int64_t v = 0;
  const std::string& s = it->second;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 0 || v > kMaxCounter) {
    throw FileError(c.source + ": metadata '" + key + "' must be an integer from 0 to " +
                    std::to_string(kMaxCounter) + ", got '" + s + "'");
  }
  return v;
}

// NaN or infinity in a checkpoint means the run that wrote it had already diverged.
void check_finite(const Checkpoint& c) {
  for (const auto& [name, t] : c.tensors) {
    if (!is_floating(t.dtype()) || t.numel() == 0) continue;
    std::vector<float> v = t.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        throw FileError(c.source + ": tensor '" + name + "' holds " +
                        (std::isnan(v[i]) ? "NaN" : "infinity") + " at element " +
                        std::to_string(i) + " (saved from a run that had diverged?)");
      }
    }
  }
}

}  // namespace

const Tensor* Checkpoint::find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

void save_checkpoint(const std::vector<nn::NamedTensor>& tensors, const std::string& path,
                     const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, encode_safetensors(tensors, metadata));
}

Checkpoint load_checkpoint(const std::string& path) {
  SafetensorsFile file = decode_safetensors(read_whole_file(path), path);
  return Checkpoint{path, std::move(file.tensors), std::move(file.metadata), file.verified};
}

std::vector<std::string> list_checkpoints(const std::string& directory, const std::string& prefix) {
  namespace fs = std::filesystem;
  struct Found {
    fs::file_time_type time;
    int64_t epoch, step;
    std::string path;
  };
  std::vector<Found> found;
  std::error_code ec;
  const std::string head = prefix + "-", tail = ".safetensors";
  for (const fs::directory_entry& e : fs::directory_iterator(directory, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
      continue;
    }
    // The middle must be exactly <digits>_<digits>.
    std::string mid = name.substr(head.size(), name.size() - head.size() - tail.size());
    int64_t epoch = -1, step = -1;
    const char* end = mid.data() + mid.size();
    auto [p1, e1] = std::from_chars(mid.data(), end, epoch);
    if (e1 != std::errc() || p1 == end || *p1 != '_' || epoch < 0) continue;
    auto [p2, e2] = std::from_chars(p1 + 1, end, step);
    if (e2 != std::errc() || p2 != end || step < 0) continue;
    std::error_code tec;
    if (!e.is_regular_file(tec)) continue;
    fs::file_time_type t = e.last_write_time(tec);
    if (tec) continue;
    found.push_back({t, epoch, step, e.path().string()});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.time, a.epoch, a.step, a.path) < std::tie(b.time, b.epoch, b.step, b.path);
  });
  std::vector<std::string> out;
  for (Found& f : found) out.push_back(std::move(f.path));
  return out;
}

std::vector<std::string> remove_stale_checkpoint_temporaries(const std::string& directory) {
  return remove_stale_temporaries(directory, ".safetensors.tmp.");  // safetensors.cpp's names
}

ResumePoint read_training_state(const Checkpoint& c) {
  ResumePoint p;
  p.epoch = metadata_int(c, "epoch");
  p.step_in_epoch = metadata_int(c, "step_in_epoch");
  p.global_step = metadata_int(c, "global_step");
  const Tensor* step = nullptr;
  for (const auto& [name, t] : c.tensors) {
    if (name == std::string(kOptimizerPrefix) + "global_step") step = &t;
  }
  bool one_i64 = step && step->dtype() == DType::i64 && step->numel() == 1;
  if (!one_i64 || step->item<int64_t>() != p.global_step) {
    throw FileError(c.source + ": tensor 'optimizer.global_step' " +
                    (step ? "is " + describe(*step) +
                                (one_i64 ? " = " + std::to_string(step->item<int64_t>()) : "")
                          : std::string("is missing")) +
                    " but metadata 'global_step' is " + std::to_string(p.global_step));
  }
  check_finite(c);
  return p;
}

}  // namespace kiln::train
