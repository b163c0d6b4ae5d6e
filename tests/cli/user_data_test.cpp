// A user's own data through the `kiln` binary, end to end: a generated 3-class image folder,
// converted to records, trained from both (same seed: same accuracy), evaluated and predicted
// from the checkpoint; bad data specs end with one error line and status 2.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/data/vision.h"
#include "testing/kiln_command.h"

namespace kiln::cli::user_data_test {
namespace {

namespace fs = std::filesystem;

using kiln::testing::kiln_exe;
using Result = kiln::testing::CommandResult;

Result run(const std::string& args) {
  // One kernel thread: these networks are tiny, and ctest may run other tests beside this one.
  return kiln::testing::run_kiln(args, "OMP_NUM_THREADS=1 ");
}

// The JSON object on the last line of `output`.
nlohmann::json last_json_line(const std::string& output) {
  auto start = output.rfind("\n{");
  std::string line = output.substr(start == std::string::npos ? 0 : start + 1);
  return nlohmann::json::parse(line);
}

class UserData : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kiln_exe())) GTEST_SKIP() << "no kiln binary (build target kiln_cli_main)";
    std::string templ = (fs::temp_directory_path() / "kiln-userdata-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    root_ = templ;
    write_image_folder(root_ / "images", 12);
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  // Three easy classes: noisy red, green and blue 16x16 PNGs.
  static void write_image_folder(const fs::path& dir, int per_class) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> noise(0, 60);
    const char* names[] = {"blue", "green", "red"};
    for (int cls = 0; cls < 3; ++cls) {
      fs::create_directories(dir / names[cls]);
      for (int i = 0; i < per_class; ++i) {
        kiln::Tensor image = kiln::Tensor::empty({16, 16, 3}, kiln::DType::u8);
        uint8_t* px = image.data<uint8_t>();
        for (int p = 0; p < 16 * 16; ++p) {
          for (int c = 0; c < 3; ++c) {
            // blue is channel 2, green 1, red 0.
            bool lit = c == 2 - cls;
            px[p * 3 + c] = uint8_t(lit ? 255 - noise(rng) : noise(rng));
          }
        }
        std::vector<uint8_t> png = kiln::data::vision::encode_png(image);
        std::ofstream(dir / names[cls] / ("img" + std::to_string(i) + ".png"), std::ios::binary)
            .write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
      }
    }
  }

  fs::path root_;
};

constexpr const char* kTrainFlags =
    " --model lenet --epochs 4 --batch-size 6 --lr 0.05 --seed 11 --print-every 0 --json"
    " --transforms hflip,normalize:0.5:0.25";

TEST_F(UserData, FolderAndRecordsTrainAlikeThenEvalAndPredict) {
  const std::string images = (root_ / "images").string();
  Result convert = run("convert imagefolder " + images + " " + (root_ / "set.krec").string());
  ASSERT_EQ(convert.status, 0) << convert.output;

  Result from_folder = run("train --data imagefolder:" + images + " --ckpt-dir " +
                           (root_ / "ckpt").string() + kTrainFlags);
  ASSERT_EQ(from_folder.status, 0) << from_folder.output;
  Result from_records =
      run("train --data 'record:" + (root_ / "set.krec*").string() + "'" + kTrainFlags);
  ASSERT_EQ(from_records.status, 0) << from_records.output;
  nlohmann::json folder_summary = last_json_line(from_folder.output);
  nlohmann::json record_summary = last_json_line(from_records.output);
  EXPECT_EQ(folder_summary["num_classes"], 3);
  EXPECT_EQ(folder_summary["input_shape"], nlohmann::json({3, 16, 16}));
  const double accuracy = folder_summary["test_accuracy"];
  EXPECT_GE(accuracy, 0.9) << from_folder.output;
  EXPECT_EQ(record_summary["test_accuracy"].get<double>(), accuracy) << from_records.output;
  EXPECT_EQ(record_summary["final_loss"].get<double>(), folder_summary["final_loss"].get<double>());

  // The last checkpoint rebuilds the network alone: the same accuracy on the same data.
  std::string checkpoint = (root_ / "ckpt" / "lenet-4_6.safetensors").string();
  ASSERT_TRUE(fs::exists(checkpoint)) << from_folder.output;
  Result eval = run("eval " + checkpoint + " --data imagefolder:" + images + " --json");
  ASSERT_EQ(eval.status, 0) << eval.output;
  nlohmann::json report = last_json_line(eval.output);
  EXPECT_NEAR(report["accuracy"].get<double>(), accuracy, 1e-9) << eval.output;
  EXPECT_EQ(report["samples"], 36);
  EXPECT_EQ(report["classes"], nlohmann::json({"blue", "green", "red"}));
  int64_t diagonal = 0;
  for (int k = 0; k < 3; ++k) diagonal += report["confusion_matrix"][k][k].get<int64_t>();
  EXPECT_EQ(double(diagonal) / 36.0, report["accuracy"].get<double>());
  Result table = run("eval " + checkpoint + " --data imagefolder:" + images);
  EXPECT_NE(table.output.find("confusion matrix"), std::string::npos) << table.output;

  Result one = run("predict " + checkpoint + " " + images + "/red/img3.png --top-k 2 --json");
  ASSERT_EQ(one.status, 0) << one.output;
  nlohmann::json top = last_json_line(one.output)["predictions"][0]["top"];
  ASSERT_EQ(top.size(), 2u) << one.output;
  EXPECT_EQ(top[0]["class"], "red") << one.output;
  EXPECT_GT(top[0]["probability"].get<double>(), top[1]["probability"].get<double>());
  Result folder = run("predict " + checkpoint + " " + images + " --batch-size 5 --json");
  ASSERT_EQ(folder.status, 0) << folder.output;
  nlohmann::json all = last_json_line(folder.output)["predictions"];
  ASSERT_EQ(all.size(), 36u);
  int correct = 0;
  for (const auto& p : all) {
    std::string file = p["file"];
    std::string truth = fs::path(file).parent_path().filename().string();
    correct += p["top"][0]["class"] == truth;
  }
  EXPECT_EQ(double(correct) / 36.0, accuracy) << folder.output;
}

// The "__metadata__" strings of a safetensors checkpoint.
nlohmann::json checkpoint_metadata(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header(header_bytes, '\0');
  in.read(header.data(), std::streamsize(header_bytes));
  return nlohmann::json::parse(header)["__metadata__"];
}

fs::path only_checkpoint(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") found.push_back(e.path());
  std::sort(found.begin(), found.end());
  return found.empty() ? fs::path() : found.back();
}

TEST_F(UserData, ImageSizeIsTrainedKeptInTheCheckpointAndUsedByEvalAndPredict) {
  const std::string images = (root_ / "images").string();
  Result train = run("train --data imagefolder:" + images + " --image-size 20x24 --ckpt-dir " +
                     (root_ / "ckpt").string() +
                     " --model lenet --epochs 2 --batch-size 6 --lr 0.05 --seed 3 --print-every 0"
                     " --json");
  ASSERT_EQ(train.status, 0) << train.output;
  EXPECT_EQ(last_json_line(train.output)["input_shape"], nlohmann::json({3, 20, 24}));
  fs::path checkpoint = only_checkpoint(root_ / "ckpt");
  ASSERT_FALSE(checkpoint.empty()) << train.output;
  nlohmann::json meta = checkpoint_metadata(checkpoint);
  EXPECT_EQ(meta["image_height"], "20") << meta.dump();
  EXPECT_EQ(meta["image_width"], "24") << meta.dump();
  EXPECT_EQ(meta["in_channels"], "3") << meta.dump();
  // The 16x16 files are resized to the checkpoint's 20x24 (a network fed 16x16 would fail).
  Result eval = run("eval " + checkpoint.string() + " --data imagefolder:" + images + " --json");
  ASSERT_EQ(eval.status, 0) << eval.output;
  EXPECT_EQ(last_json_line(eval.output)["samples"], 36) << eval.output;
  Result predict = run("predict " + checkpoint.string() + " " + images + "/blue/img1.png --json");
  ASSERT_EQ(predict.status, 0) << predict.output;
  EXPECT_EQ(last_json_line(predict.output)["predictions"].size(), 1u) << predict.output;
}

TEST_F(UserData, YamlConfigNamesTheDataAndValidationLikeTheFlags) {
  const std::string images = (root_ / "images").string();
  write_image_folder(root_ / "val", 4);
  const std::string val = (root_ / "val").string();
  const std::string common =
      " --model lenet --epochs 2 --batch-size 6 --lr 0.05 --seed 11 --print-every 0 --json";
  Result flags = run("train --data imagefolder:" + images + " --val imagefolder:" + val + common);
  ASSERT_EQ(flags.status, 0) << flags.output;
  const fs::path config = root_ / "train.yaml";
  std::ofstream(config) << "data: imagefolder:" << images << "\nval: imagefolder:" << val
                        << "\nmodel: lenet\nepochs: 2\nbatch-size: 6\nlr: 0.05\nseed: 11\n"
                           "print-every: 0\njson: true\n";
  Result yaml = run("train --config " + config.string());
  ASSERT_EQ(yaml.status, 0) << yaml.output;
  nlohmann::json a = last_json_line(flags.output), b = last_json_line(yaml.output);
  EXPECT_EQ(b["data"], "imagefolder:" + images);
  EXPECT_EQ(b["eval_data"], "imagefolder:" + val);
  EXPECT_EQ(b["num_classes"], 3);
  EXPECT_EQ(b["input_shape"], nlohmann::json({3, 16, 16}));
  EXPECT_EQ(b["test_accuracy"], a["test_accuracy"]) << yaml.output;
  EXPECT_EQ(b["final_loss"], a["final_loss"]) << yaml.output;
}

// One channel rule (data::image_folder_channels): a folder of grayscale images trains on one
// channel, a folder with a colour image among them on three, and --channels forces either.
TEST_F(UserData, GrayscaleFolderTrainsOnOneChannelAMixedOneOnThree) {
  const fs::path gray = root_ / "gray";
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> noise(0, 40);
  for (int cls = 0; cls < 3; ++cls) {
    fs::create_directories(gray / std::to_string(cls));
    for (int i = 0; i < 4; ++i) {
      kiln::Tensor image = kiln::Tensor::empty({16, 16, 1}, kiln::DType::u8);
      for (int p = 0; p < 256; ++p) image.data<uint8_t>()[p] = uint8_t(cls * 100 + noise(rng));
      std::vector<uint8_t> png = kiln::data::vision::encode_png(image);
      std::ofstream(gray / std::to_string(cls) / ("g" + std::to_string(i) + ".png"),
                    std::ios::binary)
          .write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
    }
  }
  auto input_shape = [&](const std::string& extra) {
    Result r = run("train --data imagefolder:" + gray.string() +
                   " --model lenet --steps 1 --batch-size 6 --print-every 0 --json" + extra);
    EXPECT_EQ(r.status, 0) << r.output;
    return r.status == 0 ? last_json_line(r.output)["input_shape"] : nlohmann::json();
  };
  EXPECT_EQ(input_shape(" --ckpt-dir " + (root_ / "gray_ckpt").string()),
            nlohmann::json({1, 16, 16}));
  EXPECT_EQ(input_shape(" --channels 3"), nlohmann::json({3, 16, 16}));
  // A one-channel model predicts a colour file too: it is decoded to its luma.
  fs::path checkpoint = only_checkpoint(root_ / "gray_ckpt");
  ASSERT_FALSE(checkpoint.empty());
  Result predict = run("predict " + checkpoint.string() + " " +
                       (root_ / "images" / "red" / "img0.png").string() + " --json");
  EXPECT_EQ(predict.status, 0) << predict.output;
  // One colour image makes the whole folder RGB, whichever file comes first.
  fs::copy_file(root_ / "images" / "red" / "img0.png", gray / "2" / "z_colour.png");
  EXPECT_EQ(input_shape(""), nlohmann::json({3, 16, 16}));
  EXPECT_EQ(input_shape(" --channels 1"), nlohmann::json({1, 16, 16}));
}

TEST_F(UserData, BadSpecsAreOneLineErrorsWithStatus2) {
  const std::string images = (root_ / "images").string();
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {"train --data bogus:" + images, "--data: unknown data 'bogus:"},
      {"train --data imagefolder:" + (root_ / "none").string(), "is not a folder"},
      {"train --data 'record:" + (root_ / "none*").string() + "'", "matches no file"},
      {"train --data imagefolder:" + images + " --transforms hflip,blur", "'blur'"},
      {"train --data imagefolder:" + images + " --transforms random_crop:x", "'random_crop:x'"},
      {"train --data imagefolder:" + images + " --image-size 0x5", "--image-size"},
      {"train --data imagefolder:" + images + " --image-size 8", "at least 12x12"},
      {"train --data imagefolder:" + images + " --data-dir " + images, "not both"},
      {"train --data imagefolder:" + images + " --channels 2", "--channels"},
      {"eval " + images + "/red/img0.png --data imagefolder:" + images, "img0.png"},
  };
  for (const Case& c : cases) {
    const bool training = c.args.rfind("train", 0) == 0;
    Result r = run(c.args + (training ? " --steps 1 --batch-size 6" : ""));
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("kiln: error: ", 0), 0u) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST(KilnExecutableUsage, BareKilnPrintsUsageAndVersionIsKnown) {
  if (!fs::exists(kiln_exe())) GTEST_SKIP() << "no kiln binary";
  Result bare = run("");
  EXPECT_EQ(bare.status, 2);
  EXPECT_NE(bare.output.find("Subcommands:"), std::string::npos) << bare.output;
  EXPECT_NE(bare.output.find("predict"), std::string::npos) << bare.output;
  Result version = run("--version");
  EXPECT_EQ(version.status, 0) << version.output;
  EXPECT_EQ(version.output.rfind("kiln ", 0), 0u) << version.output;
}

}  // namespace
}  // namespace kiln::cli::user_data_test
