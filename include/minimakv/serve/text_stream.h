// Generated tokens to text as a client sees it: incremental, valid UTF-8, cut at stop strings.
//
// Owns: one choice's output text. push() takes a token's bytes and returns the text that is final:
// a multi-byte character split across tokens is held until complete, and so is any tail that could
// still become a stop string. When a stop string appears, the text ends before it (or after it with
// include_stop) and stopped() turns true; later pushes return nothing. finish() returns what was
// held back (invalid bytes become U+FFFD, as `errors="replace"` decoding does). The concatenation of
// every returned piece is the choice's whole text.
// Special tokens (the tokenizer's added tokens) decode to nothing when skip_special is set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minimakv/model/tokenizer.h"

namespace minimakv::serve {

class TextStream {
 public:
  TextStream(const model::Tokenizer& tok, std::vector<std::string> stops, bool include_stop, bool skip_special);
  std::string push(int32_t token);
  std::string finish();
  bool stopped() const { return stopped_; }
  size_t emitted_bytes() const { return emitted_; }  // bytes of text returned so far
  // The text one token decodes to on its own (lossy for a partial character), for log-probabilities.
  std::string token_text(int32_t token) const;

 private:
  std::string take(size_t end);  // text_[emitted_, end)
  const model::Tokenizer& tok_;
  std::vector<std::string> stops_;
  bool include_stop_, skip_special_;
  std::string bytes_;  // undecoded tail (an incomplete UTF-8 sequence)
  std::string text_;   // every complete character so far
  size_t emitted_ = 0;
  size_t searched_ = 0;  // stop strings cannot start before this in text_
  bool stopped_ = false;
};

// Replaces every invalid UTF-8 sequence with U+FFFD.
std::string sanitize_utf8(const std::string& s);
// A token's bytes; U+FFFD for an id the tokenizer has no text for.
std::string token_bytes(const model::Tokenizer& tok, int32_t id);

}  // namespace minimakv::serve
