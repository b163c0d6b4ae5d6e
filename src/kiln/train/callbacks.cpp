#include "kiln/train/callbacks.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "kiln/core/error.h"
#include "kiln/parallel/data_parallel.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/train/checkpoint.h"

namespace kiln::train {
namespace {

// Shortest text that reads back as the same float, as Python prints a numpy float32.
std::string format_loss(float loss) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, loss);
  return std::string(buf, ec == std::errc() ? end : buf);
}

std::ostream& stream_or_cout(std::ostream* out) {
  return out ? *out : std::cout;
}

}  // namespace

LossMonitor::LossMonitor(int64_t per_print_times, std::ostream* out)
    : per_print_times_(per_print_times), out_(out) {
  if (per_print_times < 0) {
    throw Error("LossMonitor: per_print_times must be >= 0, got " +
                std::to_string(per_print_times));
  }
}

void LossMonitor::on_train_begin(RunContext& ctx) {
  const CallbackParams& p = ctx.original_args();
  last_print_step_ = p.cur_step_num;
}

void LossMonitor::on_train_step_end(RunContext& ctx) {
  const CallbackParams& p = ctx.original_args();
  // The steps since the last call: a whole sink in sink mode, else one (a caller that keeps no
  // step_losses gives only net_outputs).
  const std::vector<float> last{p.net_outputs};
  const std::vector<float>& losses = p.step_losses.empty() ? last : p.step_losses;
  const int64_t steps = int64_t(losses.size());
  bool printed = false;
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t before_last = steps - 1 - k;
    const int64_t step = p.cur_step_num - before_last;
    const int64_t step_in_epoch = p.cur_step_in_epoch - before_last;
    const float loss = losses[size_t(k)];
    if (!std::isfinite(loss)) {
      throw Error("epoch: " + std::to_string(p.cur_epoch_num) +
                  " step: " + std::to_string(step_in_epoch) + ". Invalid loss " +
                  format_loss(loss) + ", terminating training.");
    }
    if (per_print_times_ == 0 || step - last_print_step_ < per_print_times_) continue;
    last_print_step_ = step;
    stream_or_cout(out_) << "epoch: " << p.cur_epoch_num << " step: " << step_in_epoch
                         << ", loss is " << format_loss(loss) << '\n';
    printed = true;
  }
  if (printed) stream_or_cout(out_).flush();
}

TimeMonitor::TimeMonitor(int64_t data_size, std::ostream* out) : data_size_(data_size), out_(out) {
  if (data_size < 0) throw Error("TimeMonitor: data_size must be >= 0");
}

void TimeMonitor::on_train_epoch_begin(RunContext&) {
  steps_ = 0;
  epoch_start_ = std::chrono::steady_clock::now();
}

void TimeMonitor::on_train_step_end(RunContext& ctx) {
  steps_ += ctx.original_args().steps_this_sink;
}

void TimeMonitor::on_train_epoch_end(RunContext&) {
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - epoch_start_)
          .count();
  int64_t steps = data_size_ > 0 ? data_size_ : steps_;
  char line[160];
  std::snprintf(line, sizeof line, "Train epoch time: %5.3f ms, per step time: %5.3f ms", ms,
                steps > 0 ? ms / double(steps) : 0.0);
  std::ostream& out = stream_or_cout(out_);
  out << line << '\n';
  out.flush();
}

ModelCheckpoint::ModelCheckpoint(std::string prefix, std::string directory, CheckpointConfig config)
    : prefix_(std::move(prefix)), directory_(std::move(directory)), config_(config) {
  if (prefix_.empty() || prefix_.find('/') != std::string::npos) {
    throw Error("ModelCheckpoint: prefix '" + prefix_ + "' must be a non-empty file name part");
  }
  if (config_.save_checkpoint_steps < 0 || config_.keep_checkpoint_max < 0) {
    throw Error("CheckpointConfig: save_checkpoint_steps and keep_checkpoint_max must be >= 0");
  }
}

void ModelCheckpoint::on_train_begin(RunContext& ctx) {
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  if (ec) throw FileError(directory_ + ": cannot create checkpoint folder: " + ec.message());
  remove_stale_checkpoint_temporaries(directory_);  // left by writers that were killed
  last_trigger_step_ = ctx.original_args().cur_step_num;
}

void ModelCheckpoint::on_train_step_end(RunContext& ctx) {
  const CallbackParams& p = ctx.original_args();
  if (config_.save_checkpoint_steps > 0 &&
      p.cur_step_num - last_trigger_step_ >= config_.save_checkpoint_steps) {
    last_trigger_step_ = p.cur_step_num;
    save(p);
  }
}

void ModelCheckpoint::on_train_epoch_end(RunContext& ctx) {
  if (config_.save_at_epoch_end) save(ctx.original_args());
}

void ModelCheckpoint::on_train_end(RunContext& ctx) {
  save(ctx.original_args());
}

void ModelCheckpoint::save(const CallbackParams& p) {
  if (p.cur_step_num == last_saved_step_ || !p.train_network) return;
  // Data parallel: every rank holds the same weights; rank 0 writes them.
  if (parallel::data_parallel_active() && comm::rank() != 0) return;
  last_saved_step_ = p.cur_step_num;
  SaveOptions options;
  options.optimizer = config_.save_optimizer_state ? p.optimizer : nullptr;
  options.metadata = config_.metadata;
  bool epoch_done = p.batch_num > 0 && p.cur_step_in_epoch >= p.batch_num;
  options.epoch = epoch_done ? p.cur_epoch_num : p.cur_epoch_num - 1;
  options.step_in_epoch = epoch_done ? 0 : p.cur_step_in_epoch;
  std::string path =
      (std::filesystem::path(directory_) / (prefix_ + "-" + std::to_string(p.cur_epoch_num) + "_" +
                                            std::to_string(p.cur_step_in_epoch) + ".safetensors"))
          .string();
  save_checkpoint(*p.train_network, path, options);
  latest_ = path;
  // SEMI_AUTO_PARALLEL: every rank gathered the split parameters; rank 0 wrote and prunes.
  if (parallel::semi_auto_active() && comm::rank() != 0) return;
  if (config_.keep_checkpoint_max > 0) {
    // Counts every checkpoint of this prefix in the folder, also those of earlier (restarted)
    // runs, so the folder never grows past the limit.
    std::vector<std::string> all = list_checkpoints(directory_, prefix_);
    for (size_t i = 0; i + size_t(config_.keep_checkpoint_max) < all.size(); ++i) {
      if (all[i] == path) continue;
      std::error_code ec;
      std::filesystem::remove(all[i], ec);  // best effort: a stale file is harmless
    }
  }
}

}  // namespace kiln::train
