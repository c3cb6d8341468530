// Tokenizer: the shipped tokenizer.json round-trips arbitrary UTF-8, splits special tokens, and the
// loader rejects unsupported components with a clear error. (Id-for-id parity with the `tokenizers`
// library is the ctest `tokenizer_parity`.)
#include <gtest/gtest.h>

#include <algorithm>

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
  EXPECT_THROW(Tokenizer::load("/nonexistent/tokenizer.json"), TokenizerError);
}

}  // namespace
}  // namespace minimakv::model
