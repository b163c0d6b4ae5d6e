#include "kiln/train/machine_model_file.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/train/safetensors.h"

namespace kiln::train {
namespace {

double positive_field(const nlohmann::json& j, const char* key, const std::filesystem::path& path) {
  if (!j.contains(key) || !j[key].is_number()) {
    throw FileError(path.string() + ": field '" + key + "' is missing or not a number");
  }
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || v <= 0) {
    throw FileError(detail::concat(path.string(), ": field '", key, "' is ", v,
                                   "; it must be a positive number"));
  }
  return v;
}

}  // namespace

std::filesystem::path comm_model_path() {
  std::filesystem::path dir;
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::filesystem::path(x) / "kiln";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::filesystem::path(h) / ".cache" / "kiln";
  } else {
    dir = std::filesystem::temp_directory_path() / "kiln";
  }
  return dir / "comm-model.json";
}

void save_comm_model(const parallel::CommCostModel& model, const std::string& description,
                     const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw FileError(path.parent_path().string() + ": cannot create it: " + ec.message());
  const nlohmann::json j = {{"alpha_s", model.alpha_s},
                            {"beta_s_per_byte", model.beta_s_per_byte},
                            {"description", description}};
  write_file_atomically(path.string(), j.dump(2) + "\n");
}

std::optional<std::pair<parallel::CommCostModel, std::string>> load_comm_model(
    const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw FileError(path.string() + ": not a JSON object (written by `kiln bench comm`?)");
  }
  parallel::CommCostModel model;
  model.alpha_s = positive_field(j, "alpha_s", path);
  model.beta_s_per_byte = positive_field(j, "beta_s_per_byte", path);
  std::string description = j.value("description", std::string());
  return std::make_pair(model, description);
}

parallel::MachineModel planning_machine_model(bool measure_ops) {
  // The compute rates once per process (about 50 ms); the file every time (it may be rewritten).
  // Only rank 0 reads (or measures) the peaks: the others would compete with it for the cores and
  // are sent its figures.
  parallel::MachineModel model;
  if (comm::rank() == 0) model = parallel::with_machine_peaks(model);
  if (measure_ops) model.op_times = parallel::process_op_times();
  if (auto saved = load_comm_model()) {
    model.comm = saved->first;
    model.comm_source = "measured by `kiln bench comm`: " + saved->second;
  } else {
    model.comm_source = "defaults (run `kiln bench comm` to measure them)";
  }
  if (comm::size() > 1) {
    // Every rank plans with rank 0's figures. The communicator has no f64: the doubles' bytes
    // travel as 64-bit integers, untouched.
    static_assert(sizeof(double) == sizeof(int64_t));
    double figures[5] = {model.flops_per_s, model.bytes_per_s, model.launch_s, model.comm.alpha_s,
                         model.comm.beta_s_per_byte};
    comm::broadcast(figures, 5, DType::i64, 0);
    model.flops_per_s = figures[0];
    model.bytes_per_s = figures[1];
    model.launch_s = figures[2];
    model.comm.alpha_s = figures[3];
    model.comm.beta_s_per_byte = figures[4];
    model.compute_source = "rank 0's " + model.compute_source;
  }
  return model;
}

}  // namespace kiln::train
