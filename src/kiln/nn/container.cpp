#include "kiln/nn/container.h"

#include "kiln/core/error.h"

namespace kiln::nn {

SequentialCell::SequentialCell(std::vector<std::shared_ptr<Cell>> cells) : Cell("SequentialCell") {
  for (auto& c : cells) append(std::move(c));
}

void SequentialCell::append(std::shared_ptr<Cell> cell) {
  if (!cell) {
    throw Error("SequentialCell: cell " + std::to_string(cells_.size()) + " is null");
  }
  register_cell(std::to_string(cells_.size()), cell);
  cells_.push_back(std::move(cell));
}

Tensor SequentialCell::construct(const Tensor& x) {
  Tensor y = x;
  for (auto& c : cells_) y = c->construct(y);
  return y;
}

}  // namespace kiln::nn
