#include "kiln/record/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace kiln::record::crc32c_test {
namespace {

TEST(Crc32c, KnownVectors) {
  // The CRC-32C check value and RFC 3720 (iSCSI) test vectors.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32);
  for (int i = 0; i < 32; ++i) up[size_t(i)] = uint8_t(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, HardwareMatchesPortableAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(300);
  for (auto& b : data) b = uint8_t(rng());
  for (size_t offset = 0; offset < 9; ++offset)
    for (size_t n = 0; n + offset <= data.size(); n += 7)
      ASSERT_EQ(crc32c(data.data() + offset, n), crc32c_portable(data.data() + offset, n))
          << "offset " << offset << " length " << n;
}

TEST(Crc32c, ContinuesAcrossPieces) {
  std::string s = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t a = crc32c(s.data(), cut);
    EXPECT_EQ(crc32c(s.data() + cut, s.size() - cut, a), crc32c(s.data(), s.size()));
  }
  EXPECT_EQ(crc32c(s.data(), s.size()), 0x22620404u);
}

}  // namespace
}  // namespace kiln::record::crc32c_test
