#pragma once
// The data a CLI command trains or evaluates on, named as text:
//
//   imagefolder:DIR            one sub-folder per class (JPEG/PNG); class names are the folders
//   record:FILES               record files (`kiln convert`): a comma list, each item a path or a
//                              glob ("train.krec*"); rows need the fields image and label
//   fashion-mnist[:DIR]        the IDX files (default: Debian's); train split, test for --val
//   mnist[:DIR]                the same for MNIST (default: /usr/share/datasets/mnist)
//
// The existing sources of data/ read the rows; this file only picks one, probes the first image
// for its channels and size, finds the class names, and adds the decode, resize, augmentation and
// normalization stages. Every error names the flag and the bad value.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::cli {

// What a model needs to know about its input; kept in checkpoints (see trained_model.h).
struct ImageDataInfo {
  int64_t num_classes = 0;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  std::vector<std::string> class_names;  // num_classes entries
};

// (x / 255 - mean[c]) / std[c]; one value serves every channel.
struct Normalization {
  std::vector<float> mean = {0.f};
  std::vector<float> std = {1.f};
};

// The parsed --transforms list: random augmentations (training rows only) and normalization.
struct TransformList {
  struct RandomCrop {
    int64_t size = 0, padding = 0;
  };
  std::vector<RandomCrop> random_crops;
  bool hflip = false, vflip = false;
  bool has_normalization = false;
  Normalization normalization;
};

// "random_crop:S[:P],hflip,vflip,normalize:M:S" (M and S: one number, or one per channel joined
// by '/'). Strict: an unknown item, a missing or extra argument, or a bad number is an Error
// naming `flag` and the item.
TransformList parse_transforms(const std::string& text, const std::string& flag = "--transforms");

// "HxW" or "S" (square) -> {H, W}; Error naming `flag` otherwise.
std::pair<int64_t, int64_t> parse_image_size(const std::string& text,
                                             const std::string& flag = "--image-size");

struct DataRequest {
  std::string spec;             // see the grammar above
  std::string flag = "--data";  // for messages
  bool training = true;  // training: train split, shuffled, last partial batch dropped, augmented
  int64_t batch_size = 64;
  int64_t height = 0, width = 0;  // resize to this (0: the data's own size)
  int64_t channels = 0;           // 1 or 3 (0: the data's own)
  TransformList transforms;       // random ones apply to training rows only
  Normalization normalization;    // overrides the data's default when transforms has none
  bool use_default_normalization = true;
};

struct ImageData {
  data::Dataset batches;  // "image" f32 [B, C, H, W], "label" i32 [B]
  ImageDataInfo info;
  Normalization normalization;  // what the batches were normalized with
};

// Builds the pipeline of `request`; FileError when the data is missing or unreadable, Error for
// a bad spec.
ImageData open_image_data(const DataRequest& request);

// The validation data a training spec implies when --val is not given: the test split of
// fashion-mnist / mnist; empty for image folders and records.
std::string default_validation_spec(const std::string& train_spec);

// A single image file -> u8 [H, W, C] with `channels` channels at height x width (the same
// decode and resize as the pipelines use).
Tensor load_image_for_model(const std::string& path, const ImageDataInfo& info);

}  // namespace kiln::cli
