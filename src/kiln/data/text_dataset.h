#pragma once
// A byte-level text corpus for language models: the vocabulary is the sorted distinct bytes of a
// file (UTF-8 text splits each multi-byte character into its bytes), and TextWindowDataset's rows
// are windows of `context_length` token ids with the next token of each position as its target.
//
//   auto corpus =
//   std::make_shared<TextCorpus>(read_text_corpus("/usr/share/common-licenses/GPL-3")); TextSplit
//   split = split_text_corpus(corpus, {.context_length = 64});
//   // split.train rows: "tokens" i32 [64], "targets" i32 [64] (tokens shifted by one)
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

// The text Debian ships on every machine (package base-files): the default corpus.
inline constexpr const char* kDefaultTextCorpus = "/usr/share/common-licenses/GPL-3";

struct TextCorpus {
  std::string path;
  std::vector<uint8_t> vocabulary;  // sorted distinct bytes: token id i stands for vocabulary[i]
  Tensor tokens;                    // i32 [file size]: every byte as its token id

  int64_t vocab_size() const { return int64_t(vocabulary.size()); }
  int64_t num_tokens() const { return tokens.defined() ? tokens.numel() : 0; }
  // Error naming the byte and its position when the text holds a byte outside the vocabulary.
  std::vector<int32_t> encode(std::string_view text) const;
  // Error naming an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;
};

// Reads `path` whole; FileError naming the file when it is missing, unreadable or empty.
TextCorpus read_text_corpus(const std::string& path);
// A corpus of no tokens with the vocabulary a checkpoint recorded (`kiln predict` encodes and
// decodes with it).
TextCorpus text_corpus_from_vocabulary(std::vector<uint8_t> vocabulary);

struct TextWindowOptions {
  int64_t context_length = 64;
  int64_t begin = 0, end = -1;  // the token range [begin, end) windows and targets come from
  int64_t stride = 1;           // tokens between the starts of consecutive windows
  SourceOptions source;         // shuffle (default: on), num_samples, sharding
};

// Rows: "tokens" i32 [context_length] = ids [s, s + T), "targets" i32 [context_length] =
// ids [s + 1, s + T + 1), for s = begin, begin + stride, ... while s + T + 1 <= end. Error naming
// the file and the sizes when the range holds fewer than context_length + 1 tokens.
Dataset TextWindowDataset(std::shared_ptr<const TextCorpus> corpus, TextWindowOptions options);

struct TextSplitOptions {
  int64_t context_length = 64;
  double validation_fraction = 0.1;  // the last tokens of the file
  bool shuffle = true;               // the training windows (validation is read in order)
};

struct TextSplit {
  Dataset train;       // windows at every position of the first part
  Dataset validation;  // non-overlapping windows (stride context_length) of the last part
  int64_t train_tokens = 0, validation_tokens = 0;
};

// Error naming the file, its size, the split and the context when either part is shorter than
// context_length + 1 tokens.
TextSplit split_text_corpus(std::shared_ptr<const TextCorpus> corpus,
                            const TextSplitOptions& options);

}  // namespace kiln::data
