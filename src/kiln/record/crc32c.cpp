// Why our own CRC-32C: none of the Debian packages Kiln may depend on ships a maintained standalone
// CRC-32C (zlib has only the IEEE CRC-32, whose hardware support on x86 needs PCLMUL folding code),
// while x86 has had a CRC-32C instruction since SSE4.2 (2008). One instruction per 8 bytes runs at
// ~8-10 GB/s on one core, so checking every record on every read costs a few percent of a memcpy.
// A slicing-by-8 table version covers CPUs without SSE4.2 and is the reference in the tests.
#include "kiln/record/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define KILN_CRC32C_X86 1
#endif

namespace kiln::record {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
    t[0][i] = c;
  }
  for (int s = 1; s < 8; ++s)
    for (uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  return t;
}
constexpr Tables kTables = make_tables();

uint32_t crc32c_table(const uint8_t* p, size_t n, uint32_t crc) {
  crc = ~crc;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian host assumed (the whole format is little-endian)
    w ^= crc;
    crc = kTables[7][w & 0xff] ^ kTables[6][(w >> 8) & 0xff] ^ kTables[5][(w >> 16) & 0xff] ^
          kTables[4][(w >> 24) & 0xff] ^ kTables[3][(w >> 32) & 0xff] ^
          kTables[2][(w >> 40) & 0xff] ^ kTables[1][(w >> 48) & 0xff] ^ kTables[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#ifdef KILN_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = ~crc & 0xffffffffu;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool have_sse42() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return have;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
#ifdef KILN_CRC32C_X86
  if (have_sse42()) return crc32c_sse42(p, size, crc);
#endif
  return crc32c_table(p, size, crc);
}

bool crc32c_is_hardware() {
#ifdef KILN_CRC32C_X86
  return have_sse42();
#else
  return false;
#endif
}

// Exposed for the tests: the table version must agree with the hardware one.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  return crc32c_table(static_cast<const uint8_t*>(data), size, crc);
}

}  // namespace kiln::record
