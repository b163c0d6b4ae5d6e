#include "kiln/cli/text_data.h"

#include "kiln/core/error.h"

namespace kiln::cli {

bool is_text_spec(const std::string& spec) {
  return spec == "text" || spec.rfind("text:", 0) == 0;
}

TextData open_text_data(const TextDataRequest& r) {
  if (!is_text_spec(r.spec)) throw Error(r.flag + ": '" + r.spec + "' is not text[:FILE]");
  if (r.context_length < 1 || r.batch_size < 1 || r.validation_batch_size < 1) {
    throw Error(detail::concat(r.flag, ": context (", r.context_length, ") and batch sizes (",
                               r.batch_size, ", ", r.validation_batch_size, ") must be >= 1"));
  }
  std::string path = r.spec.size() > 5 ? r.spec.substr(5) : data::kDefaultTextCorpus;
  TextData out;
  try {
    auto corpus = std::make_shared<const data::TextCorpus>(data::read_text_corpus(path));
    data::TextSplit split = data::split_text_corpus(corpus, {.context_length = r.context_length});
    out.corpus = corpus;
    out.train = split.train.batch(r.batch_size, /*drop_remainder=*/true);
    out.validation = split.validation.batch(r.validation_batch_size, /*drop_remainder=*/false);
    out.train_tokens = split.train_tokens;
    out.validation_tokens = split.validation_tokens;
  } catch (const FileError& e) {
    throw FileError(r.flag + " " + r.spec + ": " + e.what());
  } catch (const Error& e) {
    throw Error(r.flag + " " + r.spec + " with --context " + std::to_string(r.context_length) +
                ": " + e.what());
  }
  return out;
}

}  // namespace kiln::cli
