#pragma once
// The outside tools the ONNX export tests run: Debian's python3-onnx checker
// (tests/onnx/check_onnx_models.py) and, where it is installed, onnxruntime-node
// (tests/onnx/run_onnx_models.js), found in the build tree's onnxruntime/ (where
// scripts/install_onnxruntime.sh puts it), in a node_modules/ above the tests or on NODE_PATH.
// Nothing here installs anything.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::testing {

struct ShellResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

inline ShellResult shell(const std::string& command) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return {};
  ShellResult r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The JSON object on the last line of `output` that starts one (the tools print one; a runtime's
// warnings may come before it).
inline nlohmann::json last_json_object(const std::string& output, const std::string& what) {
  size_t end = output.size();
  while (end > 0) {
    const size_t start = output.rfind('\n', end - 1);
    const size_t from = start == std::string::npos ? 0 : start + 1;
    const std::string line = output.substr(from, end - from);
    if (!line.empty() && line[0] == '{') return nlohmann::json::parse(line);
    if (start == std::string::npos) break;
    end = start;
  }
  throw std::runtime_error(what + " printed no JSON:\n" + output);
}

// The checker's verdict and a description of each model (check_onnx_models.py's "models").
inline nlohmann::json check_onnx_models(const std::vector<std::string>& paths) {
  std::string command =
      std::string(KILN_PYTHON) + " " + KILN_SOURCE_DIR + "/tests/onnx/check_onnx_models.py";
  for (const std::string& p : paths) command += " " + shell_quoted(p);
  const ShellResult r = shell(command);
  if (r.status != 0) throw std::runtime_error("the ONNX checker failed:\n" + r.output);
  return last_json_object(r.output, "the ONNX checker")["models"];
}

inline std::string onnx_runtime_command() {
  std::string node_path = std::string(KILN_BINARY_DIR) + "/onnxruntime/node_modules";
  if (const char* extra = ::getenv("NODE_PATH"); extra && *extra)
    node_path += ":" + std::string(extra);
  return "NODE_PATH=" + shell_quoted(node_path) + " node " + KILN_SOURCE_DIR +
         "/tests/onnx/run_onnx_models.js";
}

// Empty when onnxruntime-node can run models here; else why not, as a test's skip message.
inline std::string onnx_runtime_missing() {
  const ShellResult r = shell(onnx_runtime_command() + " --version");
  if (r.status == 0) return {};
  return "onnxruntime-node is not installed, so the check against an ONNX runtime is skipped: "
         "`npm install onnxruntime-node` in the repository (with --ignore-scripts where its "
         "optional CUDA download cannot reach the network), or `bash "
         "scripts/install_onnxruntime.sh` for the build tree";
}

// A tensor as run_onnx_models.js takes it.
inline nlohmann::json onnx_input(const Tensor& t) {
  nlohmann::json in;
  in["dims"] = t.shape().dims();
  if (t.dtype() == DType::i64) {
    in["dtype"] = "int64";
    in["data"] = t.to_vector<int64_t>();
  } else if (t.dtype() == DType::i32) {
    in["dtype"] = "int32";
    in["data"] = t.to_vector<int32_t>();
  } else {
    in["dtype"] = "float32";
    in["data"] = t.to_vector<float>();
  }
  return in;
}

// jobs: [{"model": PATH, "inputs": {NAME: onnx_input(...)}}]; returns run_onnx_models.js's
// "outputs", one object per job.
inline nlohmann::json run_onnx_models(const nlohmann::json& jobs, const std::string& folder) {
  const std::string file = folder + "/onnx_jobs.json";
  std::ofstream(file) << nlohmann::json{{"jobs", jobs}}.dump();
  const ShellResult r = shell(onnx_runtime_command() + " " + shell_quoted(file));
  if (r.status != 0) throw std::runtime_error("onnxruntime-node failed:\n" + r.output);
  return last_json_object(r.output, "onnxruntime-node")["outputs"];
}

// The largest |a - b| over |b|'s scale: max |a - b| / (1 + max |b|).
inline double scaled_max_difference(const std::vector<double>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / (1 + scale);
}

}  // namespace kiln::testing
