// Rows that are slices of arrays in memory: viewed one at a time, or copied a batch at a time.
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/data/source.h"

namespace kiln::data {

void Source::gather_rows(const std::vector<int64_t>&, std::vector<Tensor>&) const {
  throw Error(name() + " cannot gather rows into a batch (gathers_rows() is false)");
}

std::unique_ptr<SourceReader> ArraySource::make_reader() const {
  struct Reader : SourceReader {
    const std::vector<ArrayRows>* columns;
    void read(int64_t index, std::vector<Tensor>& out) override {
      out.reserve(columns->size());
      for (const ArrayRows& column : *columns) out.push_back(column.row(index));
    }
  };
  auto r = std::make_unique<Reader>();
  r->columns = &array_columns_;
  return r;
}

void ArraySource::gather_rows(const std::vector<int64_t>& indices,
                              std::vector<Tensor>& columns) const {
  for (const ArrayRows& column : array_columns_) columns.push_back(column.gather(indices));
}

Tensor ArrayRows::row(int64_t index) const {
  return array.view_as(row_shape, row_strides, first + index * step);
}

Tensor ArrayRows::gather(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> dims{int64_t(indices.size())};
  dims.insert(dims.end(), row_shape.begin(), row_shape.end());
  Tensor batch = Tensor::empty(Shape(std::move(dims)), array.dtype());
  const size_t element = dtype_size(array.dtype());
  const size_t row_bytes = size_t(row_shape.numel()) * element;
  auto* to = static_cast<unsigned char*>(batch.raw_data());
  if (row_strides == contiguous_strides(row_shape)) {
    // raw_data() is the storage's first byte at the array's offset.
    const auto* storage =
        static_cast<const unsigned char*>(array.raw_data()) - size_t(array.offset()) * element;
    for (size_t k = 0; k < indices.size(); ++k) {
      std::memcpy(to + k * row_bytes, storage + size_t(first + indices[k] * step) * element,
                  row_bytes);
    }
    return batch;
  }
  for (size_t k = 0; k < indices.size(); ++k) {
    const Tensor one = row(indices[k]).contiguous();
    std::memcpy(to + k * row_bytes, one.raw_data(), row_bytes);
  }
  return batch;
}

}  // namespace kiln::data
