// The table of ONNX mappings: every op has a row, every mapping is exported by a case below and
// accepted by the ONNX checker, each writes only the ONNX op types its row names, and an ONNX
// runtime computes what Kiln computes, at batch sizes other than the traced one.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "kiln/onnx/export.h"
#include "kiln/onnx/op_mappings.h"
#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/functional.h"
#include "testing/onnx_tools.h"

namespace kiln::onnx::op_mappings_test {
namespace {

namespace fs = std::filesystem;
using ops::OpKind;

Tensor random_tensor(const Shape& shape, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u{float(lo), float(hi)};
  std::vector<float> v(size_t(shape.numel()));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector(v, shape);
}

Tensor random_ids(const Shape& shape, int64_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> u{0, classes - 1};
  std::vector<int64_t> v(size_t(shape.numel()));
  for (int64_t& x : v) x = u(rng);
  return Tensor::from_vector(v, shape);
}

// A network written as a function, with named parameters.
class FunctionCell : public nn::Cell {
 public:
  using Forward = std::function<Tensor(FunctionCell&, const Tensor&)>;
  explicit FunctionCell(Forward forward) : Cell("FunctionCell"), forward_(std::move(forward)) {}
  Tensor construct(const Tensor& x) override { return forward_(*this, x); }
  void add(const std::string& name, Tensor value) {
    params_[name] = register_parameter(name, value);
  }
  const Tensor& operator[](const std::string& name) const { return params_.at(name); }

 private:
  Forward forward_;
  std::map<std::string, Tensor> params_;
};

// [B, ...] -> [B, n]; results of several shapes then concatenate into one output.
Tensor flat(const Tensor& t) {
  return ops::reshape(t, {t.dim(0), t.numel() / t.dim(0)});
}
Tensor flat_concat(const std::vector<Tensor>& parts) {
  std::vector<Tensor> flats;
  for (const Tensor& p : parts) flats.push_back(flat(p));
  return ops::concat(flats, 1);
}

struct OpCase {
  std::string name;
  InputSpec input;  // one sample
  std::function<void(FunctionCell&)> parameters;
  FunctionCell::Forward forward;
  int64_t id_classes = 0;  // > 0: the input is token ids below this
};

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  cases.push_back({"arithmetic",
                   {{4, 6}},
                   [](FunctionCell& c) {
                     c.add("a", random_tensor({6}, -1, 1, 1));
                     c.add("b", random_tensor({4, 6}, -1, 1, 2));
                     c.add("e", random_tensor({6}, 0.5, 2, 3));
                   },
                   [](FunctionCell& c, const Tensor& x) {
                     Tensor y = ops::mul(ops::sub(ops::add(x, c["a"]), c["b"]), c["a"]);
                     y = ops::div(y, ops::add_scalar(ops::abs(c["b"]), 1.0));
                     y = ops::minimum(ops::maximum(y, ops::mul_scalar(x, 0.5)),
                                      ops::add_scalar(x, 1.0));
                     return ops::pow(ops::add_scalar(ops::abs(y), 0.5), c["e"]);
                   }});
  cases.push_back({"unary", {{4, 6}}, {}, [](FunctionCell&, const Tensor& x) {
                     const Tensor a = ops::abs(x);
                     const std::vector<Tensor> parts = {ops::neg(x),
                                                        ops::exp(ops::mul_scalar(x, 0.3)),
                                                        ops::log(ops::add_scalar(a, 0.1)),
                                                        ops::sqrt(a),
                                                        ops::rsqrt(ops::add_scalar(a, 0.2)),
                                                        ops::relu(x),
                                                        ops::gelu(x),
                                                        ops::sigmoid(x),
                                                        ops::tanh(x),
                                                        ops::square(x),
                                                        ops::pow_scalar(a, 1.5),
                                                        ops::sign(x)};
                     return flat_concat(parts);
                   }});
  cases.push_back({"compare_and_where", {{4, 6}}, {}, [](FunctionCell&, const Tensor& x) {
                     const Tensor kept = ops::compare_equal(ops::relu(x), x);  // 1 where x >= 0
                     return ops::where_positive(ops::add_scalar(x, -0.2), ops::mul(kept, x),
                                                ops::neg(x));
                   }});
  cases.push_back({"reductions", {{4, 6}}, {}, [](FunctionCell&, const Tensor& x) {
                     Tensor y = ops::add(ops::sum(x, {1}, true), ops::mean(x, {-1}, true));
                     y = ops::add(y, ops::max(x, {2}, true));
                     // Over every dimension, the batch too.
                     return ops::add(flat_concat({y, ops::max(x, {1})}), ops::mean(x));
                   }});
  cases.push_back(
      {"argmax", {{4, 6}}, {}, [](FunctionCell&, const Tensor& x) { return ops::argmax(x, 2); }});
  cases.push_back(
      {"broadcasting", {{4, 6}}, {}, [](FunctionCell&, const Tensor& x) {
         const Tensor rows = ops::sum_to_shape(x, {x.dim(0), 1, 6});
         const Tensor columns = ops::sum_to_shape(x, {6});  // the batch too
         return ops::add(ops::broadcast_to(ops::add(rows, columns), {x.dim(0), 4, 6}), x);
       }});
  cases.push_back({"shapes", {{4, 6}}, {}, [](FunctionCell&, const Tensor& x) {
                     const Tensor wide = ops::concat({x, ops::mul_scalar(x, 2.0)}, 1);  // [B,8,6]
                     const Tensor ids = ops::argmax(x, 2);                              // [B,4]
                     const std::vector<Tensor> parts = {
                         ops::transpose(x, {0, 2, 1}),
                         ops::contiguous(ops::transpose(x, {0, 2, 1})),
                         ops::slice(wide, 1, 1, 7, 2),
                         ops::slice(x, 0, 0, x.dim(0)),  // the whole batch: open end
                         ops::slice(x, 2, -4, 100),
                         ops::one_hot(ops::cast(ids, DType::i32), 6),
                         ops::cast(ids, DType::f32),
                         ops::cast(ops::cast(x, DType::f16), DType::f32),
                     };
                     return flat_concat(parts);
                   }});
  cases.push_back({"softmax", {{4, 6}}, {}, [](FunctionCell&, const Tensor& x) {
                     return flat_concat({ops::softmax(x, -1), ops::log_softmax(x, 1)});
                   }});
  cases.push_back({"causal_mask", {{2, 3, 5}}, {}, [](FunctionCell&, const Tensor& x) {
                     // T = 3 queries over S = 5 keys: query i sees keys j <= i + 2.
                     const Tensor inf = ops::softmax(
                         ops::causal_mask(x, -std::numeric_limits<double>::infinity()));
                     return flat_concat({inf, ops::causal_mask(x, -7.5)});
                   }});
  cases.push_back({"matmul",
                   {{3, 4, 5}},
                   [](FunctionCell& c) {
                     c.add("w", random_tensor({5, 6}, -1, 1, 4));
                     c.add("v", random_tensor({6, 5}, -1, 1, 5));
                   },
                   [](FunctionCell& c, const Tensor& x) {
                     return flat_concat({ops::matmul(x, c["w"]),
                                         ops::matmul(x, c["v"], false, true),
                                         ops::matmul(x, x, true, false)});
                   }});
  cases.push_back(
      {"convolution",
       {{4, 9, 9}},
       [](FunctionCell& c) {
         c.add("grouped", random_tensor({6, 2, 3, 3}, -0.5, 0.5, 6));
         c.add("bias", random_tensor({6}, -0.5, 0.5, 7));
         c.add("dilated", random_tensor({3, 4, 3, 3}, -0.5, 0.5, 8));
       },
       [](FunctionCell& c, const Tensor& x) {
         const Tensor a = ops::conv2d(x, c["grouped"], c["bias"],
                                      {.stride = {2, 2}, .padding = {1, 1}, .groups = 2});
         const Tensor b = ops::conv2d(x, c["dilated"], {}, {.padding = {2, 1}, .dilation = {2, 2}});
         return flat_concat({a, b});
       }});
  cases.push_back(
      {"pooling", {{3, 9, 9}}, {}, [](FunctionCell&, const Tensor& x) {
         return flat_concat(
             {ops::max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}),
              ops::avg_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}),
              ops::avg_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}})});
       }});
  cases.push_back({"normalization",
                   {{4, 5, 5}},
                   [](FunctionCell& c) {
                     c.add("gamma", random_tensor({4}, 0.5, 1.5, 9));
                     c.add("beta", random_tensor({4}, -0.5, 0.5, 10));
                     c.add("mean", random_tensor({4}, -0.5, 0.5, 11));
                     c.add("variance", random_tensor({4}, 0.5, 2, 12));
                     c.add("ln_gamma", random_tensor({5, 5}, 0.5, 1.5, 13));
                     c.add("ln_beta", random_tensor({5, 5}, -0.5, 0.5, 14));
                   },
                   [](FunctionCell& c, const Tensor& x) {
                     const Tensor bn = ops::batch_norm(x, c["gamma"], c["beta"], c["mean"],
                                                       c["variance"], false, 0.9, 1e-3)[0];
                     const Tensor ln = ops::layer_norm(x, c["ln_gamma"], c["ln_beta"], 1e-5)[0];
                     return flat_concat({bn, ln, ops::dropout(x, 0.3, false)[0]});
                   }});
  cases.push_back(
      {"embedding",
       {{7}, DType::i64},
       [](FunctionCell& c) {
         c.add("table", random_tensor({10, 4}, -1, 1, 15));
       },
       [](FunctionCell& c, const Tensor& ids) { return ops::embedding(c["table"], ids); },
       10});
  return cases;
}

class OnnxOpMappings : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "kiln-onnx-ops-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    for (OpCase& c : op_cases()) {
      auto cell = std::make_shared<FunctionCell>(c.forward);
      if (c.parameters) c.parameters(*cell);
      const std::string path = (dir_ / (c.name + ".onnx")).string();
      export_onnx(*cell, c.input, path, {.input_name = "x", .output_name = "y"});
      cases_.push_back({c, cell, path});
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Exported {
    OpCase spec;
    std::shared_ptr<FunctionCell> cell;
    std::string path;
  };
  fs::path dir_;
  std::vector<Exported> cases_;
};

TEST(OnnxOpMappingTable, EveryOpHasItsRowWithAMappingOrAReason) {
  ASSERT_EQ(op_mappings().size(), ops::kNumOps);
  for (size_t i = 0; i < ops::kNumOps; ++i) {
    const OpMapping& m = op_mapping(OpKind(i));
    const std::string name(ops::op_name(OpKind(i)));
    EXPECT_EQ(m.op, OpKind(i)) << name;
    if (m.emit) {
      EXPECT_FALSE(m.onnx_ops.empty()) << name;
      EXPECT_EQ(m.no_mapping_reason, nullptr) << name;
    } else {
      ASSERT_NE(m.no_mapping_reason, nullptr) << name;
      EXPECT_GT(std::string(m.no_mapping_reason).size(), 20u) << name;
    }
  }
}

TEST_F(OnnxOpMappings, CheckerAcceptsEveryMappingAndEachWritesTheOpTypesItsRowNames) {
  std::vector<std::string> paths;
  for (const Exported& e : cases_) paths.push_back(e.path);
  const nlohmann::json models = kiln::testing::check_onnx_models(paths);
  ASSERT_EQ(models.size(), cases_.size());
  std::set<OpKind> exported;
  for (size_t k = 0; k < cases_.size(); ++k) {
    const nlohmann::json& m = models[k];
    ASSERT_TRUE(m["ok"].get<bool>()) << cases_[k].spec.name << ": " << m["error"];
    EXPECT_EQ(m["opset"], kOpsetVersion);
    EXPECT_EQ(m["inputs"][0]["dims"][0], "batch") << cases_[k].spec.name;
    for (const nlohmann::json& node : m["nodes"]) {
      const OpKind op = ops::op_by_name(node["doc"].get<std::string>());
      exported.insert(op);
      const std::string type = node["op_type"];
      std::stringstream listed(std::string(op_mapping(op).onnx_ops));
      std::set<std::string> types;
      for (std::string t; std::getline(listed >> std::ws, t, ',');) types.insert(t);
      EXPECT_TRUE(types.count(type))
          << ops::op_name(op) << " wrote " << type << ", its row says " << op_mapping(op).onnx_ops;
    }
  }
  // A mapping that no case exports is untested: add a case when adding a mapping.
  for (const OpMapping& m : op_mappings()) {
    if (m.emit) {
      EXPECT_TRUE(exported.count(m.op)) << ops::op_name(m.op) << " is never exported";
    }
  }
}

TEST_F(OnnxOpMappings, RuntimeComputesWhatKilnComputesAtOtherBatchSizes) {
  const std::string missing = kiln::testing::onnx_runtime_missing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  nlohmann::json jobs = nlohmann::json::array();
  std::vector<Tensor> expected;
  ops::NoGradGuard no_grad;
  for (const Exported& e : cases_) {
    e.cell->set_train(false);
    for (int64_t batch : {1, 5}) {
      std::vector<int64_t> dims{batch};
      dims.insert(dims.end(), e.spec.input.shape.begin(), e.spec.input.shape.end());
      const uint32_t seed = uint32_t(100 * batch + jobs.size());
      const Tensor x = e.spec.id_classes > 0 ? random_ids(Shape(dims), e.spec.id_classes, seed)
                                             : random_tensor(Shape(dims), -2, 2, seed);
      expected.push_back(e.cell->construct(x).contiguous());
      jobs.push_back({{"model", e.path}, {"inputs", {{"x", kiln::testing::onnx_input(x)}}}});
    }
  }
  const nlohmann::json outputs = kiln::testing::run_onnx_models(jobs, dir_.string());
  ASSERT_EQ(outputs.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    const std::string name = cases_[k / 2].spec.name + " at batch " + (k % 2 ? "5" : "1");
    const nlohmann::json& y = outputs[k]["y"];
    EXPECT_EQ(y["dims"].get<std::vector<int64_t>>(), expected[k].shape().dims()) << name;
    const std::vector<double> got = y["data"].get<std::vector<double>>();
    if (expected[k].dtype() == DType::i64) {
      const std::vector<int64_t> want = expected[k].to_vector<int64_t>();
      EXPECT_EQ(std::vector<int64_t>(got.begin(), got.end()), want) << name;
      continue;
    }
    const double diff = kiln::testing::scaled_max_difference(got, expected[k].to_vector<float>());
    EXPECT_LT(diff, 2e-5) << name;
  }
}

}  // namespace
}  // namespace kiln::onnx::op_mappings_test
