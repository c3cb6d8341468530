// The RULER-NIAH generator and scorer: determinism (byte-identical for a seed), lengths within the
// budget in model tokens, RULER's templates and singular rewrite, needles and answers present, UUIDs of
// version 4, depths spread over the context. Uses the shipped tokenizer and synthetic text/word lists,
// so it does not need the extracted corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "minimakv/eval/niah.h"
#include "shipped_tokenizer.h"
#include "test_util.h"

namespace minimakv::eval {
namespace {

const model::Tokenizer& tokenizer() {
  return testing::shipped_tokenizer();
}

NiahData synthetic_data(std::mt19937_64& rng) {
  static const char* words[] = {"river", "stone", "quiet", "green",  "lamp",   "winter", "copper", "field",
                                "music", "north", "paper", "silver", "garden", "cloud",  "market", "harbor"};
  NiahData d;
  for (int i = 0; i < 400; ++i) {
    std::string s = "The";
    const int n = 8 + static_cast<int>(rng() % 12);
    for (int w = 0; w < n; ++w) s += std::string(" ") + words[rng() % 16];
    d.essay_sentences.push_back(s + ".");
  }
  d.adjectives = {"calm", "bright", "hollow", "rapid", "gentle", "brisk", "solid", "pale"};
  d.nouns = {"owl", "canyon", "ladder", "meadow", "violin", "glacier", "anchor", "harvest"};
  return d;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Niah, SameSeedGivesByteIdenticalExamplesAndSeedsDiffer) {
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const uint64_t seed = rng();
  const NiahGenerator a(data, tokenizer(), seed), b(data, tokenizer(), seed), c(data, tokenizer(), seed + 1);
  for (const auto& t : ruler_niah_tasks()) {
    const auto x = a.make(t, 600, 32, 3), y = b.make(t, 600, 32, 3), z = c.make(t, 600, 32, 3),
               w = a.make(t, 600, 32, 4);
    EXPECT_EQ(x.prompt, y.prompt) << t.name;
    EXPECT_EQ(x.ids, y.ids) << t.name;
    EXPECT_NE(x.prompt, z.prompt) << t.name;
    EXPECT_NE(x.prompt, w.prompt) << t.name;
  }
}

TEST(Niah, PromptsFitTheLengthAndCarryEveryNeedle) {
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), rng());
  const std::regex uuid("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  for (const auto& t : ruler_niah_tasks()) {
    for (int len : {512, 1500}) {
      const int budget = 48;
      const auto ex = gen.make(t, len, budget, static_cast<int>(rng() % 100));
      SCOPED_TRACE(t.name + " " + std::to_string(len));
      EXPECT_EQ(ex.ids, tokenizer().encode(ex.prompt));
      EXPECT_LE(static_cast<int>(ex.ids.size()) + budget, len);
      EXPECT_GE(static_cast<int>(ex.ids.size()) + budget, len * 85 / 100) << "the haystack should fill the budget";
      const size_t want = static_cast<size_t>(t.queries) * t.values_per_key;
      ASSERT_EQ(ex.expected.size(), want);
      for (const auto& v : ex.expected) {
        EXPECT_NE(ex.prompt.find(" is: " + v + "."), std::string::npos) << v;
        if (t.value_kind == ValueKind::kUuids) {
          EXPECT_TRUE(std::regex_match(v, uuid)) << v;
        }
        if (t.value_kind == ValueKind::kNumbers) {
          EXPECT_EQ(v.size(), 7u);
        }
      }
      const size_t needles = count(ex.prompt, "One of the special magic ");
      if (t.haystack == Haystack::kNeedles) {
        EXPECT_GT(needles, static_cast<size_t>(len / 150)) << "distractor needles fill the haystack";
      } else {
        EXPECT_EQ(needles, static_cast<size_t>(t.keys) * t.values_per_key);
      }
      const bool one = want == 1;
      EXPECT_EQ(ex.prompt.rfind(one ? "A special magic " : "Some special magic ", 0), 0u);
      EXPECT_NE(ex.prompt.find(one ? "\nWhat is the special magic " : "\nWhat are all the special magic "),
                std::string::npos);
      EXPECT_TRUE(
          ex.prompt.ends_with(one ? "mentioned in the provided text is" : "mentioned in the provided text are"));
      if (t.queries == 4) {
        EXPECT_NE(ex.prompt.find(", and "), std::string::npos) << "four queries joined RULER's way";
      }
    }
  }
}

TEST(Niah, DepthsSpreadOverTheContext) {
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), rng());
  std::array<int, 4> quartile{};
  for (int i = 0; i < 16; ++i) {
    const auto ex = gen.make(task_by_name("niah_single_2"), 1500, 16, i);
    ASSERT_EQ(ex.depths.size(), 1u);
    ++quartile[std::min(3, static_cast<int>(ex.depths[0] * 4))];
    // The needle really sits at that depth of the context: the generator places it after
    // round(depth x units) haystack sentences (each synthetic one starts with "The "). Counted in
    // sentences, not characters, whose share drifts with the sentences' random lengths.
    const size_t begin = ex.prompt.find('\n') + 1, end = ex.prompt.rfind("\nWhat "),
                 at = ex.prompt.find("One of the special magic");
    const auto before = count(ex.prompt.substr(begin, at - begin), "The "),
               total = count(ex.prompt.substr(begin, end - begin), "The ");
    ASSERT_GT(total, 20u) << "example " << i;
    EXPECT_NEAR(static_cast<double>(before), ex.depths[0] * static_cast<double>(total), 0.5 + 1e-9) << "example " << i;
  }
  for (int q : quartile) EXPECT_GE(q, 3);
  const auto multi = gen.make(task_by_name("niah_multikey_1"), 800, 16, 5);
  EXPECT_TRUE(std::is_sorted(multi.depths.begin(), multi.depths.end()));
  EXPECT_GT(multi.depths.back() - multi.depths.front(), 0.5) << "four needles spread, not clustered";
}

TEST(Niah, BadTasksAndLengthsAreRejected) {
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), 1);
  EXPECT_THROW(task_by_name("niah_single_9"), std::invalid_argument);
  EXPECT_THROW(gen.make(task_by_name("niah_multiquery"), 100, 64, 0), std::invalid_argument);
  EXPECT_THROW(load_niah_data("/nonexistent"), std::runtime_error);
}

TEST(Niah, LoadedEssaySplitsIntoProseSentencesAndDropsOverlongOnes) {
  const std::string dir = ::testing::TempDir() + "/niah_data_" + std::to_string(testing::test_seed());
  std::filesystem::create_directories(dir + "/corpus");
  std::filesystem::create_directories(dir + "/words");
  {
    std::ofstream e(dir + "/corpus/essay.txt");
    for (int i = 0; i < 150; ++i) e << "This is sentence " << i << " of the test essay,\nwrapped   over lines. ";
    e << std::string(5000, 'x') << " and no full stop for a very long time.\n";
    std::ofstream(dir + "/words/eval_adjectives.txt") << "calm\nbright\n";
    std::ofstream(dir + "/words/eval_nouns.txt") << "owl\n\ncanyon\n";
  }
  const auto d = load_niah_data(dir);
  EXPECT_EQ(d.essay_sentences.size(), 150u);
  for (const auto& s : d.essay_sentences) {
    EXPECT_LE(s.size(), 600u);
    EXPECT_EQ(s.find('\n'), std::string::npos);
    EXPECT_EQ(s.find("  "), std::string::npos);
  }
  EXPECT_EQ(d.essay_sentences[3], "This is sentence 3 of the test essay, wrapped over lines.");
  EXPECT_EQ(d.nouns, (std::vector<std::string>{"owl", "canyon"}));
  std::filesystem::remove_all(dir);
}

TEST(Niah, StringMatchAllIsTheFractionOfValuesFoundCaseInsensitively) {
  EXPECT_DOUBLE_EQ(string_match_all(" 1234567.", {"1234567"}), 1.0);
  EXPECT_DOUBLE_EQ(
      string_match_all(" The values are 1234567 and 7654321", {"1234567", "7654321", "1111111", "2222222"}), 0.5);
  EXPECT_DOUBLE_EQ(string_match_all(" CALM-OWL", {"calm-owl"}), 1.0);
  EXPECT_DOUBLE_EQ(string_match_all("", {"x"}), 0.0);
  EXPECT_DOUBLE_EQ(string_match_all("anything", {}), 0.0);
}

TEST(Niah, SplitMixDrawsAreUniformAndUnbiased) {
  SplitMix r(testing::test_seed());
  std::array<int, 7> h{};
  for (int i = 0; i < 70000; ++i) ++h[r.below(7)];
  for (int c : h) EXPECT_NEAR(c, 10000, 500);
  EXPECT_THROW(r.below(0), std::invalid_argument);
}

}  // namespace
}  // namespace minimakv::eval
