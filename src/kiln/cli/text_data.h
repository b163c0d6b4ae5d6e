#pragma once
// The text a language model trains on, named as text:
//
//   text[:FILE]   a text file read as bytes (default: /usr/share/common-licenses/GPL-3, which
//                 Debian's base-files package installs everywhere); the vocabulary is its
//                 sorted distinct bytes, the last 10 % of it is the validation part
//
// data/text_dataset.h reads the file and cuts the windows; this file parses the spec and batches.
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/data/text_dataset.h"

namespace kiln::cli {

// Whether `spec` names text ("text" or "text:FILE").
bool is_text_spec(const std::string& spec);

struct TextDataRequest {
  std::string spec = "text";
  std::string flag = "--data";  // for messages
  int64_t context_length = 64;
  int64_t batch_size = 32;             // training batches (the last partial one dropped)
  int64_t validation_batch_size = 64;  // every validation window, in order
};

struct TextData {
  std::shared_ptr<const data::TextCorpus> corpus;
  data::Dataset train;       // "tokens" i32 [B, T], "targets" i32 [B, T]; shuffled
  data::Dataset validation;  // the same columns, non-overlapping windows of the last 10 %
  int64_t train_tokens = 0, validation_tokens = 0;
};

// FileError when the file is missing, unreadable or empty; Error naming the flag, the file and
// the sizes when it is too short for the context.
TextData open_text_data(const TextDataRequest& request);

}  // namespace kiln::cli
