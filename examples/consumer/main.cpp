// Builds zoo models and a small Sequential network through an installed Kiln and checks the
// shapes they produce; exits 1 with a message on any mismatch.
#include <kiln/kiln.h>

#include <cstdint>
#include <iostream>
#include <vector>

namespace {

int failures = 0;

void expect_shape(const std::string& what, const kiln::Tensor& t, const kiln::Shape& expected) {
  if (t.shape() != expected) {
    std::cerr << what << ": got " << kiln::describe(t) << ", expected [";
    for (int i = 0; i < expected.rank(); ++i) std::cerr << (i ? ", " : "") << expected[i];
    std::cerr << "]\n";
    ++failures;
  }
}

// Braced int64 lists are how Kiln takes shapes and paddings; GCC 12 with -march=native and the
// SLP vectorizer turned {1, 1, 0, 0} into {1, 1, 1, 1} until Kiln::kiln carried the fix.
std::vector<int64_t> braced(const std::vector<int64_t>& v) {
  return v;
}

}  // namespace

int main() {
  if (braced({1, 1, 0, 0}) != std::vector<int64_t>{1, 1, 0, 0}) {
    std::cerr << "braced int64 list miscompiled\n";
    ++failures;
  }
  kiln::ops::NoGradGuard no_grad;
  auto lenet = kiln::models::create(
      "lenet", {.num_classes = 3, .in_channels = 3, .image_height = 32, .image_width = 32});
  lenet->set_train(false);
  expect_shape("lenet", lenet->construct(kiln::Tensor::zeros({2, 3, 32, 32})), {2, 3});
  auto resnet = kiln::models::create("resnet20");
  resnet->set_train(false);
  expect_shape("resnet20", resnet->construct(kiln::Tensor::zeros({4, 1, 28, 28})), {4, 10});

  using namespace kiln::nn;
  auto net = std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
      std::make_shared<Conv2d>(1, 4, 3, Conv2dOptions{.pad_mode = "pad", .padding = {1, 0}}),
      std::make_shared<ReLU>(), std::make_shared<Flatten>(),
      std::make_shared<Dense>(4 * 8 * 6, 5)});
  expect_shape("conv+dense", net->construct(kiln::Tensor::zeros({2, 1, 8, 8})), {2, 5});
  if (failures == 0) std::cout << "kiln consumer: all shapes as expected\n";
  return failures == 0 ? 0 : 1;
}
