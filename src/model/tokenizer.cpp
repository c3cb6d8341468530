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

}  // namespace

struct Tokenizer::Impl {
  std::string name;
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_token;
  std::unordered_map<std::string, int32_t> ranks;  // "left\nright" -> rank
  std::vector<std::pair<std::string, int32_t>> added;  // longest first
  std::unique_ptr<Regex> split_re;                 // Split pre-tokenizer
  std::unique_ptr<Regex> bytelevel_re;             // ByteLevel(use_regex = true)
  bool add_prefix_space = false;
  bool ignore_merges = false;
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    std::string mapped;
    for (unsigned char b : piece) mapped += alphabet().to_unicode[b];
    {
      std::lock_guard lock(cache_mu);
      if (auto it = cache.find(mapped); it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids;
    if (ignore_merges) {
      if (auto it = vocab.find(mapped); it != vocab.end()) ids.push_back(it->second);
    }
    if (ids.empty()) {
      std::vector<std::string> sym = utf8_chars(mapped);
      for (;;) {
        int best = std::numeric_limits<int>::max();
        size_t at = 0;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
          auto it = ranks.find(sym[i] + '\n' + sym[i + 1]);
          if (it != ranks.end() && it->second < best) {
            best = it->second;
            at = i;
          }
        }
        if (best == std::numeric_limits<int>::max()) break;
        const std::string left = sym[at], right = sym[at + 1];
        std::vector<std::string> next;
        next.reserve(sym.size());
        for (size_t i = 0; i < sym.size(); ++i) {  // merge every occurrence, left to right
          if (i + 1 < sym.size() && sym[i] == left && sym[i + 1] == right) {
            next.push_back(left + right);
            ++i;
          } else {
            next.push_back(sym[i]);
          }
        }
        sym.swap(next);
      }
      for (const auto& s : sym) {
        auto it = vocab.find(s);
        if (it == vocab.end()) fail(name, "symbol '" + s + "' is not in the vocabulary");
        ids.push_back(it->second);
      }
    }
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard lock(cache_mu);
    if (cache.size() < 200000) cache.emplace(std::move(mapped), std::move(ids));
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const {
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
    for (auto p : pieces) bpe(p, out);
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
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  const auto& m = j.value("model", nlohmann::json::object());
  if (m.value("type", std::string()) != "BPE") fail(name, "unsupported tokenizer model '" + m.value("type", std::string("?")) + "' (supported: BPE)");
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    fail(name, "unsupported normalizer '" + j["normalizer"].value("type", std::string("?")) + "' (supported: none)");
  impl->ignore_merges = m.value("ignore_merges", false);
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) impl->vocab[it.key()] = it.value().get<int32_t>();
  int32_t rank = 0;
  for (const auto& mg : m["merges"]) {
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
    impl->ranks.emplace(a + '\n' + b, rank++);
  }
  size_t max_id = 0;
  for (const auto& [t, id] : impl->vocab) max_id = std::max(max_id, static_cast<size_t>(id));
  for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
    const auto id = a["id"].get<int32_t>();
    const auto content = a["content"].get<std::string>();
    impl->added.emplace_back(content, id);
    max_id = std::max(max_id, static_cast<size_t>(id));
  }
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
      for (const auto& p : pre["pretokenizers"]) use_component(p);
    else
      use_component(pre);
  }
  const auto dec = j.value("decoder", nlohmann::json());
  if (!dec.is_null() && dec.value("type", std::string()) != "ByteLevel")
    fail(name, "unsupported decoder '" + dec.value("type", std::string("?")) + "' (supported: ByteLevel)");
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    // leftmost added token, longest first at equal positions
    size_t best = std::string_view::npos;
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& a : impl_->added) {
      const size_t f = text.find(a.first, pos);
      if (f != std::string_view::npos && (f < best || (f == best && hit && a.first.size() > hit->first.size()))) {
        best = f;
        hit = &a;
      }
    }
    const size_t end = hit ? best : text.size();
    if (end > pos) impl_->encode_text(text.substr(pos, end - pos), out);
    if (!hit) break;
    out.push_back(hit->second);
    pos = best + hit->first.size();
  }
  return out;
}

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

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const auto& a : impl_->added)
    if (a.first == token) return a.second;
  auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

size_t Tokenizer::vocab_size() const { return impl_->id_to_token.size(); }

}  // namespace minimakv::model
