#include "kiln/parallel/tensor_layout.h"

#include <algorithm>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln::parallel {
namespace {

std::string list_str(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

}  // namespace

TensorLayout TensorLayout::replicated(const Shape& shape, int64_t ranks) {
  TensorLayout l;
  l.shape = shape;
  l.device_matrix = {ranks};
  l.tensor_map.assign(size_t(shape.rank()), ops::kNotSplit);
  return l;
}

TensorLayout TensorLayout::of_form(const ops::ShardedForm& form, bool output, size_t index,
                                   const Shape& shape, int64_t ranks) {
  int64_t used = 1;
  for (int64_t p : form.device_matrix) used *= p;
  const int64_t repeat = ranks / used;
  const int shift = repeat > 1 ? 1 : 0;
  TensorLayout l;
  l.shape = shape;
  if (shift) l.device_matrix.push_back(repeat);
  l.device_matrix.insert(l.device_matrix.end(), form.device_matrix.begin(),
                         form.device_matrix.end());
  if (l.device_matrix.empty()) l.device_matrix = {1};
  const std::vector<int>& map = output ? form.output_maps.at(index) : form.input_maps.at(index);
  for (int a : map) l.tensor_map.push_back(a == ops::kNotSplit ? a : a + shift);
  if (output) {
    for (int a : form.output_partial.at(index)) l.partial.push_back(a + shift);
  }
  return l;
}

int64_t TensorLayout::ranks() const {
  int64_t n = 1;
  for (int64_t p : device_matrix) n *= p;
  return n;
}

std::vector<int64_t> TensorLayout::parts() const {
  std::vector<int64_t> p;
  for (int a : tensor_map) p.push_back(a == ops::kNotSplit ? 1 : device_matrix[size_t(a)]);
  return p;
}

std::vector<int64_t> TensorLayout::coordinates(int64_t rank) const {
  std::vector<int64_t> c(device_matrix.size());
  for (size_t i = device_matrix.size(); i-- > 0;) {
    c[i] = rank % device_matrix[i];
    rank /= device_matrix[i];
  }
  return c;
}

std::vector<int64_t> TensorLayout::block_of(int64_t rank) const {
  const std::vector<int64_t> c = coordinates(rank);
  std::vector<int64_t> b;
  for (int a : tensor_map) b.push_back(a == ops::kNotSplit ? 0 : c[size_t(a)]);
  return b;
}

std::vector<int64_t> TensorLayout::partial_group(int64_t rank) const {
  if (partial.empty()) return {rank};
  const std::vector<int64_t> mine = coordinates(rank);
  std::vector<int64_t> group;
  for (int64_t r = 0; r < ranks(); ++r) {
    const std::vector<int64_t> c = coordinates(r);
    bool same = true;
    for (size_t a = 0; a < c.size(); ++a) {
      const bool is_partial = std::find(partial.begin(), partial.end(), int(a)) != partial.end();
      if (!is_partial && c[a] != mine[a]) same = false;
    }
    if (same) group.push_back(r);
  }
  return group;
}

Shape TensorLayout::local_shape() const {
  std::vector<int64_t> d = shape.dims();
  const std::vector<int64_t> p = parts();
  for (size_t i = 0; i < d.size(); ++i) d[i] /= p[i];
  return Shape(std::move(d));
}

bool TensorLayout::is_replicated() const {
  if (!partial.empty()) return false;
  for (int a : tensor_map) {
    if (a != ops::kNotSplit && device_matrix[size_t(a)] > 1) return false;
  }
  return true;
}

bool TensorLayout::same_placement(const TensorLayout& other) const {
  if (shape != other.shape || ranks() != other.ranks()) return false;
  if (parts() != other.parts()) return false;
  for (int64_t r = 0; r < ranks(); ++r) {
    if (block_of(r) != other.block_of(r) || partial_group(r) != other.partial_group(r)) {
      return false;
    }
  }
  return true;
}

std::string TensorLayout::str() const {
  if (is_replicated()) return "replicated";
  std::ostringstream s;
  const std::vector<int64_t> p = parts();
  bool split = false;
  for (int64_t x : p) split = split || x > 1;
  if (split) {
    s << "split " << list_str(p) << " (device matrix " << list_str(device_matrix)
      << ", tensor map [";
    for (size_t i = 0; i < tensor_map.size(); ++i) s << (i ? ", " : "") << tensor_map[i];
    s << "])";
  } else {
    s << "whole (device matrix " << list_str(device_matrix) << ")";
  }
  if (!partial.empty()) {
    s << ", partial sums over axis";
    for (int a : partial) s << " " << a;
  }
  return s.str();
}

}  // namespace kiln::parallel
