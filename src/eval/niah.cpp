#include "minimakv/eval/niah.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "phrasing.h"
#include "ruler_synthetic.h"

namespace minimakv::eval {

namespace {

constexpr size_t kMaxSentenceChars = 600;

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string plural(ValueKind k) {
  return k == ValueKind::kNumbers ? "numbers" : k == ValueKind::kWords ? "words" : "uuids";
}
std::string singular(ValueKind k) {
  return k == ValueKind::kNumbers ? "number" : k == ValueKind::kWords ? "word" : "uuid";
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  if (!f)
    throw std::runtime_error("cannot read " + path + " (run scripts/data/extract_corpus.py, or scripts/bootstrap.sh)");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(line);
  if (out.empty()) throw std::runtime_error(path + " is empty");
  return out;
}

std::string join_keys(const std::vector<std::string>& k) {
  if (k.size() == 1) return k[0];
  std::string s;
  for (size_t i = 0; i + 1 < k.size(); ++i) s += k[i] + ", ";
  return s + "and " + k.back();
}

class Draw {
 public:
  Draw(SplitMix& r, const NiahData& d) : r_(r), d_(d) {}
  std::string word() {
    return d_.adjectives[r_.below(d_.adjectives.size())] + "-" + d_.nouns[r_.below(d_.nouns.size())];
  }
  std::string number() { return std::to_string(1000000 + r_.below(9000000)); }
  std::string uuid() {
    static const char* hex = "0123456789abcdef";
    const uint64_t a = r_.next(), b = r_.next();
    std::string h(32, '0');
    for (int i = 0; i < 16; ++i) {
      h[i] = hex[(a >> (4 * i)) & 15];
      h[16 + i] = hex[(b >> (4 * i)) & 15];
    }
    h[12] = '4';                      // version 4
    h[16] = hex[8 + ((b >> 2) & 3)];  // RFC 4122 variant
    return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20);
  }
  std::string value(ValueKind k) {
    return k == ValueKind::kNumbers ? number() : k == ValueKind::kWords ? word() : uuid();
  }

 private:
  SplitMix& r_;
  const NiahData& d_;
};

}  // namespace

uint64_t SplitMix::next() {
  s_ += 0x9e3779b97f4a7c15ull;
  uint64_t z = s_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t SplitMix::below(uint64_t n) {
  if (n == 0) throw std::invalid_argument("SplitMix::below: n must be positive");
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // reject the biased tail
  uint64_t x;
  do x = next();
  while (x >= limit);
  return x % n;
}

double SplitMix::unit() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

const std::vector<TaskSpec>& ruler_niah_tasks() {
  static const std::vector<TaskSpec> tasks = {
      {"niah_single_1", Haystack::kNoise, ValueKind::kWords, ValueKind::kNumbers, 1, 1, 1},
      {"niah_single_2", Haystack::kEssay, ValueKind::kWords, ValueKind::kNumbers, 1, 1, 1},
      {"niah_single_3", Haystack::kEssay, ValueKind::kWords, ValueKind::kUuids, 1, 1, 1},
      {"niah_multikey_1", Haystack::kEssay, ValueKind::kWords, ValueKind::kNumbers, 4, 1, 1},
      {"niah_multikey_2", Haystack::kNeedles, ValueKind::kWords, ValueKind::kNumbers, 1, 1, 1},
      {"niah_multikey_3", Haystack::kNeedles, ValueKind::kUuids, ValueKind::kUuids, 1, 1, 1},
      {"niah_multivalue", Haystack::kEssay, ValueKind::kWords, ValueKind::kNumbers, 1, 4, 1},
      {"niah_multiquery", Haystack::kEssay, ValueKind::kWords, ValueKind::kNumbers, 4, 1, 4},
  };
  return tasks;
}

const std::vector<TaskSpec>& ruler_tasks() {
  static const std::vector<TaskSpec> tasks = [] {
    std::vector<TaskSpec> all = ruler_niah_tasks();
    all.push_back(
        {"vt", Haystack::kNoise, ValueKind::kWords, ValueKind::kNumbers, 1, 1, 1, TaskFamily::kVariableTracking});
    all.push_back({"cwe", Haystack::kNoise, ValueKind::kWords, ValueKind::kWords, 1, 1, 1, TaskFamily::kCommonWords});
    all.push_back({"fwe", Haystack::kNoise, ValueKind::kWords, ValueKind::kWords, 1, 1, 1, TaskFamily::kFrequentWords});
    return all;
  }();
  return tasks;
}

const std::vector<TaskSpec>& heldout_phrasing_tasks() {
  static const std::vector<TaskSpec> tasks = [] {
    std::vector<TaskSpec> out = ruler_niah_tasks();
    for (auto& t : out) {
      t.name = "heldout_" + t.name.substr(std::string_view("niah_").size());
      t.phrasing = Phrasing::kHeldOut;
    }
    return out;
  }();
  return tasks;
}

const std::vector<TaskSpec>& all_tasks() {
  static const std::vector<TaskSpec> tasks = [] {
    std::vector<TaskSpec> out = ruler_tasks();
    out.insert(out.end(), heldout_phrasing_tasks().begin(), heldout_phrasing_tasks().end());
    return out;
  }();
  return tasks;
}

const TaskSpec& task_by_name(std::string_view name) {
  std::string known;
  for (const auto& t : all_tasks()) {
    if (t.name == name) return t;
    known += (known.empty() ? "" : ", ") + t.name;
  }
  throw std::invalid_argument("unknown task '" + std::string(name) + "' (tasks: " + known + ")");
}

NiahData load_niah_data(const std::string& dir) {
  NiahData d;
  std::ifstream f(dir + "/corpus/essay.txt");
  if (!f)
    throw std::runtime_error("cannot read " + dir +
                             "/corpus/essay.txt (run scripts/data/extract_corpus.py, or scripts/bootstrap.sh)");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  // Sentences: cut after . ! ? followed by whitespace; whitespace runs become one space.
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (space) {
      if (!cur.empty() && cur.back() != ' ') cur += ' ';
    } else {
      cur += c;
    }
    const bool end = (c == '.' || c == '!' || c == '?') && i + 1 < text.size() &&
                     std::isspace(static_cast<unsigned char>(text[i + 1]));
    if (end || i + 1 == text.size()) {
      while (!cur.empty() && cur.back() == ' ') cur.pop_back();
      // Haystack units are sentences of prose: very long "sentences" (tables, code without full stops)
      // would not fit a short context and are not prose.
      if (cur.size() > 20 && cur.size() <= kMaxSentenceChars) d.essay_sentences.push_back(cur);
      cur.clear();
    }
  }
  if (d.essay_sentences.size() < 100) throw std::runtime_error(dir + "/corpus/essay.txt has too little text");
  d.adjectives = read_lines(dir + "/words/eval_adjectives.txt");
  d.nouns = read_lines(dir + "/words/eval_nouns.txt");
  // Data extracted before the phrasing parts existed still serves every RULER-phrased task.
  if (std::ifstream(dir + "/phrasings/eval_needles.txt"))
    d.heldout_phrasing = load_phrasing_parts(dir + "/phrasings", "eval");
  return d;
}

std::vector<int32_t> essay_window(const NiahData& data, const model::Tokenizer& tok, size_t first_sentence,
                                  int tokens) {
  // Prose runs at well under 6 characters per token, so one encode of that much text suffices.
  std::string text;
  for (size_t i = first_sentence; text.size() < static_cast<size_t>(tokens) * 6; ++i)
    text += (text.empty() ? "" : " ") + data.essay_sentences[i % data.essay_sentences.size()];
  auto ids = tok.encode(text);
  if (ids.size() < static_cast<size_t>(tokens)) throw std::runtime_error("essay window too short");
  ids.resize(static_cast<size_t>(tokens));
  return ids;
}

NiahGenerator::NiahGenerator(const NiahData& data, const model::Tokenizer& tok, uint64_t seed)
    : data_(data), tok_(tok), seed_(seed) {}

Example NiahGenerator::make(const TaskSpec& t, int length, int gen_budget, int index) const {
  SplitMix rng(fnv1a(
      t.name, seed_ ^ (static_cast<uint64_t>(length) << 32) ^ static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull));
  if (t.family != TaskFamily::kNiah) {
    Example ex =
        t.family == TaskFamily::kVariableTracking ? detail::make_variable_tracking(t, tok_, rng, length, gen_budget)
        : t.family == TaskFamily::kCommonWords    ? detail::make_common_words(t, data_, tok_, rng, length, gen_budget)
                                                  : detail::make_frequent_words(t, tok_, rng, length, gen_budget);
    ex.index = index;
    return ex;
  }
  Draw draw(rng, data_);
  auto key = [&] { return t.key_kind == ValueKind::kWords ? draw.word() : draw.value(t.key_kind); };
  std::vector<std::string> keys;
  while (static_cast<int>(keys.size()) < t.keys) {
    auto k = key();
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  std::vector<std::vector<std::string>> values(keys.size());
  for (auto& v : values)
    for (int j = 0; j < t.values_per_key; ++j) v.push_back(draw.value(t.value_kind));
  const std::string vp = plural(t.value_kind);
  // Held-out phrasing: one part of each category per example, drawn after the keys and values (so the
  // RULER-phrased tasks draw exactly as before).
  const PhrasingParts& phrasing = data_.heldout_phrasing;
  const bool heldout = t.phrasing == Phrasing::kHeldOut;
  if (heldout && phrasing.empty())
    throw std::runtime_error(
        "task " + t.name + " needs the held-out phrasing parts (data/phrasings/; run scripts/data/extract_corpus.py)");
  auto pick = [&](const std::vector<std::string>& v) -> const std::string& { return v[rng.below(v.size())]; };
  const auto* noun = heldout ? &phrasing.nouns[rng.below(phrasing.nouns.size())] : nullptr;
  const std::string* frame = heldout ? &pick(phrasing.needles) : nullptr;
  const std::string* verb = heldout ? &pick(phrasing.verbs) : nullptr;
  auto needle = [&](const std::string& k, const std::string& v) {
    if (heldout) return detail::fill_frame(*frame, {{"key", k}, {"value", v}, {"noun", noun->first}, {"verb", *verb}});
    return "One of the special magic " + vp + " for " + k + " is: " + v + ".";
  };
  std::vector<std::string> needles;
  for (size_t i = 0; i < keys.size(); ++i)
    for (const auto& v : values[i]) needles.push_back(needle(keys[i], v));
  detail::shuffle(needles, rng);
  std::vector<std::string> queries(keys.begin(), keys.begin() + t.queries);
  detail::shuffle(queries, rng);
  Example ex;
  ex.task = t.name;
  ex.length = length;
  ex.index = index;
  for (const auto& q : queries) {
    const auto it = std::find(keys.begin(), keys.end(), q);
    const auto& v = values[static_cast<size_t>(it - keys.begin())];
    ex.expected.insert(ex.expected.end(), v.begin(), v.end());
  }
  const bool one = ex.expected.size() == 1;
  const std::string v = one ? singular(t.value_kind) : vp;
  const std::string query = join_keys(queries);
  std::string head, tail;
  if (heldout) {
    const detail::FrameVars asked = {
        {"query", query}, {"nq", one ? noun->first : noun->second}, {"be", one ? "is" : "are"}};
    head = pick(phrasing.intros) + "\n";
    tail = "\n" + detail::fill_frame(pick(phrasing.questions), asked);
    tail += " " + detail::fill_frame(pick(phrasing.prefixes), asked);
  } else {
    head = std::string(one ? "A" : "Some") + " special magic " + v + (one ? " is" : " are") +
           " hidden within the following text. Make sure to memorize it. I will quiz you about the " + v +
           " afterwards.\n";
    tail = "\nWhat " + std::string(one ? "is" : "are all") + " the special magic " + v + " for " + query +
           " mentioned in the provided text? The special magic " + v + " for " + query +
           " mentioned in the provided text " + (one ? "is" : "are");
  }
  const int limit = length - gen_budget;
  const auto fixed = static_cast<int>(tok_.encode(head + tail).size());
  int needle_tokens = 0;
  for (const auto& n : needles) needle_tokens += static_cast<int>(tok_.encode(" " + n).size());
  if (fixed + needle_tokens + 8 > limit)
    throw std::invalid_argument("NiahGenerator: length " + std::to_string(length) + " cannot hold the " + t.name +
                                " template, its needles and a generation budget of " + std::to_string(gen_budget));
  // Haystack units with estimated token counts, until the budget is covered.
  const std::string sep = t.haystack == Haystack::kEssay ? " " : "\n";
  std::vector<std::string> units;
  std::vector<int> unit_tokens;
  size_t essay_pos = rng.below(data_.essay_sentences.size());
  int have = 0;
  const int want = limit - fixed - needle_tokens;
  while (have < want) {
    std::string u;
    if (t.haystack == Haystack::kEssay) {
      u = data_.essay_sentences[essay_pos++ % data_.essay_sentences.size()];
    } else if (t.haystack == Haystack::kNoise) {
      u = std::string(detail::kNoiseLine);
    } else {
      std::string k;
      do k = key();
      while (std::find(keys.begin(), keys.end(), k) != keys.end());
      u = needle(k, draw.value(t.value_kind));
    }
    unit_tokens.push_back(static_cast<int>(tok_.encode(sep + u).size()));
    have += unit_tokens.back();
    units.push_back(std::move(u));
  }
  // Depths: a golden-ratio sequence over example indices, needles evenly spaced from there.
  const double base = std::fmod(0.5 + 0.6180339887498949 * index, 1.0);
  for (size_t j = 0; j < needles.size(); ++j)
    ex.depths.push_back(std::fmod(base + static_cast<double>(j) / static_cast<double>(needles.size()), 1.0));
  std::sort(ex.depths.begin(), ex.depths.end());
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> parts;
    size_t next = 0;
    for (size_t i = 0; i <= units.size(); ++i) {
      while (next < needles.size() &&
             static_cast<size_t>(std::lround(ex.depths[next] * static_cast<double>(units.size()))) == i)
        parts.push_back(needles[next++]);
      if (i < units.size()) parts.push_back(units[i]);
    }
    std::string context;
    for (size_t i = 0; i < parts.size(); ++i) context += (i ? sep : "") + parts[i];
    ex.prompt = head + context + tail;
    ex.ids = tok_.encode(ex.prompt);
    const int over = static_cast<int>(ex.ids.size()) - limit;
    if (over <= 0) break;
    if (units.size() <= 1 || attempt > 64)
      throw std::runtime_error("NiahGenerator: cannot fit the " + t.name + " prompt into " + std::to_string(length) +
                               " tokens (haystack units too long)");
    // Drop enough units from the end to remove the excess (estimated), at least one.
    int removed = 0;
    while (removed < over && units.size() > 1) {
      removed += unit_tokens.back();
      unit_tokens.pop_back();
      units.pop_back();
    }
  }
  return ex;
}

double string_match_all(std::string_view output, const std::vector<std::string>& expected) {
  if (expected.empty()) return 0.0;
  std::string low(output);
  for (auto& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int hit = 0;
  for (const auto& e : expected) {
    std::string el(e);
    for (auto& c : el) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    hit += low.find(el) != std::string::npos ? 1 : 0;
  }
  return static_cast<double>(hit) / static_cast<double>(expected.size());
}

}  // namespace minimakv::eval
