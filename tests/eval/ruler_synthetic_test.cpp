// RULER's variable tracking (vt), common words (cwe) and frequent words (fwe) extraction: each prompt
// is re-read here, independently of the generator, and its expected answer recomputed from the text
// (the chain that ends in the queried value, the most frequent words of the list); prompts fit the
// length in model tokens and fill most of it; the same seed gives the same bytes; a length too short
// for a task is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "minimakv/eval/niah.h"
#include "shipped_tokenizer.h"
#include "test_util.h"

namespace minimakv::eval {
namespace {

const model::Tokenizer& tokenizer() {
  return testing::shipped_tokenizer();
}

// Enough distinct words for the rare entries of a long list (the essay is not used by these tasks).
NiahData synthetic_data(std::mt19937_64& rng) {
  NiahData d;
  d.essay_sentences.assign(200, "The river runs past the stone.");
  std::set<std::string> seen;
  while (seen.size() < 3000) {
    std::string w;
    const int n = 4 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) w += static_cast<char>('a' + rng() % 26);
    if (seen.insert(w).second) (seen.size() % 3 ? d.nouns : d.adjectives).push_back(w);
  }
  return d;
}

std::set<std::string> as_set(const std::vector<std::string>& v) {
  return {v.begin(), v.end()};
}

// The text between the task's instruction line and its question.
std::string body_of(const std::string& prompt) {
  const size_t b = prompt.find('\n'), e = prompt.rfind("\nQuestion:");
  EXPECT_NE(b, std::string::npos);
  EXPECT_NE(e, std::string::npos);
  return prompt.substr(b + 1, e - b - 1);
}

TEST(RulerSynthetic, TheTasksAreKnownByNameBesideTheEightNiahTasks) {
  EXPECT_EQ(ruler_niah_tasks().size(), 8u);
  EXPECT_EQ(ruler_tasks().size(), 11u);
  EXPECT_EQ(all_tasks().size(), 19u);
  EXPECT_EQ(task_by_name("heldout_multiquery").phrasing, Phrasing::kHeldOut);
  EXPECT_EQ(task_by_name("niah_multiquery").phrasing, Phrasing::kRuler);
  EXPECT_EQ(task_by_name("vt").family, TaskFamily::kVariableTracking);
  EXPECT_EQ(task_by_name("cwe").family, TaskFamily::kCommonWords);
  EXPECT_EQ(task_by_name("fwe").family, TaskFamily::kFrequentWords);
  try {
    task_by_name("qa_1");
    FAIL() << "accepted an unknown task";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fwe"), std::string::npos) << e.what();
  }
}

TEST(RulerSynthetic, SameSeedSameBytesAndPromptsFillTheirLength) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const uint64_t seed = rng();
  const NiahGenerator a(data, tokenizer(), seed), b(data, tokenizer(), seed);
  for (const char* name : {"vt", "cwe", "fwe"})
    for (const int length : {2048, 4096}) {
      const auto& t = task_by_name(name);
      const auto x = a.make(t, length, 64, 5), y = b.make(t, length, 64, 5), z = a.make(t, length, 64, 6);
      EXPECT_EQ(x.prompt, y.prompt) << name;
      EXPECT_NE(x.prompt, z.prompt) << name;
      EXPECT_EQ(x.ids, tokenizer().encode(x.prompt)) << name;
      EXPECT_LE(static_cast<int>(x.ids.size()), length - 64) << name;
      EXPECT_GE(static_cast<int>(x.ids.size()), (length - 64) * 9 / 10) << name << ": the context is not filled";
      EXPECT_EQ(x.task, name);
      EXPECT_EQ(x.index, 5);
    }
}

TEST(RulerSynthetic, VariableTrackingAnswersTheChainThatHoldsTheQueriedValue) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), rng());
  const std::regex stmt(R"(VAR ([A-Z]{5}) = (?:VAR ([A-Z]{5})|(\d{5}))\.)");
  const std::regex question(R"(assigned the value (\d{5}) in the text above)");
  for (int i = 0; i < 20; ++i) {
    const auto ex = gen.make(task_by_name("vt"), 4096, 64, i);
    std::map<std::string, std::string> value;  // variable -> the value it holds
    for (auto it = std::sregex_iterator(ex.prompt.begin(), ex.prompt.end(), stmt); it != std::sregex_iterator(); ++it) {
      const auto& m = *it;
      ASSERT_FALSE(value.count(m[1])) << "assigned twice";
      if (m[3].matched) {
        value[m[1]] = m[3];
      } else {
        ASSERT_TRUE(value.count(m[2])) << m[1] << " copies " << m[2] << " before it is assigned";
        value[m[1]] = value[m[2]];
      }
    }
    std::smatch q;
    ASSERT_TRUE(std::regex_search(ex.prompt, q, question));
    std::set<std::string> holders;
    for (const auto& [var, v] : value)
      if (v == q[1]) holders.insert(var);
    EXPECT_EQ(holders, as_set(ex.expected));
    EXPECT_EQ(ex.expected.size(), 5u);  // one chain of four hops
    EXPECT_NE(ex.prompt.find("5 variables are assigned the value " + std::string(q[1])), std::string::npos);
  }
}

TEST(RulerSynthetic, CommonWordsAreTheTenMostFrequentEntriesOfTheList) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), rng());
  for (const int length : {2048, 8192})
    for (int i = 0; i < 4; ++i) {
      const auto ex = gen.make(task_by_name("cwe"), length, 64, i);
      std::istringstream lines(body_of(ex.prompt));
      std::map<std::string, int> count;
      std::string line;
      int number = 0;
      while (std::getline(lines, line)) {
        const std::string prefix = std::to_string(++number) + ". ";
        ASSERT_EQ(line.rfind(prefix, 0), 0u) << "entry " << number << ": " << line;
        ++count[line.substr(prefix.size())];
      }
      std::vector<std::pair<int, std::string>> by_count;
      for (const auto& [w, c] : count) by_count.emplace_back(c, w);
      std::sort(by_count.rbegin(), by_count.rend());
      ASSERT_GT(by_count.size(), 10u);
      std::vector<std::string> top;
      for (int k = 0; k < 10; ++k) top.push_back(by_count[static_cast<size_t>(k)].second);
      EXPECT_EQ(as_set(top), as_set(ex.expected));
      EXPECT_GE(by_count[9].first, 5);   // common words: at least rare_freq + 2 times
      EXPECT_EQ(by_count[10].first, 3);  // the rest: rare_freq times
      EXPECT_EQ(by_count.back().first, 3);
      if (length == 8192) {
        EXPECT_EQ(by_count[0].first, 30);  // RULER's frequency once the list is long enough
      }
    }
}

TEST(RulerSynthetic, FrequentWordsAreTheThreeMostFrequentCodedWords) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), rng());
  for (int i = 0; i < 10; ++i) {
    const auto ex = gen.make(task_by_name("fwe"), 4096, 64, i);
    std::istringstream words(body_of(ex.prompt));
    std::map<std::string, int> count;
    std::string w;
    int n = 0;
    while (words >> w) {
      ++count[w];
      ++n;
    }
    std::vector<std::pair<int, std::string>> by_count;
    for (const auto& [word, c] : count) by_count.emplace_back(c, word);
    std::sort(by_count.rbegin(), by_count.rend());
    ASSERT_GT(by_count.size(), 3u);
    EXPECT_EQ(as_set({by_count[0].second, by_count[1].second, by_count[2].second}), as_set(ex.expected));
    EXPECT_GT(by_count[2].first, by_count[3].first);
    // Zipf with alpha 2: the most frequent word holds about 6 / pi^2 (61%) of the text.
    EXPECT_NEAR(static_cast<double>(by_count[0].first) / n, 0.61, 0.08);
  }
}

TEST(RulerSynthetic, ALengthTooShortForTheTaskIsRefused) {
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), 1);
  for (const char* name : {"vt", "cwe", "fwe"})
    EXPECT_THROW(gen.make(task_by_name(name), 120, 64, 0), std::invalid_argument) << name;
}

}  // namespace
}  // namespace minimakv::eval
