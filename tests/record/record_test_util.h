#pragma once
// Helpers shared by the record tests: a scratch directory and small record sets.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/record/file_writer.h"

namespace kiln::record::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its files at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-record-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) std::abort();
    path_ = buf.data();
  }
  ~ScratchDir() {
    for (const std::string& f : files()) ::unlink((path_ + "/" + f).c_str());
    ::rmdir(path_.c_str());
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }
  // Every entry, hidden files included, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

inline bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A small set with an indexed label, a string, bytes of varying length and a fixed array.
inline std::vector<Field> small_schema() {
  return {Field::scalar("label", FieldType::int32), Field::scalar("name", FieldType::string),
          Field::scalar("blob", FieldType::bytes), Field::array("vec", ElemType::float32, {3})};
}

inline Row small_row(int i) {
  std::vector<uint8_t> blob(size_t(i % 7) * 5 + 1);
  for (size_t k = 0; k < blob.size(); ++k) blob[k] = uint8_t(i * 31 + int(k));
  return Row{{"label", int32_t(i % 5)},
             {"name", "row-" + std::to_string(i)},
             {"blob", Value::bytes(std::move(blob))},
             {"vec", Value::array<float>({3}, {float(i), float(i) * 0.5f, -float(i)})}};
}

inline std::vector<std::string> write_small_set(const std::string& path, int rows, int shards,
                                                WriterOptions options = {.overwrite = false,
                                                                         .page_size = 4096}) {
  FileWriter writer(path, shards, options);
  writer.add_schema(small_schema());
  writer.add_index({"label", "name"});
  std::vector<Row> batch;
  for (int i = 0; i < rows; ++i) batch.push_back(small_row(i));
  writer.write_raw_data(batch);
  writer.commit();
  return writer.paths();
}

}  // namespace kiln::record::testing
