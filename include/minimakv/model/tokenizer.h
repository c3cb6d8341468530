// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (GPT-2 / Qwen / Llama-3 style).
//
// Owns: the vocabulary, merge ranks, added/special tokens and the pre-tokenizer regexes (PCRE2 with
// Unicode properties). encode(): split on added tokens, then the pre-tokenizer's Split regex pieces
// (isolated) and/or the GPT-2 ByteLevel regex, map bytes to the GPT-2 byte-to-unicode alphabet, and
// apply merges by rank within each piece (a heap of candidate merges: O(n log n) for a piece of n
// bytes, so a long run without spaces costs no more than prose). decode() inverts it. Supported: model BPE, normalizer null,
// pre_tokenizer ByteLevel or Sequence[Split, ByteLevel], decoder ByteLevel. Anything else throws
// TokenizerError naming the file and the unsupported component. Thread-safe for concurrent encode().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace minimakv::model {

struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Tokenizer {
 public:
  static Tokenizer load(const std::string& path);  // a tokenizer.json file
  static Tokenizer from_json(const std::string& json_text, const std::string& name);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;
  // The ids of `text` if it encodes to at most max_tokens of them, else nullopt, in time bounded by
  // the limit: a text longer than max_tokens x max_token_bytes() is rejected without being read, and
  // encoding stops as soon as the limit is passed.
  std::optional<std::vector<int32_t>> encode_bounded(std::string_view text, size_t max_tokens) const;
  size_t max_token_bytes() const;  // bytes of the longest token, added tokens included
  std::string decode(const std::vector<int32_t>& ids) const;
  std::optional<int32_t> token_id(std::string_view token) const;
  bool is_special(int32_t id) const;  // an added token marked "special" (skipped by skip_special_tokens)
  size_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  void encode_into(std::string_view text, std::vector<int32_t>& out, size_t limit) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minimakv::model
