// TextWindowDataset and its corpus: vocabulary, windows and targets, the validation split, and
// the errors for files that cannot feed a context.
#include "kiln/data/text_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "data_test_util.h"
#include "kiln/core/error.h"

namespace kiln::data::text_dataset_test {
namespace {

namespace fs = std::filesystem;

fs::path write_text(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() /
               ("kiln_text_test_" + name + "_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

// Every window of one epoch, in order: (tokens, targets) as int vectors.
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> windows(const Dataset& ds) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
  auto it = ds.create_tuple_iterator({.num_epochs = 1});
  for (std::vector<Tensor> row; it.next(row);) {
    out.emplace_back(row[0].to_vector<int64_t>(), row[1].to_vector<int64_t>());
  }
  return out;
}

TEST(TextCorpus, VocabularyIsTheSortedDistinctBytes) {
  const std::string text = "hello, wörld\n";  // ö is two UTF-8 bytes
  fs::path p = write_text("vocab", text);
  TextCorpus c = read_text_corpus(p.string());
  std::set<uint8_t> distinct(text.begin(), text.end());
  EXPECT_EQ(c.vocabulary, std::vector<uint8_t>(distinct.begin(), distinct.end()));
  ASSERT_EQ(c.num_tokens(), int64_t(text.size()));
  std::vector<int64_t> ids = c.tokens.to_vector<int64_t>();
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_EQ(c.vocabulary[size_t(ids[i])], uint8_t(text[i])) << "byte " << i;
  }
  std::vector<int32_t> encoded = c.encode(text);
  EXPECT_EQ(std::vector<int64_t>(encoded.begin(), encoded.end()), ids);
  EXPECT_EQ(c.decode(encoded), text);
  std::string e = error_of([&] { c.encode("hex"); });  // 'x' is not in the file
  EXPECT_NE(e.find("byte 120"), std::string::npos) << e;
  EXPECT_NE(e.find("position 2"), std::string::npos) << e;
  fs::remove(p);
}

TEST(TextWindowDataset, WindowsAndTargetsAreTheTextShiftedByOne) {
  const std::string text = "abcdefghij";
  fs::path p = write_text("windows", text);
  auto c = std::make_shared<const TextCorpus>(read_text_corpus(p.string()));
  TextWindowOptions o{.context_length = 4, .begin = 1, .end = 9, .stride = 2};
  o.source.shuffle = false;
  auto rows = windows(TextWindowDataset(c, o));
  // Starts 1 and 3 fit in [1, 9) with their next token; 5 would need byte 9.
  ASSERT_EQ(rows.size(), 2u);
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t start = 1 + 2 * r;
    EXPECT_EQ(c->decode(std::vector<int32_t>(rows[r].first.begin(), rows[r].first.end())),
              text.substr(start, 4));
    EXPECT_EQ(c->decode(std::vector<int32_t>(rows[r].second.begin(), rows[r].second.end())),
              text.substr(start + 1, 4));
  }
  fs::remove(p);
}

TEST(TextWindowDataset, SplitTrainsOnTheFirstPartAndValidatesOnTheLastTenth) {
  std::string text;
  for (int i = 0; i < 200; ++i) text.push_back(char('a' + (i * 7) % 26));
  fs::path p = write_text("split", text);
  auto c = std::make_shared<const TextCorpus>(read_text_corpus(p.string()));
  TextSplit s = split_text_corpus(c, {.context_length = 8});
  EXPECT_EQ(s.validation_tokens, 20);
  EXPECT_EQ(s.train_tokens, 180);
  auto train = windows(s.train);
  auto validation = windows(s.validation);
  EXPECT_EQ(train.size(), size_t(180 - 8));  // every start with its next token in [0, 180)
  EXPECT_EQ(validation.size(), size_t((20 - 9) / 8 + 1));  // starts 180 and 188
  // Training windows come shuffled, each start once; none reads into the validation part.
  std::vector<std::string> seen;
  for (auto& [x, y] : train) seen.push_back(c->decode(std::vector<int32_t>(x.begin(), x.end())));
  std::vector<std::string> in_order;
  for (size_t i = 0; i + 8 < 180; ++i) in_order.push_back(text.substr(i, 8));
  EXPECT_NE(seen, in_order) << "training windows are not shuffled";
  std::sort(seen.begin(), seen.end());
  std::sort(in_order.begin(), in_order.end());
  EXPECT_EQ(seen, in_order);
  EXPECT_EQ(c->decode(std::vector<int32_t>(validation[0].first.begin(), validation[0].first.end())),
            text.substr(180, 8));
  EXPECT_EQ(
      c->decode(std::vector<int32_t>(validation[1].second.begin(), validation[1].second.end())),
      text.substr(189, 8));
  fs::remove(p);
}

TEST(TextWindowDataset, BadFilesAreErrorsNamingTheFileAndSizes) {
  std::string e = error_of([] { read_text_corpus("/nonexistent/corpus.txt"); });
  EXPECT_NE(e.find("/nonexistent/corpus.txt"), std::string::npos) << e;
  EXPECT_THROW(read_text_corpus("/nonexistent/corpus.txt"), FileError);

  fs::path empty = write_text("empty", "");
  e = error_of([&] { read_text_corpus(empty.string()); });
  EXPECT_NE(e.find(empty.string()), std::string::npos) << e;
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
  fs::remove(empty);

  fs::path shortfile = write_text("short", std::string(50, 'z'));
  auto c = std::make_shared<const TextCorpus>(read_text_corpus(shortfile.string()));
  e = error_of([&] { split_text_corpus(c, {.context_length = 16}); });
  for (const std::string part : {shortfile.string(), std::string("50 bytes"),
                                 std::string("context 16"), std::string("(last 5)")}) {
    EXPECT_NE(e.find(part), std::string::npos) << "'" << part << "' missing from: " << e;
  }
  e = error_of([&] { TextWindowDataset(c, {.context_length = 50}); });
  EXPECT_NE(e.find("50 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("context 50 + 1"), std::string::npos) << e;
  fs::remove(shortfile);
}

TEST(TextWindowDataset, DefaultCorpusIsDebiansGpl3) {
  if (!fs::exists(kDefaultTextCorpus)) GTEST_SKIP() << kDefaultTextCorpus << " is not installed";
  TextCorpus c = read_text_corpus(kDefaultTextCorpus);
  EXPECT_GT(c.num_tokens(), 30000);
  EXPECT_GT(c.vocab_size(), 60);
  EXPECT_LT(c.vocab_size(), 128);  // plain ASCII text
}

}  // namespace
}  // namespace kiln::data::text_dataset_test
