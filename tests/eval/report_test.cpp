// Reports: NIAH records survive the JSON round trip, shards of one protocol merge into the report a
// single run gives, and a merge that would count an example twice or a malformed record is refused.
#include <gtest/gtest.h>

#include <random>

#include "minimakv/eval/report.h"
#include "test_util.h"

namespace minimakv::eval {
namespace {

std::vector<NiahRecord> random_records(std::mt19937_64& rng,
                                       std::vector<const char*> tasks = {"niah_single_1", "niah_multivalue"}) {
  std::vector<NiahRecord> rs;
  std::bernoulli_distribution hit(0.8);
  std::uniform_real_distribution<double> sec(0.01, 2.0);
  for (const char* task : tasks)
    for (int i = 0; i < 12; ++i)
      for (const char* arm : {"bf16", "minima"}) {
        NiahRecord r;
        r.task = task;
        r.arm = arm;
        r.length = 4096;
        r.index = i;
        r.score = hit(rng) ? 1.0 : 0.5 * hit(rng);
        r.output = " 1234567 \"quoted\" \xc3\xa9";
        r.prompt_tokens = 4000 + rng() % 50;
        r.reused_tokens = rng() % 10;
        r.generated = 1 + rng() % 60;
        r.prefill_s = sec(rng);
        r.decode_s = sec(rng);
        r.kv = {rng() % 100000, rng() % 1000, rng() % 100000, rng() % 500, 4000, sec(rng) * 1000, hit(rng)};
        rs.push_back(r);
      }
  return rs;
}

TEST(Report, NiahRecordsRoundTripThroughJson) {
  auto rng = testing::rng_for_test();
  const auto rs = random_records(rng);
  const auto back = niah_records_from_json(to_json(rs, 7));
  ASSERT_EQ(back.size(), rs.size());
  EXPECT_EQ(to_json(back, 7).dump(), to_json(rs, 7).dump());
  EXPECT_EQ(niah_markdown(back, 7), niah_markdown(rs, 7));
}

TEST(Report, OutputsCutInsideACharacterStillWriteTheirRecords) {
  auto rng = testing::rng_for_test();
  auto rs = random_records(rng);
  // A generation that stopped after the first two bytes of a three-byte character, and a stray
  // continuation byte: dump() alone throws on these.
  rs[0].output = " 12\xe4\xb8";
  rs[1].output = "\x80 value";
  EXPECT_THROW((void)to_json(rs, 5).dump(), nlohmann::json::type_error);
  const auto back = niah_records_from_json(nlohmann::json::parse(json_text(to_json(rs, 5))));
  ASSERT_EQ(back.size(), rs.size());
  EXPECT_EQ(back[0].output, " 12\xef\xbf\xbd");
  EXPECT_EQ(back[1].output, "\xef\xbf\xbd value");
  EXPECT_EQ(back[2].output, rs[2].output);  // valid text unchanged
  EXPECT_EQ(back[0].score, rs[0].score);
}

TEST(Report, ShardsByTaskMergeIntoTheSingleRunReport) {
  auto rng = testing::rng_for_test();
  const auto rs = random_records(rng);
  std::vector<NiahRecord> a, b;
  for (const auto& r : rs) (r.task == "niah_single_1" ? a : b).push_back(r);
  const auto merged =
      merge_niah_records({niah_records_from_json(to_json(b, 3)), niah_records_from_json(to_json(a, 3))});
  EXPECT_EQ(niah_markdown(merged, 3), niah_markdown(rs, 3));
  EXPECT_THROW(merge_niah_records({a, b, {a.front()}}), std::invalid_argument);
}

// The mean score of `task`'s records of `arm` at 4096 tokens, x 100, as the report prints it.
double mean_pct(const std::vector<NiahRecord>& rs, const std::string& task, const std::string& arm) {
  double s = 0, n = 0;
  for (const auto& r : rs)
    if (r.task == task && r.arm == arm) s += r.score, n += 1;
  return 100.0 * s / n;
}

TEST(Report, ARunMixingTaskGroupsGetsOneMacroPerGroupAndOneOverAll) {
  auto rng = testing::rng_for_test();
  const auto rs = random_records(rng, {"niah_single_1", "niah_multivalue", "heldout_single_1", "vt", "cwe"});
  const auto md = niah_markdown(rs, 5);
  const auto j = to_json(rs, 5);
  auto summary = [&](const std::string& task) {
    for (const auto& s : j["summary"])
      if (s["task"] == task && s["arm"] == "bf16") return s["accuracy"].get<double>();
    ADD_FAILURE() << "no summary of " << task;
    return -1.0;
  };
  const double niah = (mean_pct(rs, "niah_single_1", "bf16") + mean_pct(rs, "niah_multivalue", "bf16")) / 2;
  const double agg = (mean_pct(rs, "vt", "bf16") + mean_pct(rs, "cwe", "bf16")) / 2;
  EXPECT_NEAR(summary("macro:niah"), niah, 1e-9);
  EXPECT_NEAR(summary("macro:heldout"), mean_pct(rs, "heldout_single_1", "bf16"), 1e-9);
  EXPECT_NEAR(summary("macro:aggregation"), agg, 1e-9);
  EXPECT_NEAR(summary("macro"), (2 * niah + mean_pct(rs, "heldout_single_1", "bf16") + 2 * agg) / 5, 1e-9);
  for (const char* row : {"| **macro, RULER NIAH** |", "| **macro, held-out phrasing NIAH** |",
                          "| **macro, vt / cwe / fwe** |", "| **macro, all tasks** |"})
    EXPECT_NE(md.find(row), std::string::npos) << row;
  // One group: the single macro row, named as before.
  const auto plain = niah_markdown(random_records(rng), 5);
  EXPECT_NE(plain.find("| **macro** |"), std::string::npos);
  EXPECT_EQ(plain.find("macro, "), std::string::npos);
}

TEST(Report, MalformedRecordsAreRefused) {
  auto rng = testing::rng_for_test();
  auto j = to_json(random_records(rng), 1);
  auto missing = j;
  missing["records"][3].erase("score");
  EXPECT_THROW(niah_records_from_json(missing), std::invalid_argument);
  auto mistyped = j;
  mistyped["records"][0]["kv"]["reconciled"] = "yes";
  EXPECT_THROW(niah_records_from_json(mistyped), std::invalid_argument);
  EXPECT_THROW(niah_records_from_json(nlohmann::json::array()), std::invalid_argument);
}

}  // namespace
}  // namespace minimakv::eval
