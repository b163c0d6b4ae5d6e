// libFuzzer target for checkpoint loading: any bytes, decoded as a safetensors checkpoint and read
// for its training state (epoch, step in epoch, global step, the optimizer's step, finiteness),
// must give a checkpoint or a kiln::Error, never a crash, an out-of-bounds access, undefined
// behaviour or an allocation larger than the file.
//
// Each input is tried twice: as it is, and "resealed" (every CRC-32 in the metadata recomputed),
// because random mutations almost always break a checksum first, and the checks behind the
// checksums (lying offsets, shapes, dtypes, training-state fields) are what needs exploring.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/core/error.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/safetensors.h"

namespace {

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Recomputes the checksums a well-meaning writer would have stored, wherever the header allows.
std::string reseal(const std::string& bytes) {
  if (bytes.size() < 8) return bytes;
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) return bytes;
  nlohmann::ordered_json header =
      nlohmann::ordered_json::parse(bytes.begin() + 8, bytes.begin() + 8 + int64_t(n), nullptr,
                                    /*allow_exceptions=*/false);
  if (!header.is_object()) return bytes;
  const size_t data_start = 8 + n;
  std::map<std::string, std::string> meta;
  if (header.contains("__metadata__") && header["__metadata__"].is_object()) {
    for (auto& [k, v] : header["__metadata__"].items()) {
      if (v.is_string() && k.rfind("crc32.", 0) != 0) meta[k] = v.get<std::string>();
    }
  }
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__" || !entry.is_object() || !entry.contains("data_offsets")) continue;
    const auto& o = entry["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() ||
        !o[1].is_number_unsigned()) {
      continue;
    }
    uint64_t b = o[0].get<uint64_t>(), e = o[1].get<uint64_t>();
    if (b > e || e > bytes.size() - data_start) continue;
    meta["crc32." + name] = hex32(
        uint32_t(crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data() + data_start + b), e - b)));
  }
  meta["checksum"] = "crc32";
  uint32_t crc = 0;
  for (const auto& [k, v] : meta) {
    if (k.rfind("crc32.", 0) == 0) continue;
    crc = uint32_t(crc32_z(crc, reinterpret_cast<const Bytef*>(k.c_str()), k.size() + 1));
    crc = uint32_t(crc32_z(crc, reinterpret_cast<const Bytef*>(v.c_str()), v.size() + 1));
  }
  meta["crc32.__metadata__"] = hex32(crc);
  header["__metadata__"] = meta;
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  uint64_t len = json.size();
  std::string out(reinterpret_cast<const char*>(&len), 8);
  return out + json + bytes.substr(data_start);
}

void load(const std::string& bytes) {
  try {
    kiln::train::SafetensorsFile f = kiln::train::decode_safetensors(bytes, "fuzz.safetensors");
    if (f.tensors.size() != f.byte_offsets.size()) __builtin_trap();
    kiln::train::Checkpoint c{"fuzz.safetensors", std::move(f.tensors), std::move(f.metadata),
                              f.verified};
    kiln::train::read_training_state(c);
  } catch (const kiln::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  load(bytes);
  std::string resealed = reseal(bytes);
  if (resealed != bytes) load(resealed);
  return 0;
}
