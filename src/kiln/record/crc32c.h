#pragma once
// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected), the checksum of every record, section
// and header of a record file. Same parameters as iSCSI / ext4 / LevelDB: crc32c("123456789") is
// 0xE3069283, so other tools can check Kiln files with any CRC-32C library.
#include <cstddef>
#include <cstdint>

namespace kiln::record {

// CRC of `size` bytes, continuing from `crc` (0 to start). crc32c(b, crc32c(a)) == crc32c(a+b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// True when the SSE4.2 CRC instruction is used (false: portable table fallback).
bool crc32c_is_hardware();

// The table-driven version, used on CPUs without SSE4.2; the tests hold the two against each other.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

}  // namespace kiln::record
