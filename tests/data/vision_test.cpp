// Vision transforms against hand-computed results.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "kiln/core/error.h"
#include "kiln/data/transforms.h"
#include "kiln/data/vision.h"

namespace kiln::data::vision::vision_test {
namespace {

Tensor u8(std::vector<uint8_t> v, Shape s) {
  return Tensor::from_vector(v, s);
}
Tensor f32(std::vector<float> v, Shape s) {
  return Tensor::from_vector(v, s);
}

Tensor run(const TensorTransform& t, const Tensor& x, uint64_t seed = 1) {
  RowRng rng(seed);
  return t.apply_one(x, rng);
}

TEST(Vision, ResizeBilinearUpAndDown) {
  // Half-pixel centers: 1x2 -> 1x4 samples at -0.25 (clamped), 0.25, 0.75, 1.25 (clamped).
  Tensor up = run(Resize({1, 4}), u8({0, 100}, {1, 2, 1}));
  EXPECT_EQ(up.shape(), (Shape{1, 4, 1}));
  EXPECT_EQ(up.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 25, 75, 100}));
  Tensor down = run(Resize({1, 2}), f32({0, 10, 20, 30}, {1, 4}));
  EXPECT_EQ(down.shape(), (Shape{1, 2}));
  EXPECT_EQ(down.to_vector<float>(), (std::vector<float>{5, 25}));
  // Vertical too: 2x1 -> 4x1.
  EXPECT_EQ(run(Resize({4, 1}), f32({0, 8}, {2, 1})).to_vector<float>(),
            (std::vector<float>{0, 2, 6, 8}));
  // Channels are independent.
  Tensor rgb = run(Resize({1, 4}), u8({0, 200, 100, 0}, {1, 2, 2}));
  EXPECT_EQ(rgb.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 200, 25, 150, 75, 50, 100, 0}));
}

TEST(Vision, ResizeNearestAndShorterEdge) {
  EXPECT_EQ(run(Resize({1, 2}, Inter::nearest), u8({1, 2, 3, 4}, {1, 4})).to_vector<uint8_t>(),
            (std::vector<uint8_t>{1, 3}));
  EXPECT_EQ(run(Resize({1, 4}, Inter::nearest), u8({1, 2}, {1, 2})).to_vector<uint8_t>(),
            (std::vector<uint8_t>{1, 1, 2, 2}));
  EXPECT_EQ(run(Resize({2}), Tensor::zeros(Shape{4, 8, 3}, DType::u8)).shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(run(Resize({3}), Tensor::zeros(Shape{12, 6}, DType::f32)).shape(), (Shape{6, 3}));
  EXPECT_THROW(Resize({0, 2}), Error);
  EXPECT_THROW(run(Resize({2, 2}), Tensor::zeros(Shape{4}, DType::u8)), ShapeError);
}

TEST(Vision, CenterCropAndPadding) {
  std::vector<uint8_t> v(16);
  for (int i = 0; i < 16; ++i) v[size_t(i)] = uint8_t(i);
  Tensor img = u8(v, {4, 4});
  EXPECT_EQ(run(CenterCrop({2, 2}), img).to_vector<uint8_t>(), (std::vector<uint8_t>{5, 6, 9, 10}));
  Tensor big = run(CenterCrop({6}), u8({1, 2, 3, 4}, {2, 2, 1}));
  EXPECT_EQ(big.shape(), (Shape{6, 6, 1}));
  std::vector<uint8_t> want(36, 0);
  want[14] = 1, want[15] = 2, want[20] = 3, want[21] = 4;
  EXPECT_EQ(big.to_vector<uint8_t>(), want);
}

TEST(Vision, RandomCropPadsAndCoversEveryOffset) {
  // Padding 1 on every side and a crop of the padded size: deterministic, a zero border.
  Tensor img = u8({1, 2, 3, 4}, {2, 2});
  Tensor padded = run(RandomCrop({4, 4}, {1}), img);
  EXPECT_EQ(padded.to_vector<uint8_t>(),
            (std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0}));
  // 1x1 crops: every pixel is reachable, and the seed decides which.
  std::set<uint8_t> seen;
  for (uint64_t s = 0; s < 200; ++s) seen.insert(run(RandomCrop({1, 1}), img, s).item<uint8_t>());
  EXPECT_EQ(seen, (std::set<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(run(RandomCrop({1, 1}), img, 5).item<uint8_t>(),
            run(RandomCrop({1, 1}), img, 5).item<uint8_t>());
  // Asymmetric padding {left, top, right, bottom} and fill value.
  // Built with push_back: GCC 12.2 at -O2 -march=native (SLP vectorizer) miscompiles a braced
  // temporary {1, 1, 0, 0} of int64_t into {1, 1, 1, 1}.
  std::vector<int64_t> padding;
  for (int64_t p : {1, 1, 0}) padding.push_back(p);
  padding.push_back(0);
  Tensor asym = run(RandomCrop({3, 3}, padding, false, 9), img);
  EXPECT_EQ(asym.to_vector<uint8_t>(), (std::vector<uint8_t>{9, 9, 9, 9, 1, 2, 9, 3, 4}));
  EXPECT_THROW(run(RandomCrop({3, 3}), img), ShapeError);
  EXPECT_EQ(run(RandomCrop({3, 3}, {}, true), img).shape(), (Shape{3, 3}));
}

TEST(Vision, RandomResizedCrop) {
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[size_t(i)] = float(i);
  Tensor img = f32(v, {8, 8, 1});
  // Scale 1 and ratio 1 on a square image: the whole image, resized to the same size.
  Tensor same = run(RandomResizedCrop({8, 8}, {1, 1}, {1, 1}), img);
  EXPECT_EQ(same.to_vector<float>(), v);
  Tensor out = run(RandomResizedCrop({4, 6}), img, 3);
  EXPECT_EQ(out.shape(), (Shape{4, 6, 1}));
  for (float x : out.to_vector<float>()) {
    EXPECT_GE(x, 0.f);
    EXPECT_LE(x, 63.f);
  }
  EXPECT_THROW(RandomResizedCrop({4}, {0.5, 0.1}), Error);
}

TEST(Vision, Flips) {
  Tensor img = u8({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(run(RandomHorizontalFlip(1.0), img).to_vector<uint8_t>(),
            (std::vector<uint8_t>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(run(RandomVerticalFlip(1.0), img).to_vector<uint8_t>(),
            (std::vector<uint8_t>{4, 5, 6, 1, 2, 3}));
  EXPECT_EQ(run(RandomHorizontalFlip(0.0), img).to_vector<uint8_t>(), img.to_vector<uint8_t>());
  // Pixels keep their channels.
  Tensor two = f32({1, 10, 2, 20}, {1, 2, 2});
  EXPECT_EQ(run(RandomHorizontalFlip(1.0), two).to_vector<float>(),
            (std::vector<float>{2, 20, 1, 10}));
  // prob 0.5 flips about half the rows.
  int flipped = 0;
  for (uint64_t s = 0; s < 1000; ++s)
    flipped += run(RandomHorizontalFlip(), img, s).to_vector<uint8_t>()[0] == 3;
  EXPECT_GT(flipped, 400);
  EXPECT_LT(flipped, 600);
  EXPECT_THROW(RandomVerticalFlip(1.5), Error);
}

TEST(Vision, RotationInQuarterTurns) {
  Tensor img = u8({1, 2, 3, 4, 5, 6}, {2, 3});
  // 90° counter-clockwise, expanded: the right column becomes the top row.
  Tensor r90 = run(RandomRotation({90, 90}, Inter::nearest, true), img);
  EXPECT_EQ(r90.shape(), (Shape{3, 2}));
  EXPECT_EQ(r90.to_vector<uint8_t>(), (std::vector<uint8_t>{3, 6, 2, 5, 1, 4}));
  Tensor r270 = run(RandomRotation({-90, -90}, Inter::bilinear, true), img);
  EXPECT_EQ(r270.to_vector<uint8_t>(), (std::vector<uint8_t>{4, 1, 5, 2, 6, 3}));
  Tensor r180 = run(RandomRotation({180, 180}), img);
  EXPECT_EQ(r180.to_vector<uint8_t>(), (std::vector<uint8_t>{6, 5, 4, 3, 2, 1}));
  // Square, not expanded, with channels.
  Tensor sq = u8({1, 11, 2, 12, 3, 13, 4, 14}, {2, 2, 2});
  EXPECT_EQ(run(RandomRotation({90, 90}), sq).to_vector<uint8_t>(),
            (std::vector<uint8_t>{2, 12, 4, 14, 1, 11, 3, 13}));
  // 45° on a 3x3: the center stays, corners of the output fall outside and get the fill value.
  Tensor center = u8({0, 0, 0, 0, 7, 0, 0, 0, 0}, {3, 3});
  Tensor r45 = run(RandomRotation({45, 45}, Inter::nearest, false, 200), center);
  EXPECT_EQ(r45.to_vector<uint8_t>()[4], 7);
  Tensor r45big = run(RandomRotation({45, 45}, Inter::nearest, false, 200),
                      Tensor::zeros(Shape{5, 5}, DType::u8));
  EXPECT_EQ(r45big.to_vector<uint8_t>()[0], 200);
}

TEST(Vision, RescaleNormalize) {
  Tensor x = u8({0, 51, 255}, {1, 3});
  auto r = run(Rescale(1.0 / 255, -0.5), x).to_vector<float>();
  EXPECT_FLOAT_EQ(r[0], -0.5f);
  EXPECT_FLOAT_EQ(r[1], 0.2f - 0.5f);
  EXPECT_FLOAT_EQ(r[2], 0.5f);
  EXPECT_EQ(run(Rescale(2, 1), f32({1, 2}, {2})).to_vector<float>(), (std::vector<float>{3, 5}));
  // HWC, 2 channels: ((x - mean[c]) / std[c]).
  Tensor img = f32({1, 10, 3, 30}, {1, 2, 2});
  auto n = run(Normalize({1, 10}, {2, 4}), img).to_vector<float>();
  EXPECT_EQ(n, (std::vector<float>{0, 0, 1, 5}));
  // CHW.
  Tensor chw = u8({1, 3, 10, 30}, {2, 1, 2});
  EXPECT_EQ(run(Normalize({1, 10}, {2, 4}, false), chw).to_vector<float>(),
            (std::vector<float>{0, 1, 0, 5}));
  EXPECT_THROW(run(Normalize({1, 2, 3}, {1, 1, 1}), img), ShapeError);
  EXPECT_THROW(Normalize({1}, {0}), Error);
}

TEST(Vision, HWC2CHWAndTypeCast) {
  Tensor img = u8({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
  Tensor chw = run(HWC2CHW(), img);
  EXPECT_EQ(chw.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(chw.to_vector<uint8_t>(),
            (std::vector<uint8_t>{1, 4, 7, 10, 2, 5, 8, 11, 3, 6, 9, 12}));
  Tensor gray = run(HWC2CHW(), f32({1, 2, 3, 4}, {2, 2, 1}));
  EXPECT_EQ(gray.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(gray.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  Tensor cast = run(TypeCast(DType::f32), u8({7, 255}, {2}));
  EXPECT_EQ(cast.dtype(), DType::f32);
  EXPECT_EQ(cast.to_vector<float>(), (std::vector<float>{7, 255}));
}

TEST(Vision, OneHotAndCompose) {
  Tensor hot = run(transforms::OneHot(4), Tensor::scalar(2, DType::i32));
  EXPECT_EQ(hot.shape(), (Shape{4}));
  EXPECT_EQ(hot.dtype(), DType::i32);
  EXPECT_EQ(hot.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 1, 0}));
  Tensor hot2 = run(transforms::OneHot(3, DType::f32),
                    Tensor::from_vector(std::vector<int32_t>{0, 2}, Shape{2}));
  EXPECT_EQ(hot2.to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 0, 1}));
  EXPECT_THROW(run(transforms::OneHot(3), Tensor::scalar(3, DType::i32)), Error);
  transforms::Compose c({Rescale(2, 0), HWC2CHW()});
  EXPECT_EQ(c.name(), "Compose[Rescale,HWC2CHW]");
  std::vector<Tensor> cols{u8({1, 2}, {1, 1, 2})};
  RowRng rng(0);
  c.apply(cols, rng);
  EXPECT_EQ(cols[0].shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(cols[0].to_vector<float>(), (std::vector<float>{2, 4}));
}

TEST(Vision, DecodePngAndJpeg) {
  std::vector<uint8_t> px(12 * 10);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 2);
  Tensor img = u8(px, {12, 10, 1});
  std::vector<uint8_t> png = encode_png(img);
  EXPECT_EQ(detect_format(png.data(), png.size()), ImageFormat::png);
  Tensor bytes = Tensor::from_vector(png, Shape{int64_t(png.size())});
  Tensor gray = run(Decode(false), bytes);
  EXPECT_EQ(gray.shape(), (Shape{12, 10, 1}));
  EXPECT_EQ(gray.to_vector<uint8_t>(), px);
  Tensor rgb = run(Decode(), bytes);
  EXPECT_EQ(rgb.shape(), (Shape{12, 10, 3}));
  EXPECT_EQ(rgb.to_vector<uint8_t>()[3 * 7 + 1], px[7]);
  // JPEG is lossy: close, not equal.
  std::vector<uint8_t> flat(16 * 16 * 3, 120);
  std::vector<uint8_t> jpg = encode_jpeg(u8(flat, {16, 16, 3}), 95);
  Tensor dj = run(Decode(), Tensor::from_vector(jpg, Shape{int64_t(jpg.size())}));
  EXPECT_EQ(dj.shape(), (Shape{16, 16, 3}));
  for (uint8_t v : dj.to_vector<uint8_t>()) EXPECT_NEAR(int(v), 120, 3);
  // Corrupt data: errors that say what is wrong.
  std::vector<uint8_t> cut(jpg.begin(), jpg.begin() + 20);
  EXPECT_THROW(run(Decode(), Tensor::from_vector(cut, Shape{20})), Error);
  std::vector<uint8_t> junk = {1, 2, 3, 4, 5};
  try {
    run(Decode(), Tensor::from_vector(junk, Shape{5}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a JPEG or PNG"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> bad_png = png;
  bad_png.resize(40);
  EXPECT_THROW(run(Decode(), Tensor::from_vector(bad_png, Shape{40})), Error);
  EXPECT_THROW(run(Decode(), img), ShapeError);  // already decoded
}

}  // namespace
}  // namespace kiln::data::vision::vision_test
