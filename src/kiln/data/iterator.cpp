#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/dataset.h"
#include "kiln/data/detail/node.h"
#include "kiln/data/detail/pipeline.h"

namespace kiln::data {

TupleIterator Dataset::create_tuple_iterator(IteratorOptions options) const {
  if (!node_) throw Error("create_tuple_iterator on an empty Dataset");
  if (options.num_epochs == 0 || options.num_epochs < -1) {
    throw Error(kiln::detail::concat(
        "create_tuple_iterator: num_epochs must be positive or -1, got ", options.num_epochs));
  }
  std::vector<int> map;
  std::vector<std::string> names;
  if (options.columns.empty()) {
    for (size_t i = 0; i < node_->columns.size(); ++i) map.push_back(int(i));
    names = node_->columns;
  } else {
    for (auto& c : options.columns) {
      auto it = std::find(node_->columns.begin(), node_->columns.end(), c);
      if (it == node_->columns.end()) {
        throw Error("create_tuple_iterator: columns: '" + c + "' is not a column of the dataset");
      }
      map.push_back(int(it - node_->columns.begin()));
      names.push_back(c);
    }
  }
  auto p = std::make_shared<detail::Pipeline>(node_, options.num_epochs, config::get_seed());
  p->print_summary = options.print_summary;
  p->on_wait = std::move(options.on_wait);
  return TupleIterator(std::move(p), std::move(map), std::move(names));
}

DictIterator Dataset::create_dict_iterator(IteratorOptions options) const {
  return DictIterator(create_tuple_iterator(std::move(options)));
}

TupleIterator::TupleIterator(std::shared_ptr<detail::Pipeline> pipeline,
                             std::vector<int> column_map, std::vector<std::string> names)
    : pipeline_(std::move(pipeline)),
      column_map_(std::move(column_map)),
      names_(std::move(names)) {}
TupleIterator::TupleIterator(TupleIterator&&) noexcept = default;
TupleIterator& TupleIterator::operator=(TupleIterator&&) noexcept = default;
TupleIterator::~TupleIterator() = default;

bool TupleIterator::next(std::vector<Tensor>& row) {
  if (!pipeline_) throw Error("next() on a moved-from iterator");
  Row r;
  if (!pipeline_->next(r)) return false;
  row.resize(column_map_.size());
  for (size_t i = 0; i < column_map_.size(); ++i) {
    row[i] = std::move(r.columns[size_t(column_map_[i])]);
  }
  return true;
}

std::vector<std::string> TupleIterator::column_names() const {
  return names_;
}
int64_t TupleIterator::epoch() const {
  return pipeline_ ? pipeline_->epochs_done() : 0;
}
PipelineStats TupleIterator::stats() const {
  return pipeline_ ? pipeline_->stats() : PipelineStats();
}
void TupleIterator::stop() {
  if (pipeline_) pipeline_->stop();
}

bool DictIterator::next(std::map<std::string, Tensor>& row) {
  if (!tuple_.next(scratch_)) return false;
  row.clear();
  for (size_t i = 0; i < scratch_.size(); ++i) row[tuple_.names_[i]] = std::move(scratch_[i]);
  return true;
}

}  // namespace kiln::data
