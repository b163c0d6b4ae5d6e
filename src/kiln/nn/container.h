#pragma once
#include <memory>
#include <vector>

#include "kiln/nn/cell.h"

namespace kiln::nn {

// Runs its cells in order; they are named "0", "1", … in parameter paths (MindSpore's names).
class SequentialCell : public Cell {
 public:
  SequentialCell() : Cell("SequentialCell") {}
  explicit SequentialCell(std::vector<std::shared_ptr<Cell>> cells);
  void append(std::shared_ptr<Cell> cell);
  Tensor construct(const Tensor& x) override;

  size_t size() const { return cells_.size(); }
  const std::shared_ptr<Cell>& operator[](size_t i) const { return cells_.at(i); }

 private:
  std::vector<std::shared_ptr<Cell>> cells_;
};

}  // namespace kiln::nn
