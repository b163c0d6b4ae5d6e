// Checkpoints prove their integrity: a CRC-32 per tensor and one over the metadata (kept in the
// safetensors "__metadata__", so other readers still load the file); every field of the training
// state is validated on resume; killed writers' temporary files are cleaned up; keep-last-N counts
// the whole folder.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/models/mlp.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/lr_schedule.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/model.h"
#include "kiln/train/safetensors.h"
#include "testing/file_contents.h"
#include "train/train_testing.h"

namespace kiln::train::checkpoint_integrity_test {
namespace {

namespace fs = std::filesystem;

struct Job {
  std::shared_ptr<models::MLP> net;
  std::shared_ptr<optim::Momentum> opt;
};

Job make_job(uint64_t seed) {
  set_seed(seed);
  Job j;
  j.net = std::make_shared<models::MLP>(6, std::vector<int64_t>{4}, 3);
  j.opt = std::make_shared<optim::Momentum>(j.net->trainable_params(), optim::constant_lr(0.1));
  j.opt->set_global_step(7);
  return j;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The FileError's message of load_checkpoint (or "" when it loads).
std::string load_error(const std::string& path) {
  try {
    load_checkpoint(path);
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

std::string resume_error(const std::string& path) {
  Job j = make_job(5);
  try {
    resume_from_checkpoint(path, *j.net, *j.opt);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& m, const std::string& part) {
  EXPECT_NE(m.find(part), std::string::npos) << "'" << part << "' not in: " << m;
}

TEST(CheckpointIntegrity, SavedFilesCarryChecksumsOtherReadersIgnore) {
  std::string dir = testing::temp_dir("crc_ok");
  Job j = make_job(1);
  save_checkpoint(*j.net, dir + "/a.safetensors", {.optimizer = j.opt.get(), .epoch = 2});
  std::string bytes = kiln::testing::file_text(dir + "/a.safetensors");
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  // Plain safetensors: string metadata, one crc32 entry per tensor.
  size_t tensors = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    ++tensors;
    ASSERT_TRUE(header["__metadata__"].contains("crc32." + it.key())) << it.key();
  }
  for (auto& [k, v] : header["__metadata__"].items()) EXPECT_TRUE(v.is_string()) << k;
  EXPECT_EQ(header["__metadata__"]["checksum"], "crc32");
  EXPECT_GT(tensors, 4u);
  Checkpoint c = load_checkpoint(dir + "/a.safetensors");
  EXPECT_TRUE(c.verified);
  EXPECT_EQ(c.metadata.count("checksum"), 0u);  // checksums are not user metadata
  EXPECT_EQ(c.metadata.at("epoch"), "2");
  Job other = make_job(9);
  ResumePoint at = resume_from_checkpoint(dir + "/a.safetensors", *other.net, *other.opt);
  EXPECT_EQ(at.epoch, 2);
  EXPECT_EQ(at.global_step, 7);
  EXPECT_THROW(save_checkpoint({{"w", Tensor::zeros({2})}}, dir + "/b.safetensors",
                               {{"crc32.w", "00000000"}}),
               Error);
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, EveryFlippedBitOfTheDataIsCaughtNamingTheTensor) {
  std::string dir = testing::temp_dir("crc_flip");
  Job j = make_job(1);
  std::string path = dir + "/a.safetensors";
  save_checkpoint(*j.net, path, {.optimizer = j.opt.get()});
  const std::string good = kiln::testing::file_text(path);
  uint64_t n;
  std::memcpy(&n, good.data(), 8);
  const size_t data_start = 8 + n;
  SafetensorsFile f = decode_safetensors(good, path);
  size_t caught = 0;
  for (size_t at = data_start; at < good.size(); ++at) {
    for (int bit : {0, 7}) {
      std::string bad = good;
      bad[at] = char(bad[at] ^ (1 << bit));
      write(path, bad);
      std::string m = load_error(path);
      ASSERT_NE(m, "") << "flip at byte " << at << " bit " << bit << " went unnoticed";
      // The message names the tensor whose bytes hold that offset, and the file.
      size_t i = 0;
      while (i + 1 < f.byte_offsets.size() && f.byte_offsets[i + 1] <= at) ++i;
      expect_has(m, path);
      expect_has(m, "tensor '" + f.tensors[i].first + "' fails its checksum");
      expect_has(m, "at byte offset " + std::to_string(f.byte_offsets[i]));
      ++caught;
    }
  }
  EXPECT_EQ(caught, 2 * (good.size() - data_start));
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, ChangedMetadataFailsItsChecksum) {
  std::string dir = testing::temp_dir("crc_meta");
  Job j = make_job(1);
  std::string path = dir + "/a.safetensors";
  save_checkpoint(*j.net, path, {.optimizer = j.opt.get(), .epoch = 1});
  std::string bytes = kiln::testing::file_text(path);
  size_t at = bytes.find("\"epoch\":\"1\"");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] = '9';  // same length: only the checksum can tell
  write(path, bytes);
  expect_has(load_error(path), "__metadata__ fails its checksum");
  // A damaged checksum marker: the checksums are there, the key that declares them is not.
  bytes = kiln::testing::file_text(path);
  bytes[at + 9] = '1';
  at = bytes.find("\"checksum\"");
  bytes[at + 1] = 'C';
  write(path, bytes);
  expect_has(load_error(path), "holds checksums but no 'checksum' entry");
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, FilesWithoutChecksumsLoadUnverified) {
  // What another tool writes: no "__metadata__" at all.
  std::string json = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  uint64_t n = json.size();
  std::memcpy(bytes.data(), &n, 8);
  float v[2] = {1, 2};
  bytes += json + std::string(reinterpret_cast<const char*>(v), 8);
  SafetensorsFile f = decode_safetensors(bytes, "other.safetensors");
  EXPECT_FALSE(f.verified);
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].second.to_vector<float>(), (std::vector<float>{1, 2}));
}

// Rewrites the checkpoint at `path` with `edit` applied to its tensors and metadata, with valid
// checksums: only the training-state checks can catch what the edit did.
template <class Edit>
void rewrite(const std::string& path, Edit edit) {
  Checkpoint c = load_checkpoint(path);
  edit(c.tensors, c.metadata);
  save_checkpoint(c.tensors, path, c.metadata);
}

TEST(CheckpointIntegrity, ResumeValidatesEveryFieldOfTheTrainingState) {
  std::string dir = testing::temp_dir("state");
  Job j = make_job(1);
  std::string path = dir + "/a.safetensors";
  auto fresh = [&] {
    save_checkpoint(*j.net, path, {.optimizer = j.opt.get(), .epoch = 1, .step_in_epoch = 3});
  };
  using Tensors = std::vector<nn::NamedTensor>;
  using Meta = std::map<std::string, std::string>;
  auto tensor = [](Tensors& ts, const std::string& name) -> Tensor& {
    for (auto& [n, t] : ts)
      if (n == name) return t;
    throw std::runtime_error("no " + name);
  };

  fresh();
  EXPECT_EQ(resume_error(path), "");

  // A moment of the wrong dtype used to train to NaN and exit 0.
  fresh();
  rewrite(path, [&](Tensors& ts, Meta&) {
    Tensor& m = tensor(ts, "optimizer.moments.0");
    m = Tensor::zeros(m.shape(), DType::i32);
  });
  std::string m = resume_error(path);
  expect_has(m, "'moments.0'");
  expect_has(m, "i32");
  expect_has(m, path);

  for (const char* bad : {"-1", "99999999999999999999", "1x", ""}) {
    for (const char* key : {"epoch", "step_in_epoch", "global_step"}) {
      fresh();
      rewrite(path, [&](Tensors&, Meta& meta) { meta[key] = bad; });
      m = resume_error(path);
      expect_has(m, std::string("metadata '") + key + "'");
      expect_has(m, std::string("'") + bad + "'");
    }
  }
  fresh();
  rewrite(path, [&](Tensors&, Meta& meta) { meta.erase("step_in_epoch"); });
  expect_has(resume_error(path), "metadata 'step_in_epoch' is missing");

  // The step in the metadata and in the optimizer's state must agree.
  fresh();
  rewrite(path, [&](Tensors&, Meta& meta) { meta["global_step"] = "8"; });
  expect_has(resume_error(path), "'optimizer.global_step'");
  fresh();
  rewrite(path, [&](Tensors& ts, Meta&) {
    tensor(ts, "optimizer.global_step") = Tensor::scalar(7, DType::f32);
  });
  expect_has(resume_error(path), "'optimizer.global_step' is f32");

  // A diverged run's weights are not a place to resume from.
  fresh();
  rewrite(path, [&](Tensors& ts, Meta&) {
    Tensor& w = tensor(ts, ts[0].first);
    w = w.clone();
    w.data<float>()[1] = std::nanf("");
  });
  m = resume_error(path);
  expect_has(m, "holds NaN at element 1");
  expect_has(m, path);
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, StaleTemporaryFilesOfKilledWritersAreRemoved) {
  std::string dir = testing::temp_dir("stale");
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a process id that no longer runs
  std::string dead = dir + "/.net-1_0.safetensors.tmp." + std::to_string(child);
  std::string mine = dir + "/.net-2_0.safetensors.tmp." + std::to_string(::getpid());
  std::string live = dir + "/.net-3_0.safetensors.tmp." + std::to_string(::getppid());
  std::string other = dir + "/.notes.tmp.1";
  for (auto& p : {dead, mine, live, other}) write(p, "partial");
  std::vector<std::string> removed = remove_stale_checkpoint_temporaries(dir);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{dead, mine}));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));   // its writer may still be at work
  EXPECT_TRUE(fs::exists(other));  // not a checkpoint's
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, KeepLastNCountsTheWholeFolder) {
  std::string dir = testing::temp_dir("keep_all");
  // An earlier run's checkpoints, older than anything this run writes.
  for (const char* name : {"net-1_0.safetensors", "net-2_0.safetensors", "net-3_0.safetensors"}) {
    write(dir + "/" + name, "x");
    fs::last_write_time(dir + "/" + name, fs::file_time_type::clock::now() - std::chrono::hours(1));
  }
  write(dir + "/net-notes.safetensors", "x");  // not <epoch>_<step>: never counted nor removed
  write(dir + "/other-1_0.safetensors", "x");  // another prefix
  std::vector<std::string> listed = list_checkpoints(dir, "net");
  EXPECT_EQ(listed.size(), 3u);
  auto ds = testing::synthetic_dataset(32, 6, 8);  // 4 steps per epoch
  Job j = make_job(3);
  Model model(j.net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), j.opt);
  auto ckpt = std::make_shared<ModelCheckpoint>(
      "net", dir, CheckpointConfig{.save_checkpoint_steps = 0, .keep_checkpoint_max = 2});
  model.train(1, ds, {ckpt});
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  // This run's net-1_4 and the newest of the earlier run's: 2.
  EXPECT_EQ(files, (std::vector<std::string>{"net-1_4.safetensors", "net-3_0.safetensors",
                                             "net-notes.safetensors", "other-1_0.safetensors"}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::train::checkpoint_integrity_test
