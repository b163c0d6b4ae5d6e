#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "kiln/core/shape.h"

namespace kiln::shape_test {
namespace {

TEST(Shape, BasicsAndStrides) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(s.dim(-1), 4);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(contiguous_strides(s), (Strides{12, 4, 1}));
  EXPECT_EQ(channels_last_strides(Shape{2, 3, 4, 5}), (Strides{60, 1, 15, 3}));
  EXPECT_THROW(s.normalize_axis(3), ShapeError);
  EXPECT_EQ(s.normalize_axis(-3), 0);
}

TEST(Shape, BroadcastRules) {
  EXPECT_EQ(broadcast_shapes({3, 1}, {1, 4}, "t"), (Shape{3, 4}));
  EXPECT_EQ(broadcast_shapes({2, 3, 4}, {4}, "t"), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {5}, "t"), (Shape{5}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 3}, "t"), (Shape{0, 3}));
  try {
    broadcast_shapes({2, 3}, {4}, "myop");
    FAIL();
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("myop:", 0), 0u) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kiln::shape_test
