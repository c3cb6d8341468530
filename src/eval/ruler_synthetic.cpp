#include "ruler_synthetic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace minimakv::eval::detail {

namespace {

std::string letters(SplitMix& rng, int n, char first) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>(first + rng.below(26));
  return s;
}

int tokens_of(const model::Tokenizer& tok, const std::string& s) {
  return static_cast<int>(tok.encode(s).size());
}

[[noreturn]] void too_short(const TaskSpec& t, int length, int gen_budget) {
  throw std::invalid_argument("RULER task " + t.name + ": length " + std::to_string(length) +
                              " cannot hold its template, its content and a generation budget of " +
                              std::to_string(gen_budget));
}

// Encodes head + body(n) + tail with the largest n <= n_max that fits `limit` tokens, shrinking n by the
// estimated excess; body must be deterministic in n. Returns the n it took.
template <typename Body>
int fit(Example& ex, const model::Tokenizer& tok, const std::string& head, const std::string& tail, int limit,
        int n_max, int n_min, double tokens_per_unit, const Body& body, const TaskSpec& t, int gen_budget) {
  int n = n_max;
  for (int attempt = 0;; ++attempt) {
    if (n < n_min || attempt > 64) too_short(t, ex.length, gen_budget);
    ex.prompt = head + body(n) + tail;
    ex.ids = tok.encode(ex.prompt);
    const int over = static_cast<int>(ex.ids.size()) - limit;
    if (over <= 0) return n;
    n -= std::max(1, static_cast<int>(std::ceil(over / std::max(tokens_per_unit, 0.5))));
  }
}

}  // namespace

Example make_variable_tracking(const TaskSpec& t, const model::Tokenizer& tok, SplitMix& rng, int length,
                               int gen_budget) {
  const AggregationSpec& a = t.aggregation;
  Example ex;
  ex.task = t.name;
  ex.length = length;
  // Chain c: its first variable takes a five-digit value, each next one the previous variable.
  std::set<std::string> names;
  std::vector<std::vector<std::string>> chains(static_cast<size_t>(a.chains));
  std::vector<std::string> values;
  for (auto& chain : chains) {
    std::string v;
    do v = std::to_string(10000 + rng.below(90000));
    while (std::find(values.begin(), values.end(), v) != values.end());
    values.push_back(v);
    while (static_cast<int>(chain.size()) < a.hops + 1) {
      const std::string name = letters(rng, 5, 'A');
      if (names.insert(name).second) chain.push_back(name);
    }
  }
  // Statements in chain order; chains interleave at random, each keeps its order.
  std::vector<std::string> statements;
  {
    std::vector<size_t> next(chains.size(), 0);
    std::vector<size_t> open;
    for (size_t c = 0; c < chains.size(); ++c) open.push_back(c);
    while (!open.empty()) {
      const size_t pick = rng.below(open.size()), c = open[pick];
      const size_t i = next[c]++;
      statements.push_back("VAR " + chains[c][i] + " = " + (i == 0 ? values[c] : "VAR " + chains[c][i - 1]) + ".");
      if (next[c] == chains[c].size()) open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }
  const size_t query = rng.below(chains.size());
  ex.expected = chains[query];
  const std::string head = "Memorize and track every chain of variable assignments hidden in the following text.\n\n";
  const std::string tail = "\nQuestion: Find all variables that are assigned the value " + values[query] +
                           " in the text above. Answer: According to the chains of variable assignments in the "
                           "text above, " +
                           std::to_string(ex.expected.size()) + " variables are assigned the value " + values[query] +
                           ", they are:";
  const int limit = length - gen_budget;
  const int line = tokens_of(tok, "\n" + std::string(kNoiseLine));
  int fixed = tokens_of(tok, head + tail);
  for (const auto& s : statements) fixed += tokens_of(tok, "\n" + s);
  if (fixed + line > limit) too_short(t, length, gen_budget);
  // Depths of the statements: sorted uniform draws, so the chain reads top to bottom.
  std::vector<double> at;
  for (size_t i = 0; i < statements.size(); ++i) at.push_back(rng.unit());
  std::sort(at.begin(), at.end());
  ex.depths = at;
  const auto body = [&](int lines) {
    std::string s;
    size_t next = 0;
    for (int i = 0; i <= lines; ++i) {
      while (next < statements.size() && std::lround(at[next] * lines) == i)
        s += (s.empty() ? "" : "\n") + statements[next++];
      if (i < lines) s += (s.empty() ? "" : "\n") + std::string(kNoiseLine);
    }
    return s;
  };
  fit(ex, tok, head, tail, limit, (limit - fixed) / line + 1, 1, line, body, t, gen_budget);
  return ex;
}

Example make_common_words(const TaskSpec& t, const NiahData& data, const model::Tokenizer& tok, SplitMix& rng,
                          int length, int gen_budget) {
  const AggregationSpec& a = t.aggregation;
  Example ex;
  ex.task = t.name;
  ex.length = length;
  // Single words from the held-out lists, in a random order: the first common_words are the common ones.
  std::vector<std::string> pool;
  {
    std::set<std::string> seen;
    for (const auto* list : {&data.nouns, &data.adjectives})
      for (const auto& w : *list)
        if (w.find_first_of(" -") == std::string::npos && seen.insert(w).second) pool.push_back(w);
  }
  shuffle(pool, rng);
  if (static_cast<int>(pool.size()) < a.common_words + 1)
    throw std::invalid_argument("RULER task " + t.name + ": the word lists hold too few distinct words");
  const std::vector<std::string> common(pool.begin(), pool.begin() + a.common_words);
  ex.expected = common;
  const std::string head =
      "Below is a numbered list of words. Some of them appear more often than others. Memorize the ones that "
      "appear most often.\n";
  const std::string tail = "\nQuestion: What are the " + std::to_string(a.common_words) +
                           " most common words in the above list? Answer: The top " + std::to_string(a.common_words) +
                           " words that appear most often in the list are:";
  const int limit = length - gen_budget;
  const int fixed = tokens_of(tok, head + tail);
  // Tokens of one numbered entry, measured on a sample of the pool.
  std::string sample;
  const int probe = std::min<int>(64, static_cast<int>(pool.size()));
  for (int i = 0; i < probe; ++i) sample += "\n" + std::to_string(1000 + i) + ". " + pool[static_cast<size_t>(i)];
  const double per_entry = static_cast<double>(tokens_of(tok, sample)) / probe;
  const int entries = static_cast<int>((limit - fixed) / per_entry);
  // Common words fill at most half of the list.
  const int common_freq = std::min(a.common_freq, entries / (2 * a.common_words));
  if (common_freq < a.rare_freq + 2) too_short(t, length, gen_budget);
  // Start above the estimate (the sample's four-digit numbers cost more than most entries' do) and let
  // the fit shrink the list.
  const int entries_hi = static_cast<int>((limit - fixed) / (0.8 * per_entry));
  const int rare_max = std::min(static_cast<int>(pool.size()) - a.common_words,
                                (entries_hi - common_freq * a.common_words) / a.rare_freq);
  // The order of every entry is drawn once for the largest list; smaller lists keep its relative order.
  std::vector<uint64_t> keys(static_cast<size_t>(common_freq * a.common_words + rare_max * a.rare_freq));
  for (auto& k : keys) k = rng.next();
  const auto body = [&](int rare) {
    std::vector<std::pair<uint64_t, const std::string*>> list;
    size_t k = 0;
    for (const auto& w : common)
      for (int f = 0; f < common_freq; ++f) list.emplace_back(keys[k++], &w);
    for (int r = 0; r < rare; ++r)
      for (int f = 0; f < a.rare_freq; ++f)
        list.emplace_back(keys[k++], &pool[static_cast<size_t>(a.common_words + r)]);
    std::sort(list.begin(), list.end());
    std::string s;
    for (size_t i = 0; i < list.size(); ++i) s += (i ? "\n" : "") + std::to_string(i + 1) + ". " + *list[i].second;
    return s;
  };
  fit(ex, tok, head, tail, limit, rare_max, 0, per_entry * a.rare_freq, body, t, gen_budget);
  return ex;
}

Example make_frequent_words(const TaskSpec& t, const model::Tokenizer& tok, SplitMix& rng, int length, int gen_budget) {
  const AggregationSpec& a = t.aggregation;
  Example ex;
  ex.task = t.name;
  ex.length = length;
  // A vocabulary of distinct coded words and the Zipf weights of their ranks.
  constexpr int kVocab = 1000;
  std::vector<std::string> vocab;
  {
    std::set<std::string> seen;
    while (static_cast<int>(vocab.size()) < kVocab) {
      std::string w = letters(rng, 3 + static_cast<int>(rng.below(4)), 'a');
      if (seen.insert(w).second) vocab.push_back(std::move(w));
    }
  }
  std::vector<double> cdf(kVocab);
  double total = 0.0;
  for (int r = 0; r < kVocab; ++r) cdf[static_cast<size_t>(r)] = total += std::pow(r + 1.0, -a.zipf_alpha);
  const std::string head = "Read the following coded text and track how often each coded word appears.\n";
  const std::string tail = "\nQuestion: What are the " + std::to_string(a.top_words) +
                           " most frequent coded words in the above text? Answer: According to the coded text "
                           "above, the " +
                           std::to_string(a.top_words) + " most frequent words are:";
  const int limit = length - gen_budget;
  const int fixed = tokens_of(tok, head + tail);
  // Draw the longest text the budget could hold (a word takes at least one token); shorter ones are its
  // prefixes. Frequent words dominate the text, so its cost per word is measured on the draws themselves.
  const int n_max = limit - fixed;
  if (n_max < 8 * a.top_words) too_short(t, length, gen_budget);
  std::vector<int> draws(static_cast<size_t>(n_max));
  auto draw_all = [&] {
    for (auto& d : draws)
      d = static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), rng.unit() * total) - cdf.begin());
  };
  draw_all();
  const auto body = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + vocab[static_cast<size_t>(draws[static_cast<size_t>(i)])];
    return s;
  };
  const int probe = std::min(n_max, 512);
  const double per_word = static_cast<double>(tokens_of(tok, " " + body(probe))) / probe;
  const int n_start = std::min(n_max, static_cast<int>((limit - fixed) / (0.9 * per_word)));
  // Shrinking the text to fit may tie the top words: then swap in fresh draws for the tail and refit.
  for (int attempt = 0;; ++attempt) {
    const int n = fit(ex, tok, head, tail, limit, n_start, 8 * a.top_words, per_word, body, t, gen_budget);
    std::map<int, int> counts;
    for (int i = 0; i < n; ++i) ++counts[draws[static_cast<size_t>(i)]];
    std::vector<std::pair<int, int>> by_count;  // (count, rank)
    for (const auto& [rank, c] : counts) by_count.emplace_back(c, rank);
    std::sort(by_count.begin(), by_count.end(),
              [](auto x, auto y) { return x.first != y.first ? x.first > y.first : x.second < y.second; });
    const bool clear =
        static_cast<int>(by_count.size()) > a.top_words &&
        by_count[static_cast<size_t>(a.top_words - 1)].first > by_count[static_cast<size_t>(a.top_words)].first;
    if (clear) {
      ex.expected.clear();
      for (int i = 0; i < a.top_words; ++i)
        ex.expected.push_back(vocab[static_cast<size_t>(by_count[static_cast<size_t>(i)].second)]);
      return ex;
    }
    if (attempt > 32) throw std::runtime_error("RULER task " + t.name + ": no clear top words after 32 draws");
    draw_all();
  }
}

}  // namespace minimakv::eval::detail
