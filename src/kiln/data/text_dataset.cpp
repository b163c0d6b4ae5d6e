#include "kiln/data/text_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "kiln/core/error.h"

namespace kiln::data {
namespace {

// Rows are views into the corpus's token tensor; a batch copies them, or gathers them straight
// from it (ArraySource).
class TextWindowSource : public ArraySource {
 public:
  TextWindowSource(std::shared_ptr<const TextCorpus> corpus, const TextWindowOptions& o)
      : corpus_(std::move(corpus)), o_(o) {
    const Tensor& tokens = corpus_->tokens;
    const Shape window{o_.context_length};
    // A window, and the same window one token on.
    array_columns_ = {{tokens, window, Strides{1}, tokens.offset() + o_.begin, o_.stride},
                      {tokens, window, Strides{1}, tokens.offset() + o_.begin + 1, o_.stride}};
  }
  std::string name() const override { return "TextWindowDataset"; }
  std::vector<std::string> column_names() const override { return {"tokens", "targets"}; }
  int64_t num_rows() const override {
    return (o_.end - o_.begin - (o_.context_length + 1)) / o_.stride + 1;
  }
  std::string describe(int64_t index) const override {
    return kiln::detail::concat("window at byte ", start_of(index), " of ", corpus_->path);
  }

 private:
  int64_t start_of(int64_t index) const { return o_.begin + index * o_.stride; }

  std::shared_ptr<const TextCorpus> corpus_;
  TextWindowOptions o_;
};

}  // namespace

std::vector<int32_t> TextCorpus::encode(std::string_view text) const {
  std::array<int32_t, 256> id_of;
  id_of.fill(-1);
  for (size_t i = 0; i < vocabulary.size(); ++i) id_of[vocabulary[i]] = int32_t(i);
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t byte = uint8_t(text[i]);
    if (id_of[byte] < 0) {
      throw Error(kiln::detail::concat("text: byte ", int(byte), " ('", std::string(1, text[i]),
                                       "') at position ", i, " is not in the vocabulary of ",
                                       vocabulary.size(), " bytes", path.empty() ? "" : " from ",
                                       path));
    }
    ids.push_back(id_of[byte]);
  }
  return ids;
}

std::string TextCorpus::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= int32_t(vocabulary.size())) {
      throw Error(kiln::detail::concat("text: token id ", id, " is outside the vocabulary of ",
                                       vocabulary.size(), " bytes"));
    }
    text.push_back(char(vocabulary[size_t(id)]));
  }
  return text;
}

TextCorpus read_text_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("text corpus " + path + " does not exist or cannot be read");
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw FileError("text corpus " + path + ": read error");
  if (bytes.empty()) throw FileError("text corpus " + path + " is empty (0 bytes)");
  std::array<bool, 256> seen{};
  for (uint8_t b : bytes) seen[b] = true;
  TextCorpus c;
  c.path = path;
  for (int b = 0; b < 256; ++b)
    if (seen[size_t(b)]) c.vocabulary.push_back(uint8_t(b));
  std::array<int32_t, 256> id_of{};
  for (size_t i = 0; i < c.vocabulary.size(); ++i) id_of[c.vocabulary[i]] = int32_t(i);
  c.tokens = Tensor::empty({int64_t(bytes.size())}, DType::i32);
  int32_t* ids = c.tokens.data<int32_t>();
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = id_of[bytes[i]];
  return c;
}

TextCorpus text_corpus_from_vocabulary(std::vector<uint8_t> vocabulary) {
  TextCorpus c;
  c.vocabulary = std::move(vocabulary);
  return c;
}

Dataset TextWindowDataset(std::shared_ptr<const TextCorpus> corpus, TextWindowOptions o) {
  if (!corpus || !corpus->tokens.defined()) throw Error("TextWindowDataset: no corpus");
  const int64_t n = corpus->num_tokens();
  if (o.end < 0) o.end = n;
  if (o.context_length < 1 || o.stride < 1) {
    throw Error(kiln::detail::concat("TextWindowDataset(", corpus->path, "): context_length (",
                                     o.context_length, ") and stride (", o.stride,
                                     ") must be >= 1"));
  }
  if (o.begin < 0 || o.begin > o.end || o.end > n) {
    throw Error(kiln::detail::concat("TextWindowDataset(", corpus->path, "): token range [",
                                     o.begin, ", ", o.end, ") is outside the file's ", n,
                                     " tokens"));
  }
  if (o.end - o.begin < o.context_length + 1) {
    throw Error(kiln::detail::concat("TextWindowDataset: ", corpus->path, " tokens [", o.begin,
                                     ", ", o.end, ") hold ", o.end - o.begin,
                                     " tokens, fewer than context ", o.context_length,
                                     " + 1 (a window and its next token)"));
  }
  return Dataset::from_source(std::make_shared<TextWindowSource>(std::move(corpus), o), o.source);
}

TextSplit split_text_corpus(std::shared_ptr<const TextCorpus> corpus, const TextSplitOptions& o) {
  if (!corpus) throw Error("split_text_corpus: no corpus");
  if (!(o.validation_fraction > 0 && o.validation_fraction < 1)) {
    throw Error(kiln::detail::concat("split_text_corpus(", corpus->path,
                                     "): validation_fraction must be in (0, 1), got ",
                                     o.validation_fraction));
  }
  const int64_t n = corpus->num_tokens(), t = o.context_length;
  const int64_t validation = int64_t(std::floor(double(n) * o.validation_fraction));
  const int64_t train = n - validation;
  if (train < t + 1 || validation < t + 1) {
    throw Error(kiln::detail::concat(
        corpus->path, " holds ", n, " bytes: its training part (", train,
        ") and validation part (last ", validation, ") each need at least context ", t,
        " + 1 = ", t + 1, " tokens; give a longer text (at least ",
        int64_t(
            std::ceil(double(t + 1) / std::min(o.validation_fraction, 1 - o.validation_fraction))),
        " bytes) or a shorter context"));
  }
  TextSplit s;
  s.train_tokens = train;
  s.validation_tokens = validation;
  TextWindowOptions to{.context_length = t, .begin = 0, .end = train, .stride = 1};
  to.source.shuffle = o.shuffle;
  s.train = TextWindowDataset(corpus, to);
  TextWindowOptions vo{.context_length = t, .begin = train, .end = n, .stride = t};
  vo.source.shuffle = false;
  s.validation = TextWindowDataset(corpus, vo);
  return s;
}

}  // namespace kiln::data
