#pragma once
// The safetensors file layout (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON describing each tensor (dtype, shape, byte range
// in the data section) plus optional string "__metadata__", then the raw little-endian data.
// Loading never executes anything and never trusts the file: every length, offset and shape is
// checked against the file's real size before a byte is read.
//
// Integrity: Kiln adds to "__metadata__" (string values, so every safetensors reader still loads
// the file) "checksum": "crc32", one "crc32.<tensor name>" per tensor (zlib's CRC-32 of the
// tensor's data bytes, 8 hex digits) and "crc32.__metadata__" (of the other metadata entries,
// each as key NUL value NUL in key order). Decoding checks them all and fails naming the tensor
// and its byte offset; files without checksums (other tools') load unverified.
#include <map>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/cell.h"

namespace kiln::train {

inline constexpr const char* kChecksumKey = "checksum";
inline constexpr const char* kChecksumPrefix = "crc32.";

struct SafetensorsFile {
  std::vector<nn::NamedTensor> tensors;         // in data order
  std::vector<uint64_t> byte_offsets;           // of each tensor's data in the file
  std::map<std::string, std::string> metadata;  // without the checksum entries
  bool verified = false;                        // the file had checksums and they all matched
};

// Serializes to bytes (tensors are written contiguous, in the given order), with checksums.
// Metadata keys "checksum" and "crc32.*" are reserved (Error).
std::string encode_safetensors(const std::vector<nn::NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Parses bytes; `source` names the file in errors. Throws FileError naming source, the problem
// and the byte offset.
SafetensorsFile decode_safetensors(const std::string& bytes, const std::string& source);

// Writes atomically: a temporary file in the same folder, fsync, rename over `path`, fsync of the
// folder. A crash at any moment leaves either the old file or the new one, never a mix.
void write_file_atomically(const std::string& path, const std::string& bytes);

// Reads a whole file; FileError naming it when it cannot be read.
std::string read_whole_file(const std::string& path);

}  // namespace kiln::train
