#include "kiln/record/record_reader.h"

#include <sys/stat.h>

#include <algorithm>

#include "kiln/record/detail/record_codec.h"

namespace kiln::record {

std::string directory_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

std::string file_name_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<std::string> RecordReader::sibling_paths(const ShardReader& shard) {
  std::string dir = directory_of(shard.path());
  std::vector<std::string> paths;
  for (const std::string& name : shard.meta().shard_names) paths.push_back(dir + name);
  return paths;
}

RecordReader::RecordReader(const std::string& file, ReaderOptions options) : options_(options) {
  auto first = ShardReader::open(file, options.access);
  if (first->header().shard_count == 1) {  // a lone shard may have been renamed: that is fine
    shards_.push_back(first);
    check_set();
    return;
  }
  std::vector<std::string> paths = sibling_paths(*first);
  if (file_name_of(file) != first->meta().shard_names[first->header().shard_index])
    throw FileError(detail::concat(file, ": this file is shard ", first->header().shard_index,
                                   " of a set whose shard is named '",
                                   first->meta().shard_names[first->header().shard_index],
                                   "' (renamed files cannot find their siblings: open them as "
                                   "a list)"));
  std::vector<std::string> missing;
  for (const std::string& p : paths) {
    struct stat st {};
    if (p != file && ::stat(p.c_str(), &st) != 0) missing.push_back(p);
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw FileError(detail::concat(file, ": the record set has ", paths.size(), " shards and ",
                                   missing.size(), " of them are missing: ", list));
  }
  for (size_t i = 0; i < paths.size(); ++i)
    shards_.push_back(
        i == first->header().shard_index ? first : ShardReader::open(paths[i], options.access));
  check_set();
}

RecordReader::RecordReader(const std::vector<std::string>& files, ReaderOptions options)
    : options_(options) {
  if (files.empty()) throw Error("RecordReader: no record files given");
  for (const std::string& f : files) shards_.push_back(ShardReader::open(f, options.access));
  std::stable_sort(shards_.begin(), shards_.end(), [](const auto& a, const auto& b) {
    return a->header().shard_index < b->header().shard_index;
  });
  check_set();
}

void RecordReader::check_set() {
  const ShardReader& first = *shards_.front();
  const Header& h0 = first.header();
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ShardReader& s = *shards_[i];
    const Header& h = s.header();
    if (h.dataset_id != h0.dataset_id)
      throw FileError(detail::concat(
          s.path(), ": belongs to a different record set than ", first.path(), " (set id ",
          std::hex, h.dataset_id, " vs ", h0.dataset_id,
          "): the shards were written by different commits (an interrupted overwrite?)"));
    if (i > 0 && h.shard_index == shards_[i - 1]->header().shard_index)
      throw FileError(detail::concat(s.path(), ": shard ", h.shard_index, " is given twice (also ",
                                     shards_[i - 1]->path(), ")"));
    if (h.shard_count != h0.shard_count || h.total_rows != h0.total_rows ||
        !(s.meta().schema == first.schema()) || s.meta().shard_names != first.meta().shard_names)
      throw FileError(detail::concat(s.path(), ": its header or schema disagrees with ",
                                     first.path(), " although both claim set id ", std::hex,
                                     h0.dataset_id));
    num_rows_ += h.row_count;
  }
}

RecordReader::Location RecordReader::locate(uint64_t row) const {
  if (row >= num_rows_)
    throw Error(
        detail::concat("RecordReader: row ", row, " is out of range (", num_rows_, " rows)"));
  return {size_t(row % shards_.size()), row / shards_.size()};
}

void RecordReader::read(uint64_t row, RowView& out) const {
  Location at = locate(row);
  shards_[at.shard]->read(at.local_row, out, options_.verify_checksums);
}

RowView RecordReader::read(uint64_t row) const {
  RowView v;
  read(row, v);
  return v;
}

std::vector<uint64_t> RecordReader::find(std::string_view field_name, const Value& value) const {
  int field = schema().require(field_name);
  const Field& f = schema()[size_t(field)];
  if (!f.indexed)
    throw Error(detail::concat("RecordReader: field '", f.name,
                               "' is not indexed (FileWriter::add_index before writing)"));
  uint64_t key = index_key(f, value);
  std::vector<uint64_t> rows;
  RowView view;
  for (size_t s = 0; s < shards_.size(); ++s)
    for (uint64_t local : shards_[s]->rows_with_key(field, key)) {
      if (f.type == FieldType::string) {  // the key is a hash: compare the text itself
        shards_[s]->read(local, view, options_.verify_checksums);
        std::string_view want(reinterpret_cast<const char*>(value.data().data()),
                              value.data().size());
        if (view[size_t(field)].as_string() != want) continue;
      }
      rows.push_back(row_of(s, local));
    }
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace kiln::record
