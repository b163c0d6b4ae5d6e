#include "kiln/onnx/export.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "kiln/core/error.h"
#include "kiln/core/temporary_files.h"
#include "kiln/graph/tracer.h"
#include "kiln/onnx/detail/model_writer.h"
#include "kiln/ops/dispatch_chain.h"

namespace kiln::onnx {
namespace {

namespace fs = std::filesystem;

// The batch sizes a symbolic-batch export is traced at: two, so that a shape that holds the
// batch size anywhere but where the mappings write it generically shows as a difference.
constexpr int64_t kTraceBatch = 2, kCheckBatch = 3;

// Evaluation mode for the trace; the network's own mode back afterwards.
class EvaluationMode {
 public:
  explicit EvaluationMode(nn::Cell& network)
      : network_(network), was_training_(network.training()) {
    network_.set_train(false);
  }
  ~EvaluationMode() { network_.set_train(was_training_); }
  EvaluationMode(const EvaluationMode&) = delete;
  EvaluationMode& operator=(const EvaluationMode&) = delete;

 private:
  nn::Cell& network_;
  bool was_training_;
};

graph::Graph trace_inference(nn::Cell& network, const InputSpec& input, int64_t batch,
                             const std::string& input_name) {
  std::vector<int64_t> dims{batch};
  dims.insert(dims.end(), input.shape.begin(), input.shape.end());
  EvaluationMode evaluation(network);
  ops::NoGradGuard no_grad;
  graph::Graph g;
  graph::Tracer tracer(g);
  tracer.bind_state(network.state_and_names());
  Tensor x = tracer.input({Shape(std::move(dims)), input.dtype}, input_name);
  tracer.add_output(network.construct(x));
  tracer.finish();
  return g;
}

// Where two models differ first, in words.
std::string first_difference(const ::onnx::ModelProto& a, const ::onnx::ModelProto& b) {
  const ::onnx::GraphProto &ga = a.graph(), &gb = b.graph();
  for (int i = 0; i < std::min(ga.node_size(), gb.node_size()); ++i) {
    if (ga.node(i).SerializeAsString() != gb.node(i).SerializeAsString()) {
      return "node " + ga.node(i).name() + " (" + ga.node(i).op_type() + ")";
    }
  }
  if (ga.node_size() != gb.node_size()) return "the number of nodes";
  for (int i = 0; i < std::min(ga.initializer_size(), gb.initializer_size()); ++i) {
    if (ga.initializer(i).SerializeAsString() != gb.initializer(i).SerializeAsString()) {
      return "the constant " + ga.initializer(i).name();
    }
  }
  if (ga.initializer_size() != gb.initializer_size()) return "the number of constants";
  return "the output's shape";
}

std::string describe_value(const std::string& name, const ops::TensorMeta& meta, bool batch) {
  std::string text = name + " " + std::string(dtype_name(meta.dtype)) + "[";
  for (int k = 0; k < meta.shape.rank(); ++k) {
    if (k) text += ", ";
    text += k == 0 && batch ? "batch" : std::to_string(meta.shape[k]);
  }
  return text + "]";
}

[[noreturn]] void io_error(const std::string& path, const std::string& what, int error) {
  throw FileError("ONNX export: " + path + ": " + what + " (" + std::strerror(error) + ")");
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    throw FileError("ONNX export: " + path + ": cannot write: the folder " + folder.string() +
                    " does not exist");
  }
  if (fs::is_directory(target, ec)) {
    throw FileError("ONNX export: " + path + " is a folder; give the model's file name");
  }
  remove_stale_temporaries_of(path);  // left by exports that were killed
  const std::string temp = temporary_path(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error(path, "cannot create the temporary file " + temp, errno);
  auto fail = [&](const std::string& what) {
    const int error = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    io_error(path, what, error);
  };
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write " + temp);
    done += size_t(n);
  }
  if (::fsync(fd) != 0) fail("fsync of " + temp + " failed");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    io_error(path, "close of " + temp + " failed", error);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    io_error(path, "cannot rename " + temp + " into place", error);
  }
}

}  // namespace

std::string onnx_model_bytes(nn::Cell& network, const InputSpec& input,
                             const ExportOptions& options, ExportSummary* summary) {
  if (options.input_name.empty() || options.output_name.empty() ||
      options.input_name == options.output_name) {
    throw Error("ONNX export: the input and output need two different, non-empty names, got '" +
                options.input_name + "' and '" + options.output_name + "'");
  }
  if (options.batch_size < 0) {
    throw Error("ONNX export: batch_size must be 0 (symbolic) or a batch size, got " +
                std::to_string(options.batch_size));
  }
  const bool symbolic = options.batch_size == 0;
  const ModelSpec spec{.input_name = options.input_name,
                       .output_name = options.output_name,
                       .symbolic_batch = symbolic,
                       .graph_name = options.graph_name,
                       .doc_string = options.doc_string,
                       .metadata = options.metadata};
  const int64_t batch = symbolic ? kTraceBatch : options.batch_size;
  const graph::Graph traced = trace_inference(network, input, batch, options.input_name);
  ModelCounts counts;
  const ::onnx::ModelProto model = write_model(traced, spec, &counts);
  if (model.ByteSizeLong() > size_t(INT_MAX)) {
    throw Error("ONNX export: the model takes " + std::to_string(model.ByteSizeLong()) +
                " bytes; a protobuf file holds at most 2 GiB");
  }
  std::string bytes = model.SerializeAsString();
  if (symbolic) {
    const ::onnx::ModelProto other =
        write_model(trace_inference(network, input, kCheckBatch, options.input_name), spec);
    if (other.SerializeAsString() != bytes) {
      throw Error("ONNX export: traced at batch sizes " + std::to_string(kTraceBatch) + " and " +
                  std::to_string(kCheckBatch) + ", the network gives different models (first " +
                  first_difference(model, other) +
                  "): it uses its batch size beyond dimension 0, so no symbolic batch dimension "
                  "can hold it; export with a fixed batch size (ExportOptions::batch_size, "
                  "`kiln export --batch-size N`)");
    }
  }
  if (summary) {
    const graph::Value &in = traced.value(traced.inputs()[0]),
                       &out = traced.value(traced.outputs()[0]);
    summary->input = describe_value(options.input_name, in.meta, symbolic);
    summary->output = describe_value(
        options.output_name, out.meta,
        symbolic && out.meta.shape.rank() > 0 && out.meta.shape[0] == in.meta.shape[0]);
    summary->nodes = counts.nodes;
    summary->initializers = counts.initializers;
    summary->parameter_elements = counts.initializer_elements;
    summary->bytes = int64_t(bytes.size());
  }
  return bytes;
}

ExportSummary export_onnx(nn::Cell& network, const InputSpec& input, const std::string& path,
                          const ExportOptions& options) {
  ExportSummary summary;
  const std::string bytes = onnx_model_bytes(network, input, options, &summary);
  write_file_atomically(path, bytes);
  return summary;
}

}  // namespace kiln::onnx
