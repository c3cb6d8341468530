// Tokenizer: the shipped tokenizer.json round-trips arbitrary UTF-8, splits special tokens, and the
// loader rejects unsupported components with a clear error. (Id-for-id parity with the `tokenizers`
// library is the ctest `tokenizer_parity`.)
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "minimakv/model/tokenizer.h"
#include "test_util.h"

namespace minimakv::model {
namespace {

const std::string kDir = std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m";

TEST(Tokenizer, ShippedRoundTripsAndSplitsSpecials) {
  const Tokenizer tok = Tokenizer::load(kDir + "/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 8192u);
  ASSERT_TRUE(tok.token_id("<|endoftext|>").has_value());
  const int32_t eos = *tok.token_id("<|endoftext|>");
  const auto ids = tok.encode("abc<|endoftext|>def");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eos), 1);
  // digits are single tokens
  const auto digits = tok.encode("1234567");
  EXPECT_EQ(digits.size(), 7u);
  // Text must be UTF-8 (as for the reference library, whose strings always are); a broken sequence
  // anywhere is named, not split into byte pieces.
  EXPECT_THROW(tok.encode("valid start, then \xff\xfe"), std::invalid_argument);
  EXPECT_THROW(tok.encode("cut in half: \xe2\x82"), std::invalid_argument);
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int i = 0; i < 500; ++i) {
    std::string s;
    for (int k = 0; k < 40; ++k) {
      const uint32_t cp = rng() % 4 == 0 ? static_cast<uint32_t>(0x80 + rng() % 0x2000) : static_cast<uint32_t>(32 + rng() % 95);
      if (cp < 0x80) s += static_cast<char>(cp);
      else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    ASSERT_EQ(tok.decode(tok.encode(s)), s);
  }
  EXPECT_THROW(tok.decode({100000}), TokenizerError);
}

// The textbook BPE, independent of the tokenizer's heap: while some adjacent pair has a merge, merge
// every occurrence of the lowest-ranked one, left to right. O(n^2) per word, fine for a test.
std::vector<int32_t> naive_bpe(const std::string& word, const nlohmann::json& model) {
  std::map<std::pair<std::string, std::string>, int> rank;
  int r = 0;
  for (const auto& m : model["merges"]) {
    const std::string s = m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>();
    rank.emplace(std::make_pair(s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)), r++);
  }
  std::vector<std::string> sym;
  for (char c : word) sym.emplace_back(1, c);  // ASCII letters map to themselves in the byte alphabet
  for (;;) {
    int best = std::numeric_limits<int>::max();
    for (size_t i = 0; i + 1 < sym.size(); ++i)
      if (auto it = rank.find({sym[i], sym[i + 1]}); it != rank.end()) best = std::min(best, it->second);
    if (best == std::numeric_limits<int>::max()) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < sym.size(); ++i) {
      if (i + 1 < sym.size() && rank.count({sym[i], sym[i + 1]}) && rank.at({sym[i], sym[i + 1]}) == best) {
        next.push_back(sym[i] + sym[i + 1]);
        ++i;
      } else {
        next.push_back(sym[i]);
      }
    }
    sym.swap(next);
  }
  std::vector<int32_t> ids;
  for (const auto& x : sym) ids.push_back(model["vocab"][x].get<int32_t>());
  return ids;
}

// Long runs of letters without a space are one pre-tokenizer piece: the heap-based merge must give the
// ids of the textbook algorithm on every such word (parity with `tokenizers` on long words is in the
// ctest tokenizer_parity).
TEST(Tokenizer, LongWordsMergeAsTheTextbookAlgorithm) {
  const Tokenizer tok = Tokenizer::load(kDir + "/tokenizer.json");
  std::ifstream in(kDir + "/tokenizer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto model = nlohmann::json::parse(ss.str())["model"];
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const std::string alphabets[] = {"a", "ab", "aeinrst", "abcdefghijklmnopqrstuvwxyz", "etaoinshrdlu"};
  for (int i = 0; i < 60; ++i) {
    const std::string& al = alphabets[rng() % std::size(alphabets)];
    const size_t n = 1 + rng() % (i < 50 ? 300 : 3000);
    std::string w;
    for (size_t k = 0; k < n; ++k) w += al[rng() % al.size()];
    ASSERT_EQ(tok.encode(w), naive_bpe(w, model)) << w.substr(0, 80) << " (" << n << " letters)";
  }
}

// encode_bounded: the ids of encode() when the text fits, nullopt otherwise, whether the text is
// rejected unread (longer than the limit times the longest token) or while encoding.
TEST(Tokenizer, BoundedEncodingStopsAtTheLimit) {
  const Tokenizer tok = Tokenizer::load(kDir + "/tokenizer.json");
  ASSERT_GE(tok.max_token_bytes(), 2u);
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int i = 0; i < 40; ++i) {
    std::string s;
    const size_t n = rng() % 2000;
    for (size_t k = 0; k < n; ++k) s += rng() % 7 == 0 ? ' ' : static_cast<char>('a' + rng() % 26);
    if (rng() % 3 == 0) s += "<|endoftext|>" + s;
    const auto full = tok.encode(s);
    const auto fits = tok.encode_bounded(s, full.size());
    ASSERT_TRUE(fits.has_value());
    EXPECT_EQ(*fits, full);
    if (!full.empty()) {
      EXPECT_FALSE(tok.encode_bounded(s, full.size() - 1).has_value());
    }
  }
  EXPECT_FALSE(tok.encode_bounded(std::string(10 * tok.max_token_bytes() + 1, 'x'), 10).has_value());
  EXPECT_EQ(tok.encode_bounded("", 0), std::vector<int32_t>{});
  // Text made of special tokens: each is found once, in order.
  const int32_t eos = *tok.token_id("<|endoftext|>");
  std::string specials;
  for (int k = 0; k < 20000; ++k) specials += k % 2 ? "<|endoftext|>" : "x";
  const auto ids = tok.encode(specials);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eos), 10000);
}

TEST(Tokenizer, RejectsUnsupportedComponents) {
  auto expect = [](const std::string& json, const std::string& fragment) {
    try {
      Tokenizer::from_json(json, "t.json");
      FAIL() << "accepted: " << json;
    } catch (const TokenizerError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect(R"({"model": {"type": "WordPiece", "vocab": {}}})", "unsupported tokenizer model 'WordPiece'");
  expect(R"({"normalizer": {"type": "NFKC"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})",
         "unsupported normalizer 'NFKC'");
  expect(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}})",
         "unsupported pre-tokenizer 'Metaspace'");
  expect(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": "WordPiece"}})",
         "unsupported decoder 'WordPiece'");
  expect("{", "not valid JSON");
  expect(R"({"model": {"type": "BPE"}})", "malformed tokenizer.json");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})", "malformed tokenizer.json");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", "not in the vocabulary");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [{"content": "x"}]})", "malformed");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": -3}}})", "negative id");
  EXPECT_THROW(Tokenizer::load("/nonexistent/tokenizer.json"), TokenizerError);
}

}  // namespace
}  // namespace minimakv::model
