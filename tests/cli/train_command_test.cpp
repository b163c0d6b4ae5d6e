#include "kiln/cli/train_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/train_args.h"
#include "kiln/core/error.h"
#include "testing/cpu_features.h"
#include "testing/file_contents.h"

namespace kiln::cli::train_command_test {
namespace {

namespace fs = std::filesystem;

using kiln::testing::parse_train_args;

std::string write_yaml(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("kiln_cli_" + std::to_string(::getpid()) + name);
  std::ofstream(p) << text;
  return p.string();
}

TEST(TrainCommand, DefaultsAreTheDefaultJob) {
  TrainConfig c = parse_train_args({});
  EXPECT_EQ(c.model, "lenet");
  EXPECT_EQ(c.epochs, 5);
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_EQ(c.optimizer, "momentum");
  EXPECT_EQ(c.mode, "graph");
  EXPECT_TRUE(c.graph_kernel);
  EXPECT_FALSE(c.json);
  EXPECT_EQ(c.amp_level, "O0");
  EXPECT_EQ(c.amp_dtype, "bf16");
  EXPECT_TRUE(c.keep_batchnorm_fp32);
  EXPECT_FALSE(c.amp_strict);
  EXPECT_EQ(c.loss_scale, "");
}

TEST(TrainCommand, FlagsParse) {
  TrainConfig c = parse_train_args({"--model",
                                    "resnet20",
                                    "--epochs",
                                    "2",
                                    "--steps",
                                    "50",
                                    "--batch-size",
                                    "128",
                                    "--mode",
                                    "graph",
                                    "--graph-kernel",
                                    "on",
                                    "--lr",
                                    "0.2",
                                    "--optimizer",
                                    "adamw",
                                    "--threads",
                                    "2",
                                    "--seed",
                                    "9",
                                    "--data-dir",
                                    "/d",
                                    "--ckpt-dir",
                                    "/c",
                                    "--resume",
                                    "/c/x.safetensors",
                                    "--amp-level",
                                    "O2",
                                    "--amp-dtype",
                                    "fp16",
                                    "--loss-scale",
                                    "fixed:1024",
                                    "--keep-batchnorm-fp32",
                                    "off",
                                    "--amp-strict",
                                    "--dump-graph",
                                    "/g",
                                    "--micro-batches",
                                    "2",
                                    "--json"});
  EXPECT_EQ(c.model, "resnet20");
  EXPECT_EQ(c.epochs, 2);
  EXPECT_EQ(c.steps, 50);
  EXPECT_EQ(c.batch_size, 128);
  EXPECT_EQ(c.mode, "graph");
  EXPECT_TRUE(c.graph_kernel);
  EXPECT_DOUBLE_EQ(c.lr, 0.2);
  EXPECT_EQ(c.optimizer, "adamw");
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(c.data_dir, "/d");
  EXPECT_EQ(c.ckpt_dir, "/c");
  EXPECT_EQ(c.resume, "/c/x.safetensors");
  EXPECT_TRUE(c.json);
  EXPECT_EQ(c.amp_level, "O2");
  EXPECT_EQ(c.amp_dtype, "fp16");
  EXPECT_EQ(c.loss_scale, "fixed:1024");
  EXPECT_FALSE(c.keep_batchnorm_fp32);
  EXPECT_TRUE(c.amp_strict);
  EXPECT_EQ(c.dump_graph, "/g");
  EXPECT_EQ(c.micro_batches, 2);
}

// amp-strict is a flag on the command line and a boolean key in the YAML file.
TEST(TrainCommand, AmpStrictFromFlagOrYaml) {
  EXPECT_FALSE(parse_train_args({"--amp-level", "O2"}).amp_strict);
  EXPECT_TRUE(parse_train_args({"--amp-level", "O2", "--amp-strict"}).amp_strict);
  const std::string yaml = write_yaml("amp_strict.yaml", "amp-level: O2\namp-strict: true\n");
  const TrainConfig c = parse_train_args({"--config", yaml});
  EXPECT_EQ(c.amp_level, "O2");
  EXPECT_TRUE(c.amp_strict);
  fs::remove(yaml);
}

TEST(TrainCommand, UnknownFlagsAndBadValuesAreErrors) {
  try {
    parse_train_args({"--epochz", "3"});
    FAIL();
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("--epochz"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_train_args({"--model", "vgg"}), CLI::ParseError);
  // Every zoo model is a --model value (the list is the zoo's own).
  for (const char* model : {"resnet56", "resnet18", "resnet50", "mobilenetv2"}) {
    EXPECT_EQ(parse_train_args({"--model", model}).model, model);
  }
  EXPECT_THROW(parse_train_args({"--mode", "fast"}), CLI::ParseError);
  EXPECT_THROW(parse_train_args({"--epochs", "many"}), CLI::ParseError);
  EXPECT_THROW(parse_train_args({"--amp-dtype", "fp8"}), CLI::ParseError);
  try {
    parse_train_args({"--loss-scale", "fixed:lots"});
    FAIL();
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("fixed:lots"), std::string::npos) << e.what();
  }
}

TEST(TrainCommand, YamlConfigUsesLongFlagNamesAndTheCommandLineWins) {
  std::string path = write_yaml("ok.yaml",
                                "model: mlp\nepochs: 3\nbatch-size: 512\nlr: 0.05\njson: true\n"
                                "graph-kernel: on\noptimizer: adam\n");
  TrainConfig c = parse_train_args({"--config", path, "--epochs", "7"});
  EXPECT_EQ(c.model, "mlp");
  EXPECT_EQ(c.epochs, 7);  // command line wins
  EXPECT_EQ(c.batch_size, 512);
  EXPECT_DOUBLE_EQ(c.lr, 0.05);
  EXPECT_TRUE(c.json);
  EXPECT_TRUE(c.graph_kernel);
  EXPECT_EQ(c.optimizer, "adam");
  fs::remove(path);
}

TEST(TrainCommand, PipelineWorkersAndPrefetchFromFlagsOrYaml) {
  EXPECT_EQ(parse_train_args({}).workers, 0);
  EXPECT_EQ(parse_train_args({}).prefetch, 0);
  TrainConfig c = parse_train_args({"--workers", "3", "--prefetch", "64"});
  EXPECT_EQ(c.workers, 3);
  EXPECT_EQ(c.prefetch, 64);
  std::string path = write_yaml("pipeline.yaml", "workers: 2\nprefetch: 8\n");
  c = parse_train_args({"--config", path});
  EXPECT_EQ(c.workers, 2);
  EXPECT_EQ(c.prefetch, 8);
  fs::remove(path);
  EXPECT_THROW(parse_train_args({"--workers", "-1"}), CLI::ParseError);
  EXPECT_THROW(parse_train_args({"--prefetch", "x"}), CLI::ParseError);
}

TEST(TrainCommand, YamlErrorsNameTheKey) {
  std::string unknown = write_yaml("unknown.yaml", "epochs: 2\nbatch_size: 64\n");
  try {
    parse_train_args({"--config", unknown});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'batch_size'"), std::string::npos)
        << e.what();
  }
  std::string bad_value = write_yaml("bad.yaml", "model: vgg\n");
  try {
    parse_train_args({"--config", bad_value});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model'"), std::string::npos) << e.what();
  }
  std::string broken = write_yaml("broken.yaml", "epochs: [1,\n");
  EXPECT_THROW(parse_train_args({"--config", broken}), FileError);
  EXPECT_THROW(parse_train_args({"--config", "/nonexistent/kiln.yaml"}), FileError);
  for (auto& p : {unknown, bad_value, broken}) fs::remove(p);
}

TEST(TrainCommand, MissingDataSetSaysHowToGetIt) {
  TrainConfig c;
  c.data_dir = "/nonexistent/fashion";
  std::ostringstream out;
  try {
    run_train(c, out);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("apt-get install dataset-fashion-mnist"), std::string::npos) << m;
    EXPECT_NE(m.find("--data-dir"), std::string::npos) << m;
  }
}

TEST(TrainCommand, ShortRunPrintsMonitorLinesAndJsonLast) {
  TrainConfig c;
  c.steps = 30;
  c.schedule = "constant";  // the default warm-up would keep the first 30 steps' lr small
  c.print_every = 10;
  c.json = true;
  c.threads = 2;
  std::ostringstream out;
  TrainReport r = run_train(c, out);
  std::string text = out.str();
  EXPECT_NE(text.find("epoch: 1 step: 10, loss is "), std::string::npos) << text;
  EXPECT_NE(text.find("Train epoch time: "), std::string::npos) << text;
  std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
  nlohmann::json j = nlohmann::json::parse(last);
  for (const char* key :
       {"model", "mode", "epochs", "steps", "batch_size", "threads", "images_per_sec",
        "test_accuracy", "final_loss", "peak_rss_mb", "wall_s"}) {
    EXPECT_TRUE(j.contains(key)) << key << " in " << last;
  }
  EXPECT_EQ(j["steps"], 30);
  EXPECT_EQ(j["model"], "lenet");
  EXPECT_GT(j["images_per_sec"].get<double>(), 0);
  EXPECT_GT(r.test_accuracy, 0.3);  // 30 steps already beat chance (0.1) by far
}

// --dump-graph writes every compiled graph before and after the passes, as text and DOT; the
// compiled training step shows the fused kernels (LeNet's pooling fusions among them).
TEST(TrainCommand, DumpGraphWritesTheStepBeforeAndAfterThePasses) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_cli_dump_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainConfig c;
  c.steps = 2;
  c.mode = "graph";
  c.graph_kernel = true;
  c.threads = 2;
  c.dump_graph = dir.string();
  std::ostringstream out;
  run_train(c, out);
  const fs::path traced = dir / "train_step_0_traced.txt", compiled = dir / "train_step_1_compiled";
  ASSERT_TRUE(fs::exists(traced)) << out.str();
  ASSERT_TRUE(fs::exists(fs::path(compiled).concat(".dot")));
  EXPECT_NE(kiln::testing::file_text(traced).find("max_pool2d_grad"), std::string::npos);
  const std::string text = kiln::testing::file_text(fs::path(compiled).concat(".txt"));
  if (kiln::testing::avx512_kernels_run()) {  // LeNet's pooled-conv fusions need those kernels
    EXPECT_NE(text.find("fused[conv2d,relu,max_pool2d]"), std::string::npos) << text;
    EXPECT_NE(
        text.find("fused[max_pool2d_grad,relu_grad,conv2d_backward_data,conv2d_backward_weights]"),
        std::string::npos)
        << text;
  } else {
    EXPECT_NE(text.find("fused["), std::string::npos) << text;
  }
  EXPECT_NE(kiln::testing::file_text(fs::path(compiled).concat(".dot")).find("digraph"),
            std::string::npos);
  fs::remove_all(dir);
  // Eager mode compiles nothing to dump: a clear error instead of an empty folder.
  c.mode = "eager";
  EXPECT_THROW(run_train(c, out), Error);
}

// --micro-batches reaches the compiled step (its log line says so) and the JSON summary; eager
// mode has no compiled step to split: a clear error.
TEST(TrainCommand, MicroBatchesRunInGraphModeOnly) {
  TrainConfig c;
  c.model = "mlp";
  c.steps = 3;
  c.mode = "graph";
  c.graph_kernel = true;
  c.micro_batches = 2;
  c.json = true;
  c.threads = 2;
  std::ostringstream out;
  ::testing::internal::CaptureStderr();
  run_train(c, out);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("compiled the training step in 2 micro-batches"), std::string::npos) << log;
  std::string text = out.str();
  nlohmann::json j = nlohmann::json::parse(text.substr(text.rfind('\n', text.size() - 2) + 1));
  EXPECT_EQ(j["micro_batches"], 2);
  c.mode = "eager";
  try {
    run_train(c, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--micro-batches 2 needs --mode graph"), std::string::npos)
        << e.what();
  }
}

// fp16 O2 takes MindSpore's default dynamic loss scale (2^24): the first steps overflow fp16 and
// are skipped while the scale backs off, and the JSON summary counts them.
TEST(TrainCommand, Fp16O2RunReportsTheStepsLossScalingSkipped) {
  TrainConfig c;
  c.steps = 20;
  c.schedule = "constant";
  c.amp_level = "O2";
  c.amp_dtype = "fp16";
  c.json = true;
  c.threads = 2;
  std::ostringstream out;
  TrainReport r = run_train(c, out);
  std::string text = out.str();
  nlohmann::json j = nlohmann::json::parse(text.substr(text.rfind('\n', text.size() - 2) + 1));
  EXPECT_EQ(j["amp_dtype"], "fp16");
  EXPECT_GT(r.skipped_steps, 0);
  EXPECT_LT(r.skipped_steps, 20);
  EXPECT_EQ(j["skipped_steps"].get<int64_t>(), r.skipped_steps);
}

// Lines "epoch: E step: S, loss is L" of epoch `epoch`, in order.
std::vector<std::string> loss_lines(const std::string& text, int epoch) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string prefix = "epoch: " + std::to_string(epoch) + " step: ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

// `kiln train --resume` continues an interrupted run with the same loss curve: same weights,
// optimizer state, step count and (shuffled) data order.
TEST(TrainCommand, ResumeContinuesTheSameLossCurve) {
  fs::path dir = fs::temp_directory_path() / ("kiln_cli_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainConfig base;
  base.epochs = 2;
  base.print_every = 1;
  base.schedule = "constant";
  base.threads = 2;

  TrainConfig whole = base;
  whole.steps = 937 + 40;  // all of epoch 1, the start of epoch 2
  std::ostringstream whole_out;
  run_train(whole, whole_out);

  TrainConfig first = base;
  first.steps = 937;
  first.ckpt_dir = dir.string();
  std::ostringstream first_out;
  run_train(first, first_out);
  fs::path ckpt = dir / "lenet-1_937.safetensors";
  ASSERT_TRUE(fs::exists(ckpt));

  TrainConfig second = base;
  second.steps = 40;
  second.resume = ckpt.string();
  std::ostringstream second_out;
  run_train(second, second_out);

  EXPECT_EQ(loss_lines(first_out.str(), 1), loss_lines(whole_out.str(), 1));
  std::vector<std::string> expected = loss_lines(whole_out.str(), 2);
  ASSERT_EQ(expected.size(), 40u);
  EXPECT_EQ(loss_lines(second_out.str(), 2), expected);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::cli::train_command_test
