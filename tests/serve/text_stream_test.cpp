// TextStream against a reference: the complete characters after each token, cut at the first stop string
// to appear (the earliest, then the longest, occurrence). Over
// random token sequences of the embedded tokenizer (multi-byte characters split across tokens
// included) and stop strings drawn from the text itself, every piece pushed out must be valid UTF-8
// and the pieces must concatenate to the reference, whatever the token boundaries.
#include <gtest/gtest.h>

#include <random>

#include "minimakv/serve/text_stream.h"
#include "shipped_tokenizer.h"
#include "test_util.h"

namespace minimakv::serve {
namespace {

const model::Tokenizer& tokenizer() {
  return testing::shipped_tokenizer();
}

bool valid_utf8(const std::string& s) {
  return sanitize_utf8(s) == s;
}

// Bytes of `s` before an unfinished UTF-8 sequence at its end (a lead byte still missing continuations).
size_t complete_prefix(const std::string& s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xc0) == 0x80) continue;  // a continuation byte: look further back for its lead
    const size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 1;
    return need > back ? s.size() - back : s.size();
  }
  return s.size();
}

TEST(TextStream, PiecesConcatenateToTheTextCutAtTheFirstStopStringToAppear) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto& tok = tokenizer();
  const std::vector<std::string> texts = {
      "Hello, world! The quick brown fox jumps over the lazy dog.",
      "東京は日本の首都です。 Ünïcödé straße — naïve café 🙂🙂 end",
      "line one\nline two\n\nSTOP here, then more text after STOP."};
  for (int trial = 0; trial < 300; ++trial) {
    const std::string& src = texts[rng() % texts.size()];
    std::vector<int32_t> ids = tok.encode(src);
    if (rng() % 3 == 0)  // or random ids: invalid byte sequences too
      for (auto& id : ids) id = static_cast<int32_t>(2 + rng() % (tok.vocab_size() - 2));
    std::string all;
    for (int32_t id : ids) all += tok.decode({id});
    const std::string reference_text = sanitize_utf8(all);
    std::vector<std::string> stops;
    const size_t nstops = rng() % 3;
    for (size_t k = 0; k < nstops && reference_text.size() > 4; ++k) {
      size_t a = rng() % (reference_text.size() - 2), len = 1 + rng() % 4;
      while (a > 0 && (static_cast<unsigned char>(reference_text[a]) & 0xc0) == 0x80) --a;  // a character boundary
      std::string s = reference_text.substr(a, len);
      if (valid_utf8(s)) stops.push_back(s);
    }
    if (rng() % 4 == 0) stops.push_back("\xe2\x98\x83never");
    const bool include = rng() % 2;
    // reference: after each token, the complete characters so far (an unfinished UTF-8 sequence at the
    // end waits); at the first token after which some stop string appears, the earliest (then the
    // longest) occurrence ends the text, before it or through it
    std::string want = reference_text;
    bool stopped = false;
    std::string bytes;
    for (size_t k = 0; k < ids.size() && !stopped; ++k) {
      bytes += tok.decode({ids[k]});
      const std::string text = sanitize_utf8(bytes.substr(0, complete_prefix(bytes)));
      size_t cut = std::string::npos, cut_len = 0;
      for (const auto& s : stops) {
        const size_t p = text.find(s);
        if (p != std::string::npos && (p < cut || (p == cut && s.size() > cut_len))) cut = p, cut_len = s.size();
      }
      if (cut != std::string::npos) {
        want = text.substr(0, include ? cut + cut_len : cut);
        stopped = true;
      }
    }
    TextStream ts(tok, stops, include, true);
    std::string got;
    for (int32_t id : ids) {
      const std::string piece = ts.push(id);
      ASSERT_TRUE(valid_utf8(piece)) << "a piece is not valid UTF-8";
      got += piece;
      ASSERT_EQ(ts.emitted_bytes(), got.size());
    }
    got += ts.finish();
    EXPECT_EQ(got, want) << "stops " << ::testing::PrintToString(stops) << " include " << include;
    EXPECT_EQ(ts.stopped(), stopped);
  }
}

TEST(TextStream, SpecialTokensAreSkippedOrKeptAndUnknownIdsBecomeReplacementCharacters) {
  const auto& tok = tokenizer();
  const int32_t eot = *tok.token_id("<|endoftext|>");
  ASSERT_TRUE(tok.is_special(eot));
  TextStream skip(tok, {}, false, true), keep(tok, {}, false, false);
  const auto hi = tok.encode("hi");
  std::string a, b;
  for (int32_t id : {hi[0], eot, static_cast<int32_t>(tok.vocab_size() + 5)}) {
    a += skip.push(id);
    b += keep.push(id);
  }
  EXPECT_EQ(a + skip.finish(), tok.decode({hi[0]}) + "\xef\xbf\xbd");
  EXPECT_EQ(b + keep.finish(), tok.decode({hi[0]}) + "<|endoftext|>\xef\xbf\xbd");
}

}  // namespace
}  // namespace minimakv::serve
