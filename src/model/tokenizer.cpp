#include "minimakv/model/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

namespace minimakv::model {

namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) { throw TokenizerError(name + ": " + what); }

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's reversible map from bytes to printable code points.
struct ByteAlphabet {
  std::array<std::string, 256> to_unicode;
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteAlphabet() {
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = direct[b] ? static_cast<uint32_t>(b) : next++;
      append_utf8(to_unicode[b], cp);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// Splits UTF-8 into code points (the byte-level alphabet is all BMP).
std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

uint32_t decode_cp(std::string_view s) {
  const auto c0 = static_cast<unsigned char>(s[0]);
  if (c0 < 0x80) return c0;
  if ((c0 >> 5) == 6) return ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[1]) & 0x3Fu);
  if ((c0 >> 4) == 14)
    return ((c0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[1]) & 0x3Fu) << 6) |
           (static_cast<unsigned char>(s[2]) & 0x3Fu);
  return 0xFFFD;
}

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& name) {
    int err = 0;
    PCRE2_SIZE off = 0;
    re_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                        &err, &off, nullptr);
    if (!re_) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      fail(name, "pre-tokenizer regex does not compile at offset " + std::to_string(off) + ": " +
                     reinterpret_cast<const char*>(buf));
    }
    pcre2_jit_compile(re_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(re_); }

  // Pieces of `s` with "isolated" behaviour: every match and every gap between matches.
  void split(std::string_view s, std::vector<std::string_view>& out) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re_, nullptr);
    size_t pos = 0, last = 0;
    uint32_t options = 0;  // the first call validates the UTF-8 of the whole subject; later ones skip it
    while (pos <= s.size()) {
      const int rc = pcre2_match(re_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, options, md, nullptr);
      options = PCRE2_NO_UTF_CHECK;
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
        pcre2_match_data_free(md);
        throw std::invalid_argument("tokenizer: the text is not valid UTF-8");
      }
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t b = ov[0], e = ov[1];
      if (b > last) out.push_back(s.substr(last, b - last));
      if (e > b) out.push_back(s.substr(b, e - b));
      last = e;
      if (e == b) {  // empty match: step over one code point
        if (e >= s.size()) break;
        pos = e + 1;
        while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
      } else {
        pos = e;
      }
    }
    pcre2_match_data_free(md);
    if (last < s.size()) out.push_back(s.substr(last));
  }

 private:
  pcre2_code* re_ = nullptr;
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A symbol of a word being merged: a vocabulary id in a doubly linked list over the word's positions.
struct Symbol {
  int32_t id;
  int32_t prev, next;  // -1 at the ends
  bool gone;           // merged into its left neighbour
};

// A candidate merge of the symbol at `pos` with its right neighbour. The heap pops the lowest rank
// first and, among equal ranks, the leftmost position, which is the order the reference library
// applies merges in (and equals "merge every occurrence of the best pair, left to right").
struct Candidate {
  int32_t rank, pos, merged_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

constexpr uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

struct Tokenizer::Impl {
  std::string name;
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_token;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left id, right id) -> (rank, merged id)
  std::array<int32_t, 256> byte_id{};                // id of each byte's one-character token, -1 if none
  std::vector<std::pair<std::string, int32_t>> added;  // longest first
  std::vector<int32_t> special;                        // added tokens marked special, sorted
  std::unique_ptr<Regex> split_re;                 // Split pre-tokenizer
  std::unique_ptr<Regex> bytelevel_re;             // ByteLevel(use_regex = true)
  bool add_prefix_space = false;
  bool ignore_merges = false;
  size_t max_token_bytes = 1;  // the longest token's byte length: n bytes encode to at least n / this many ids
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
  static constexpr size_t kCachedPieceBytes = 256;  // longer pieces are rare and would bloat the cache

  // Merges the bytes of one pre-tokenized piece by rank: O(n log n) for n bytes, through a heap of
  // candidate merges over a linked list of symbols (a stale candidate is skipped when popped).
  void merge_word(std::string_view piece, std::vector<int32_t>& ids) const {
    std::vector<Symbol> sym(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) {
      const int32_t id = byte_id[static_cast<unsigned char>(piece[i])];
      if (id < 0) fail(name, "symbol '" + alphabet().to_unicode[static_cast<unsigned char>(piece[i])] + "' is not in the vocabulary");
      sym[i] = {id, static_cast<int32_t>(i) - 1, i + 1 < piece.size() ? static_cast<int32_t>(i + 1) : -1, false};
    }
    std::vector<Candidate> heap;
    heap.reserve(piece.size());
    auto consider = [&](int32_t pos) {
      const int32_t next = sym[static_cast<size_t>(pos)].next;
      if (next < 0) return;
      auto it = merges.find(pair_key(sym[static_cast<size_t>(pos)].id, sym[static_cast<size_t>(next)].id));
      if (it == merges.end()) return;
      heap.push_back({it->second.first, pos, it->second.second});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& left = sym[static_cast<size_t>(c.pos)];
      if (left.gone || left.next < 0) continue;
      const Symbol& right = sym[static_cast<size_t>(left.next)];
      auto it = merges.find(pair_key(left.id, right.id));
      if (it == merges.end() || it->second.second != c.merged_id) continue;  // the pair has changed since
      const int32_t gone = left.next;
      left.id = c.merged_id;
      left.next = right.next;
      sym[static_cast<size_t>(gone)].gone = true;
      if (left.next >= 0) sym[static_cast<size_t>(left.next)].prev = c.pos;
      if (left.prev >= 0) consider(left.prev);
      consider(c.pos);
    }
    for (size_t i = 0; i < sym.size(); i = sym[i].next < 0 ? sym.size() : static_cast<size_t>(sym[i].next))
      ids.push_back(sym[i].id);
  }

  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    const bool cacheable = piece.size() <= kCachedPieceBytes;
    std::string key;
    if (cacheable || ignore_merges) for (unsigned char b : piece) key += alphabet().to_unicode[b];
    if (cacheable) {
      std::lock_guard lock(cache_mu);
      if (auto it = cache.find(key); it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids;
    if (ignore_merges) {
      if (auto it = vocab.find(key); it != vocab.end()) ids.push_back(it->second);
    }
    if (ids.empty()) merge_word(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (!cacheable) return;
    std::lock_guard lock(cache_mu);
    if (cache.size() < 200000) cache.emplace(std::move(key), std::move(ids));
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out, size_t limit) const {
    std::string prefixed;
    if (add_prefix_space && !text.empty() && text.front() != ' ') {
      prefixed = " " + std::string(text);
      text = prefixed;
    }
    std::vector<std::string_view> pieces;
    if (split_re) {
      std::vector<std::string_view> first;
      split_re->split(text, first);
      if (bytelevel_re)
        for (auto p : first) bytelevel_re->split(p, pieces);
      else
        pieces = std::move(first);
    } else if (bytelevel_re) {
      bytelevel_re->split(text, pieces);
    } else {
      pieces.push_back(text);
    }
    for (auto p : pieces) {
      if (out.size() > limit) return;  // the caller only needs to know the limit was passed
      bpe(p, out);
    }
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw TokenizerError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), path);
}

Tokenizer Tokenizer::from_json(const std::string& text, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(name, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(name, "not a JSON object");
  std::unique_ptr<Impl> impl;
  try {  // a field of the wrong JSON type is a malformed file, named as such
    impl = std::make_unique<Impl>();
    impl->name = name;
    const auto& m = j.value("model", nlohmann::json::object());
    if (!m.is_object()) fail(name, "'model' is not an object");
    if (m.value("type", std::string()) != "BPE") fail(name, "unsupported tokenizer model '" + m.value("type", std::string("?")) + "' (supported: BPE)");
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      fail(name, "unsupported normalizer '" + j["normalizer"].value("type", std::string("?")) + "' (supported: none)");
    impl->ignore_merges = m.value("ignore_merges", false);
    for (auto it = m.at("vocab").begin(); it != m.at("vocab").end(); ++it) impl->vocab[it.key()] = it.value().get<int32_t>();
    int32_t rank = 0;
    for (const auto& mg : m.value("merges", nlohmann::json::array())) {
      std::string a, b;
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos) fail(name, "malformed merge '" + s + "'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (mg.is_array() && mg.size() == 2) {
        a = mg[0].get<std::string>();
        b = mg[1].get<std::string>();
      } else {
        fail(name, "malformed merge entry");
      }
      const auto ia = impl->vocab.find(a), ib = impl->vocab.find(b), iab = impl->vocab.find(a + b);
      if (ia == impl->vocab.end() || ib == impl->vocab.end() || iab == impl->vocab.end())
        fail(name, "merge '" + a + " " + b + "' uses a token that is not in the vocabulary");
      impl->merges.emplace(pair_key(ia->second, ib->second), std::make_pair(rank++, iab->second));
    }
    for (int b = 0; b < 256; ++b) {
      auto it = impl->vocab.find(alphabet().to_unicode[static_cast<size_t>(b)]);
      impl->byte_id[static_cast<size_t>(b)] = it == impl->vocab.end() ? -1 : it->second;
    }
    size_t max_id = 0;
    for (const auto& [t, id] : impl->vocab) {
      if (id < 0) fail(name, "token '" + t + "' has a negative id");
      max_id = std::max(max_id, static_cast<size_t>(id));
      impl->max_token_bytes = std::max(impl->max_token_bytes, utf8_chars(t).size());  // one byte per character
    }
    for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
      const auto id = a.at("id").get<int32_t>();
      const auto content = a.at("content").get<std::string>();
      if (id < 0) fail(name, "added token '" + content + "' has a negative id");
      if (content.empty()) fail(name, "added token " + std::to_string(id) + " is empty");
      impl->added.emplace_back(content, id);
      if (a.value("special", false)) impl->special.push_back(id);
      impl->max_token_bytes = std::max(impl->max_token_bytes, content.size());
      max_id = std::max(max_id, static_cast<size_t>(id));
    }
    std::sort(impl->special.begin(), impl->special.end());
    std::sort(impl->added.begin(), impl->added.end(),
              [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
    impl->id_to_token.resize(max_id + 1);
    for (const auto& [t, id] : impl->vocab) impl->id_to_token[id] = t;
    const auto pre = j.value("pre_tokenizer", nlohmann::json());
    auto use_component = [&](const nlohmann::json& p) {
      const std::string type = p.value("type", std::string());
      if (type == "Split") {
        if (!p.contains("pattern") || !p["pattern"].contains("Regex")) fail(name, "Split pre-tokenizer without a Regex pattern");
        if (p.value("behavior", std::string("Isolated")) != "Isolated" || p.value("invert", false))
          fail(name, "unsupported Split behaviour (supported: Isolated, invert false)");
        impl->split_re = std::make_unique<Regex>(p["pattern"]["Regex"].get<std::string>(), name);
      } else if (type == "ByteLevel") {
        impl->add_prefix_space = p.value("add_prefix_space", false);
        if (p.value("use_regex", true)) impl->bytelevel_re = std::make_unique<Regex>(kGpt2Pattern, name);
      } else {
        fail(name, "unsupported pre-tokenizer '" + type + "' (supported: Split, ByteLevel, Sequence of them)");
      }
    };
    if (pre.is_object()) {
      if (pre.value("type", std::string()) == "Sequence")
        for (const auto& p : pre.at("pretokenizers")) use_component(p);
      else
        use_component(pre);
    }
    const auto dec = j.value("decoder", nlohmann::json());
    if (!dec.is_null() && dec.value("type", std::string()) != "ByteLevel")
      fail(name, "unsupported decoder '" + dec.value("type", std::string("?")) + "' (supported: ByteLevel)");
  } catch (const nlohmann::json::exception& e) {
    fail(name, std::string("malformed tokenizer.json: ") + e.what());
  }
  return Tokenizer(std::move(impl));
}

// Splits on added tokens and encodes the text between them, stopping once `out` holds more than `limit`
// ids. Each added token's next occurrence is found once and reused until the scan passes it, so a text
// full of special tokens costs O(bytes x added tokens), not a rescan of the rest per occurrence.
void Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out, size_t limit) const {
  const auto& added = impl_->added;
  std::vector<size_t> next(added.size(), 0);
  std::vector<bool> stale(added.size(), true);
  size_t pos = 0;
  while (pos < text.size() && out.size() <= limit) {
    // leftmost added token, longest first at equal positions (the list is sorted longest first)
    size_t best = std::string_view::npos;
    size_t hit = added.size();
    for (size_t a = 0; a < added.size(); ++a) {
      if (stale[a] || (next[a] != std::string_view::npos && next[a] < pos)) {
        next[a] = text.find(added[a].first, pos);
        stale[a] = false;
      }
      if (next[a] != std::string_view::npos && next[a] < best) {
        best = next[a];
        hit = a;
      }
    }
    const size_t end = hit < added.size() ? best : text.size();
    if (end > pos) impl_->encode_text(text.substr(pos, end - pos), out, limit);
    if (hit == added.size() || out.size() > limit) break;
    out.push_back(added[hit].second);
    pos = best + added[hit].first.size();
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_into(text, out, std::numeric_limits<size_t>::max() - 1);
  return out;
}

std::optional<std::vector<int32_t>> Tokenizer::encode_bounded(std::string_view text, size_t max_tokens) const {
  // A token holds at most max_token_bytes bytes, so a longer text cannot fit: rejected unread.
  if (max_tokens < std::numeric_limits<size_t>::max() / impl_->max_token_bytes &&
      text.size() > max_tokens * impl_->max_token_bytes)
    return std::nullopt;
  std::vector<int32_t> out;
  encode_into(text, out, max_tokens);
  if (out.size() > max_tokens) return std::nullopt;
  return out;
}

size_t Tokenizer::max_token_bytes() const { return impl_->max_token_bytes; }

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size())
      fail(impl_->name, "token id " + std::to_string(id) + " is out of range");
    auto added = std::find_if(impl_->added.begin(), impl_->added.end(), [&](const auto& a) { return a.second == id; });
    if (added != impl_->added.end()) {
      bytes += added->first;
      continue;
    }
    for (const auto& ch : utf8_chars(impl_->id_to_token[id])) {
      auto it = alphabet().to_byte.find(decode_cp(ch));
      if (it == alphabet().to_byte.end()) fail(impl_->name, "token " + std::to_string(id) + " is not byte-level");
      bytes += static_cast<char>(it->second);
    }
  }
  return bytes;
}

bool Tokenizer::is_special(int32_t id) const {
  return std::binary_search(impl_->special.begin(), impl_->special.end(), id);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const auto& a : impl_->added)
    if (a.first == token) return a.second;
  auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

size_t Tokenizer::vocab_size() const { return impl_->id_to_token.size(); }

}  // namespace minimakv::model
