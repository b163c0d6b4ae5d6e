#pragma once
// A row's payload: its fields in schema order (docs/record-format.md, "Record payload").
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/record/schema.h"
#include "kiln/record/value.h"

namespace kiln::record {

// Appends the payload of `row` to `out`. When `keys` is given, appends the field-index key of
// every indexed field in schema order. Throws kiln::Error starting with `context` (say "row 7: "),
// naming the field and what is wrong with the value.
void encode_row(const Schema& schema, const Row& row, const std::string& context,
                std::vector<uint8_t>& out, std::vector<uint64_t>* keys);

// Splits a payload found at file offset `offset` into fields. Every length, free dimension and
// element count is checked against the bytes there are: a payload that does not match the schema
// throws FileError naming `file`, the byte offset and the field.
void decode_row(const Schema& schema, std::span<const uint8_t> payload, uint64_t offset,
                const std::string& file, RowView& out);

// The field-index key of a decoded field (see format.h).
uint64_t index_key(const FieldView& v);
// The key a lookup value has for `field`, with the same conversions the writer applies.
uint64_t index_key(const Field& field, const Value& v);

}  // namespace kiln::record
