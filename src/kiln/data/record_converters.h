#pragma once
// Converters from common data set layouts to record sets (`kiln convert`). They read data sets
// (and encode PNG with data/vision), so they live in data/; record/ stays the file format alone.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/record/format.h"

namespace kiln::record {

struct ConvertProgress {
  uint64_t rows_done = 0;
  uint64_t rows_total = 0;
  double seconds = 0;  // since the conversion started
};

struct ConvertOptions {
  int shards = 1;
  bool overwrite = false;
  uint32_t page_size = kDefaultPageSize;
  int reader_threads = 2;  // image folder: threads reading the small files
  bool png = false;        // idx: store images as PNG bytes instead of raw uint8 arrays
  // Called every few thousand rows and once at the end (from the converting thread).
  std::function<void(const ConvertProgress&)> progress;
};

struct ConvertResult {
  uint64_t rows = 0;
  double seconds = 0;
  std::vector<std::string> files;
};

// DIR/<class>/<image> -> rows {label int32 (indexed), image bytes, file_name string}. Classes are
// the sub-folders in sorted order (label 0, 1, ...), images the .jpg/.jpeg/.png files (any case)
// in sorted order, as ImageFolderDataset numbers them. file_name is "<class>/<file>".
ConvertResult convert_image_folder(const std::string& dir, const std::string& out,
                                   const ConvertOptions& options = {});

// MNIST / Fashion-MNIST IDX files (gzip or plain) -> rows {label int32 (indexed), image}, where
// image is an ndarray uint8 [rows, cols] of raw pixels, or with `png` the PNG-encoded image
// (bytes).
ConvertResult convert_idx(const std::string& images, const std::string& labels,
                          const std::string& out, const ConvertOptions& options = {});

// "12.3k rows/s" style progress line for a terminal: "rows 3000/60000  25100 rows/s  ETA 2.3 s".
std::string format_progress(const ConvertProgress& p);

}  // namespace kiln::record
