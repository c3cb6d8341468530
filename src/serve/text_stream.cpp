#include "minimakv/serve/text_stream.h"

#include <algorithm>

namespace minimakv::serve {

namespace {

// Length of the complete UTF-8 sequence starting at s[i], 0 if it is invalid, -1 if it is a valid
// but unfinished prefix (more bytes may complete it).
int sequence_length(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4)) return 0;
  for (int k = 1; k < n; ++k) {
    if (i + static_cast<size_t>(k) >= s.size()) return -1;
    const auto d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((d >> 6) != 2) return 0;
    // overlong or surrogate forms
    if (k == 1 &&
        ((c == 0xe0 && d < 0xa0) || (c == 0xed && d > 0x9f) || (c == 0xf0 && d < 0x90) || (c == 0xf4 && d > 0x8f)))
      return 0;
  }
  return n;
}

const char kReplacement[] = "\xef\xbf\xbd";

}  // namespace

std::string token_bytes(const model::Tokenizer& tok, int32_t id) {
  // a dummy-weight model at a real geometry can emit ids its (smaller) tokenizer has no text for
  if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) return kReplacement;
  return tok.decode({id});
}

std::string sanitize_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int n = sequence_length(s, i);
    if (n > 0) {
      out.append(s, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

TextStream::TextStream(const model::Tokenizer& tok, std::vector<std::string> stops, bool include_stop,
                       bool skip_special)
    : tok_(tok), stops_(std::move(stops)), include_stop_(include_stop), skip_special_(skip_special) {}

std::string TextStream::token_text(int32_t token) const {
  if (skip_special_ && tok_.is_special(token)) return {};
  return sanitize_utf8(token_bytes(tok_, token));
}

std::string TextStream::take(size_t end) {
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  if (!(skip_special_ && tok_.is_special(token))) bytes_ += token_bytes(tok_, token);
  // move every complete character to the text; an invalid byte becomes U+FFFD
  size_t i = 0;
  while (i < bytes_.size()) {
    const int n = sequence_length(bytes_, i);
    if (n < 0) break;
    if (n == 0) {
      text_ += kReplacement;
      ++i;
    } else {
      text_.append(bytes_, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    }
  }
  bytes_.erase(0, i);
  if (stops_.empty()) return take(text_.size());
  // the earliest stop string from where one could still begin
  size_t hit = std::string::npos, hit_len = 0;
  for (const auto& s : stops_) {
    const size_t p = text_.find(s, searched_);
    if (p != std::string::npos && (p < hit || (p == hit && s.size() > hit_len))) {
      hit = p;
      hit_len = s.size();
    }
  }
  if (hit != std::string::npos) {
    stopped_ = true;
    const size_t end = include_stop_ ? hit + hit_len : hit;
    text_.resize(std::max(end, emitted_));
    bytes_.clear();
    return take(text_.size());
  }
  // hold back the longest tail that is a proper prefix of some stop string
  size_t hold = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  searched_ = text_.size() - hold;
  return take(std::max(emitted_, text_.size() - hold));
}

std::string TextStream::finish() {
  if (stopped_) return {};
  if (!bytes_.empty()) text_ += sanitize_utf8(bytes_);
  bytes_.clear();
  return take(text_.size());
}

}  // namespace minimakv::serve
