// The RULER-NIAH generator and scorer: determinism (byte-identical for a seed), lengths within the
// budget in model tokens, RULER's templates and singular rewrite, needles and answers present, UUIDs of
// version 4, depths spread over the context; the held-out-phrasing tasks (parts of the given side only,
// one needle frame per example, plural questions for several values) and the phrasing parts' loader.
// Uses the shipped tokenizer and synthetic text, word lists and parts, so it does not need the extracted
// corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <tuple>

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
  d.heldout_phrasing.nouns = {{"badge", "badges"}, {"cipher", "ciphers"}};
  d.heldout_phrasing.verbs = {"is", "reads as"};
  d.heldout_phrasing.needles = {"The {noun} of {key} {verb} {value}.", "{value} opens the {noun} of {key}."};
  d.heldout_phrasing.questions = {"Which {nq} {be} tied to {query}?", "Name the {nq} of {query}."};
  d.heldout_phrasing.prefixes = {"Answer:", "The {nq} of {query} {be}"};
  d.heldout_phrasing.intros = {"Read on.", "A text follows."};
  return d;
}

// The needles of synthetic_data's two frames, written out here rather than by the generator's filler:
// group 1 the noun, 2 the key, 3 the value.
const std::string kKey = "([a-z]+-[a-z]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})";
const std::string kValue = "([0-9]{7}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})";
const std::regex kFrameA("The (badge|cipher) of " + kKey + " (?:is|reads as) " + kValue + "\\.");
const std::regex kFrameB(kValue + " opens the (badge|cipher) of " + kKey + "\\.");

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
  std::vector<TaskSpec> tasks = ruler_niah_tasks();
  tasks.insert(tasks.end(), heldout_phrasing_tasks().begin(), heldout_phrasing_tasks().end());
  for (const auto& t : tasks) {
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
  EXPECT_TRUE(load_niah_data(dir).heldout_phrasing.empty()) << "data without phrasing parts still loads";
  std::filesystem::create_directories(dir + "/phrasings");
  for (const std::string side : {"eval", "train"}) {
    std::ofstream(dir + "/phrasings/" + side + "_nouns.txt") << side << "|" << side << "s\n";
    for (const char* cat : {"verbs", "prefixes", "intros"})
      std::ofstream(dir + "/phrasings/" + side + "_" + cat + ".txt") << "x\n";
    std::ofstream(dir + "/phrasings/" + side + "_needles.txt") << side << " {key} {value}\n";
    std::ofstream(dir + "/phrasings/" + side + "_questions.txt") << "{query}?\n";
  }
  const auto d = load_niah_data(dir);
  EXPECT_EQ(d.heldout_phrasing.needles, (std::vector<std::string>{"eval {key} {value}"})) << "the evaluation side only";
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

TEST(HeldOutPhrasing, PromptsUseOneFrameOfTheGivenPartsAndCarryEveryValue) {
  auto rng = testing::rng_for_test();
  const auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), rng());
  ASSERT_EQ(heldout_phrasing_tasks().size(), ruler_niah_tasks().size());
  for (size_t k = 0; k < heldout_phrasing_tasks().size(); ++k) {
    const auto& t = heldout_phrasing_tasks()[k];
    const auto& shape = ruler_niah_tasks()[k];
    EXPECT_EQ(t.name, "heldout_" + shape.name.substr(5));
    EXPECT_EQ(t.phrasing, Phrasing::kHeldOut);
    EXPECT_EQ(
        std::tie(t.haystack, t.key_kind, t.value_kind, t.keys, t.values_per_key, t.queries),
        std::tie(shape.haystack, shape.key_kind, shape.value_kind, shape.keys, shape.values_per_key, shape.queries));
    const int len = 1500, budget = 48;
    const auto ex = gen.make(t, len, budget, static_cast<int>(rng() % 100));
    SCOPED_TRACE(t.name + "\n" + ex.prompt);
    EXPECT_EQ(ex.ids, tokenizer().encode(ex.prompt));
    EXPECT_LE(static_cast<int>(ex.ids.size()) + budget, len);
    EXPECT_GE(static_cast<int>(ex.ids.size()) + budget, len * 85 / 100);
    EXPECT_EQ(ex.prompt.find("special magic"), std::string::npos);
    EXPECT_TRUE(ex.prompt.starts_with("Read on.\n") || ex.prompt.starts_with("A text follows.\n"));
    const auto a_count = std::distance(std::sregex_iterator(ex.prompt.begin(), ex.prompt.end(), kFrameA), {});
    const auto b_count = std::distance(std::sregex_iterator(ex.prompt.begin(), ex.prompt.end(), kFrameB), {});
    EXPECT_TRUE(a_count == 0 || b_count == 0) << "one needle frame per example";
    const size_t needles = static_cast<size_t>(a_count + b_count);
    const size_t want = static_cast<size_t>(t.queries) * t.values_per_key;
    ASSERT_EQ(ex.expected.size(), want);
    if (t.haystack == Haystack::kNeedles) {
      EXPECT_GT(needles, static_cast<size_t>(len / 150));
    } else {
      EXPECT_EQ(needles, static_cast<size_t>(t.keys) * t.values_per_key);
    }
    for (const auto& v : ex.expected) {
      const std::regex with_v("The (badge|cipher) of " + kKey + " (is|reads as) " + v + "\\.|" + v +
                              " opens the (badge|cipher) of " + kKey + "\\.");
      EXPECT_TRUE(std::regex_search(ex.prompt, with_v)) << v;
    }
    // The question and the prefix: plural noun and "are" for several values, the queried keys named.
    const std::string question = ex.prompt.substr(ex.prompt.rfind('\n') + 1);
    const bool one = want == 1;
    EXPECT_TRUE(std::regex_search(question, std::regex(one ? "(badge|cipher) (is )?(tied|of)" : "(badges|ciphers)")));
    EXPECT_TRUE(ex.prompt.ends_with("Answer:") || ex.prompt.ends_with(one ? " is" : " are"));
    if (t.queries == 4) {
      EXPECT_NE(question.find(", and "), std::string::npos);
    }
  }
}

TEST(HeldOutPhrasing, EveryPartIsDrawnAndRulerTasksDoNotNeedTheParts) {
  auto rng = testing::rng_for_test();
  auto data = synthetic_data(rng);
  const NiahGenerator gen(data, tokenizer(), rng());
  std::set<std::string> seen;
  for (int i = 0; i < 40; ++i) {
    const auto ex = gen.make(task_by_name("heldout_single_2"), 400, 16, i);
    for (const char* part : {"Read on.", "A text follows.", " opens the ", " of ", "Answer:", "Which ", "Name the ",
                             "badge", "cipher", " reads as "})
      if (ex.prompt.find(part) != std::string::npos) seen.insert(part);
  }
  EXPECT_EQ(seen.size(), 10u);
  const auto ruler = gen.make(task_by_name("niah_single_2"), 400, 16, 1);
  data.heldout_phrasing = {};
  const NiahGenerator bare(data, tokenizer(), 1);
  EXPECT_THROW(bare.make(task_by_name("heldout_single_2"), 400, 16, 1), std::runtime_error);
  EXPECT_NO_THROW(bare.make(task_by_name("niah_single_2"), 400, 16, 1));
}

TEST(HeldOutPhrasing, LoaderReadsOneSideAndRefusesMalformedParts) {
  const std::string dir = ::testing::TempDir() + "/phrasings_" + std::to_string(testing::test_seed());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& side, const std::string& needle, const std::string& noun,
                   const std::string& question) {
    std::ofstream(dir + "/" + side + "_nouns.txt") << noun << "\n";
    std::ofstream(dir + "/" + side + "_verbs.txt") << "is\nwas\n";
    std::ofstream(dir + "/" + side + "_needles.txt") << needle << "\n\n";
    std::ofstream(dir + "/" + side + "_questions.txt") << question << "\n";
    std::ofstream(dir + "/" + side + "_prefixes.txt") << "Answer:\n";
    std::ofstream(dir + "/" + side + "_intros.txt") << "Read on.\n";
  };
  write("eval", "The {noun} of {key} {verb} {value}.", "badge|badges", "Which {nq} {be} tied to {query}?");
  write("train", "{key} has {value}.", "code|codes", "What {be} the {nq} of {query}?");
  const auto p = load_phrasing_parts(dir, "eval");
  EXPECT_EQ(p.needles, (std::vector<std::string>{"The {noun} of {key} {verb} {value}."}));
  EXPECT_EQ(p.nouns, (std::vector<std::pair<std::string, std::string>>{{"badge", "badges"}}));
  EXPECT_EQ(p.verbs, (std::vector<std::string>{"is", "was"}));
  EXPECT_EQ(load_phrasing_parts(dir, "train").needles, (std::vector<std::string>{"{key} has {value}."}));
  EXPECT_THROW(load_phrasing_parts(dir, "test"), std::runtime_error);  // no such side
  const std::pair<const char*, const char*> bad[] = {
      {"The {noun} of {key} is.", "badge|badges"},        // needle without {value}
      {"The {noun} of {key} is {value} {when}.", "a|b"},  // unknown placeholder
      {"The {noun} of {key} is {value", "a|b"},           // unclosed brace
      {"The {noun} of {key} is {value}.", "badge"},       // noun without its plural
      {"The {noun} of {key} is {value}.", "a|b|c"},
  };
  for (const auto& [needle, noun] : bad) {
    write("bad", needle, noun, "Which {nq} {be} tied to {query}?");
    EXPECT_THROW(load_phrasing_parts(dir, "bad"), std::runtime_error) << needle << " / " << noun;
  }
  write("bad", "The {noun} of {key} is {value}.", "a|b", "Which {nq} {be} tied to {key}?");  // question: no {key}
  EXPECT_THROW(load_phrasing_parts(dir, "bad"), std::runtime_error);
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
