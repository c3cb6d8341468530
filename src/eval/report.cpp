#include "minimakv/eval/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "minimakv/eval/niah.h"
#include "minimakv/eval/stats.h"

namespace minimakv::eval {

namespace {

template <typename T>
std::vector<T> ordered_unique(const std::vector<NiahRecord>& rs, T NiahRecord::*field) {
  std::vector<T> out;
  for (const auto& r : rs)
    if (std::find(out.begin(), out.end(), r.*field) == out.end()) out.push_back(r.*field);
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// scores[arm][task] in example order
using Scores = std::map<std::string, std::map<std::string, std::vector<double>>>;

Scores scores_at(const std::vector<NiahRecord>& rs, int length) {
  Scores s;
  std::map<std::tuple<std::string, std::string, int>, double> by;
  for (const auto& r : rs)
    if (r.length == length) by[{r.arm, r.task, r.index}] = r.score;
  for (const auto& [k, v] : by) s[std::get<0>(k)][std::get<1>(k)].push_back(v);
  return s;
}

std::string pct(double x) {
  return fmt::format("{:.1f}", 100.0 * x);
}

std::string paired_cell(const PairedResult& p) {
  return fmt::format("{} ({:+.1f} [{:+.1f}, {:+.1f}], p={:.2g})", pct(p.arm), 100 * p.diff, 100 * p.lo, 100 * p.hi,
                     p.mcnemar_p);
}

// The task groups a run's macro is also reported over when it mixes them: RULER's NIAH tasks, the same
// shapes in held-out phrasing, and the tracing and aggregation tasks (vt, cwe, fwe).
struct TaskGroup {
  const char* key;    // summary task name
  const char* label;  // Markdown row
};
constexpr TaskGroup kGroups[] = {{"macro:niah", "macro, RULER NIAH"},
                                 {"macro:heldout", "macro, held-out phrasing NIAH"},
                                 {"macro:aggregation", "macro, vt / cwe / fwe"}};

int group_of(const std::string& task) {
  for (const auto& t : all_tasks())
    if (t.name == task) return t.family != TaskFamily::kNiah ? 2 : t.phrasing == Phrasing::kHeldOut ? 1 : 0;
  return -1;  // not a known task: only in the overall macro
}

// Groups with at least one task in `tasks`, when there are two or more of them (else none: the overall
// macro says it all).
std::vector<int> groups_present(const std::vector<std::string>& tasks) {
  std::vector<int> g;
  for (const auto& t : tasks)
    if (const int x = group_of(t); x >= 0 && std::find(g.begin(), g.end(), x) == g.end()) g.push_back(x);
  std::sort(g.begin(), g.end());
  if (g.size() < 2) g.clear();
  return g;
}

// Paired results of every (length, arm, task), of the macro (task "macro") and of each group's macro
// (kGroups' keys) when the run mixes groups, computed once so the Markdown and the JSON report the same
// intervals. Without a bf16 arm each arm is paired with itself.
using Summaries = std::map<std::tuple<int, std::string, std::string>, PairedResult>;

Summaries summarize(const std::vector<NiahRecord>& rs, uint64_t seed) {
  const auto arms = ordered_unique(rs, &NiahRecord::arm);
  const auto tasks = ordered_unique(rs, &NiahRecord::task);
  const bool has_base = std::find(arms.begin(), arms.end(), "bf16") != arms.end();
  const auto groups = groups_present(tasks);
  std::vector<int> group(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) group[i] = group_of(tasks[i]);
  Summaries out;
  uint64_t k = seed;
  for (int len : ordered_unique(rs, &NiahRecord::length)) {
    const auto s = scores_at(rs, len);
    for (const auto& a : arms) {
      std::vector<std::vector<double>> arm_s, base_s;
      for (const auto& t : tasks) {
        arm_s.push_back(s.at(a).at(t));
        base_s.push_back(s.at(has_base ? "bf16" : a).at(t));
        out[{len, a, t}] = paired_bootstrap(arm_s.back(), base_s.back(), ++k);
      }
      out[{len, a, "macro"}] = paired_bootstrap_macro(arm_s, base_s, ++k);
      for (const int g : groups) {
        std::vector<std::vector<double>> arm_g, base_g;
        for (size_t i = 0; i < tasks.size(); ++i)
          if (group[i] == g) {
            arm_g.push_back(arm_s[i]);
            base_g.push_back(base_s[i]);
          }
        out[{len, a, kGroups[g].key}] = paired_bootstrap_macro(arm_g, base_g, ++k);
      }
    }
  }
  return out;
}

}  // namespace

std::string niah_markdown(const std::vector<NiahRecord>& rs, uint64_t seed) {
  std::string md;
  const auto arms = ordered_unique(rs, &NiahRecord::arm);
  const auto tasks = ordered_unique(rs, &NiahRecord::task);
  const auto lengths = ordered_unique(rs, &NiahRecord::length);
  const bool has_base = std::find(arms.begin(), arms.end(), "bf16") != arms.end();
  const auto sum = summarize(rs, seed);
  const auto groups = groups_present(tasks);
  for (int len : lengths) {
    const auto s = scores_at(rs, len);
    size_t n = 0;
    if (!s.empty() && !s.begin()->second.empty()) n = s.begin()->second.begin()->second.size();
    md += fmt::format(
        "\n**{} tokens** ({} examples per task). Accuracy (string_match_all x 100); for each arm the paired "
        "difference to bf16 with its 95% bootstrap CI and McNemar's exact p.\n\n| task |",
        len, n);
    for (const auto& a : arms) md += " " + a + " |";
    md += "\n|---|";
    for (size_t i = 0; i < arms.size(); ++i) md += "---|";
    md += "\n";
    for (const auto& t : tasks) {
      md += "| " + t + " |";
      for (const auto& a : arms) {
        const auto& p = sum.at({len, a, t});
        md += " " + (a == "bf16" || !has_base ? pct(p.arm) : paired_cell(p)) + " |";
      }
      md += "\n";
    }
    auto macro_row = [&](const std::string& label, const std::string& key) {
      md += "| **" + label + "** |";
      for (const auto& a : arms) {
        const auto& p = sum.at({len, a, key});
        md += " **" + (a == "bf16" || !has_base ? pct(p.arm) : paired_cell(p)) + "** |";
      }
      md += "\n";
    };
    for (const int g : groups) macro_row(kGroups[g].label, kGroups[g].key);
    macro_row(groups.empty() ? "macro" : "macro, all tasks", "macro");
  }
  // Memory and speed per arm and length, from the runs' own accounting and clocks.
  md +=
      "\nKV memory at the end of each request (all layers, block tables included; reconciled = every pool's "
      "bytes add up), and engine speed on the run's device (median over examples):\n\n"
      "| length | arm | bytes / live token | Recent KiB | Anchor KiB | Stale KiB | vs bf16 | vs fp8 | reconciled | "
      "prefill tok/s | decode tok/s |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (int len : lengths) {
    std::map<std::string, double> bpt;
    for (const auto& a : arms) {
      std::vector<double> b;
      for (const auto& r : rs)
        if (r.length == len && r.arm == a) b.push_back(r.kv.bytes_per_token);
      double m = 0;
      for (double v : b) m += v / static_cast<double>(b.size());
      bpt[a] = m;
    }
    for (const auto& a : arms) {
      double rec = 0, anc = 0, st = 0, cnt = 0;
      bool ok = true;
      std::vector<double> pf, dc;
      for (const auto& r : rs) {
        if (r.length != len || r.arm != a) continue;
        rec += static_cast<double>(r.kv.recent);
        anc += static_cast<double>(r.kv.anchor);
        st += static_cast<double>(r.kv.stale);
        cnt += 1;
        ok = ok && r.kv.reconciled;
        const double pt = static_cast<double>(r.prompt_tokens - r.reused_tokens);
        if (r.prefill_s > 0) pf.push_back(pt / r.prefill_s);
        if (r.decode_s > 0 && r.generated > 1) dc.push_back(static_cast<double>(r.generated - 1) / r.decode_s);
      }
      md += fmt::format("| {} | {} | {:.1f} | {:.0f} | {:.0f} | {:.0f} | {} | {} | {} | {:.0f} | {:.1f} |\n", len, a,
                        bpt[a], rec / cnt / 1024, anc / cnt / 1024, st / cnt / 1024,
                        bpt.count("bf16") ? fmt::format("{:.2f}x", bpt["bf16"] / bpt[a]) : "-",
                        bpt.count("fp8") ? fmt::format("{:.2f}x", bpt["fp8"] / bpt[a]) : "-", ok ? "yes" : "NO",
                        median(pf), median(dc));
    }
  }
  return md;
}

std::string kl_markdown(const std::vector<KlRecord>& rs) {
  std::string md =
      "\n| length | arm | windows | positions | mean KL(arm‖bf16) | p99 | mean KL(bf16‖arm) | p99 | perplexity "
      "|\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rs)
    md += fmt::format("| {} | {} | {} | {} | {:.4g} | {:.4g} | {:.4g} | {:.4g} | {:.3f} |\n", r.length, r.arm,
                      r.windows, r.positions, r.mean, r.p99, r.mean_rev, r.p99_rev, r.ppl);
  return md;
}

std::string memory_markdown(const std::vector<MemoryRecord>& rs) {
  std::map<size_t, std::map<std::string, double>> bpt;
  for (const auto& r : rs) bpt[r.tokens][r.arm] = r.kv.bytes_per_token;
  std::string md =
      "\n| live tokens | arm | bytes / live token | Recent MiB | Anchor MiB | Stale MiB | block tables KiB | vs bf16 | "
      "vs fp8 | reconciled |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rs) {
    const auto& b = bpt[r.tokens];
    md += fmt::format("| {} | {} | {:.1f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {} | {} | {} |\n", r.tokens, r.arm,
                      r.kv.bytes_per_token, static_cast<double>(r.kv.recent) / 1048576.0,
                      static_cast<double>(r.kv.anchor) / 1048576.0, static_cast<double>(r.kv.stale) / 1048576.0,
                      static_cast<double>(r.kv.block_tables) / 1024.0,
                      b.count("bf16") ? fmt::format("{:.2f}x", b.at("bf16") / r.kv.bytes_per_token) : "-",
                      b.count("fp8") ? fmt::format("{:.2f}x", b.at("fp8") / r.kv.bytes_per_token) : "-",
                      r.kv.reconciled ? "yes" : "NO");
  }
  return md;
}

namespace {
nlohmann::json kv_json(const KvUse& k) {
  return {{"recent", k.recent},
          {"anchor", k.anchor},
          {"stale", k.stale},
          {"block_tables", k.block_tables},
          {"live_tokens", k.live_tokens},
          {"bytes_per_token", k.bytes_per_token},
          {"reconciled", k.reconciled}};
}
}  // namespace

nlohmann::json to_json(const std::vector<NiahRecord>& rs, uint64_t seed) {
  nlohmann::json j = {{"seed", seed}, {"records", nlohmann::json::array()}, {"summary", nlohmann::json::array()}};
  for (const auto& r : rs)
    j["records"].push_back({{"task", r.task},
                            {"arm", r.arm},
                            {"length", r.length},
                            {"index", r.index},
                            {"score", r.score},
                            {"output", r.output},
                            {"prompt_tokens", r.prompt_tokens},
                            {"reused_tokens", r.reused_tokens},
                            {"generated", r.generated},
                            {"prefill_s", r.prefill_s},
                            {"decode_s", r.decode_s},
                            {"kv", kv_json(r.kv)}});
  for (const auto& [key, p] : summarize(rs, seed))
    j["summary"].push_back({{"length", std::get<0>(key)},
                            {"arm", std::get<1>(key)},
                            {"task", std::get<2>(key)},
                            {"n", p.n},
                            {"accuracy", 100 * p.arm},
                            {"diff_vs_bf16", 100 * p.diff},
                            {"ci95", {100 * p.lo, 100 * p.hi}},
                            {"mcnemar_p", p.mcnemar_p}});
  return j;
}

std::vector<NiahRecord> niah_records_from_json(const nlohmann::json& niah) {
  auto field = [](const nlohmann::json& j, const char* key) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(key))
      throw std::invalid_argument(std::string("NIAH record: missing '") + key + "'");
    return j.at(key);
  };
  std::vector<NiahRecord> out;
  try {
    for (const auto& j : field(niah, "records")) {
      NiahRecord r;
      r.task = field(j, "task").get<std::string>();
      r.arm = field(j, "arm").get<std::string>();
      r.length = field(j, "length").get<int>();
      r.index = field(j, "index").get<int>();
      r.score = field(j, "score").get<double>();
      r.output = field(j, "output").get<std::string>();
      r.prompt_tokens = field(j, "prompt_tokens").get<size_t>();
      r.reused_tokens = field(j, "reused_tokens").get<size_t>();
      r.generated = field(j, "generated").get<size_t>();
      r.prefill_s = field(j, "prefill_s").get<double>();
      r.decode_s = field(j, "decode_s").get<double>();
      const auto& kv = field(j, "kv");
      r.kv.recent = field(kv, "recent").get<size_t>();
      r.kv.anchor = field(kv, "anchor").get<size_t>();
      r.kv.stale = field(kv, "stale").get<size_t>();
      r.kv.block_tables = field(kv, "block_tables").get<size_t>();
      r.kv.live_tokens = field(kv, "live_tokens").get<size_t>();
      r.kv.bytes_per_token = field(kv, "bytes_per_token").get<double>();
      r.kv.reconciled = field(kv, "reconciled").get<bool>();
      out.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("NIAH record: ") + e.what());
  }
  return out;
}

std::vector<NiahRecord> merge_niah_records(const std::vector<std::vector<NiahRecord>>& runs) {
  std::set<std::tuple<int, std::string, std::string, int>> seen;
  std::vector<NiahRecord> out;
  for (const auto& run : runs)
    for (const auto& r : run) {
      if (!seen.emplace(r.length, r.task, r.arm, r.index).second)
        throw std::invalid_argument("merge: example " + std::to_string(r.index) + " of " + r.task + " at " +
                                    std::to_string(r.length) + " tokens, arm " + r.arm + ", appears in two runs");
      out.push_back(r);
    }
  // The order one run makes (length, task in RULER's order, example; arms as they came), so the tables
  // and the bootstrap's draws are those of a single run over the same examples.
  auto rank = [](const std::string& task) {
    const auto& all = all_tasks();
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].name == task) return i;
    return all.size();
  };
  std::stable_sort(out.begin(), out.end(), [&](const NiahRecord& a, const NiahRecord& b) {
    return std::make_tuple(a.length, rank(a.task), a.task, a.index) <
           std::make_tuple(b.length, rank(b.task), b.task, b.index);
  });
  return out;
}

std::string json_text(const nlohmann::json& document) {
  return document.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json to_json(const std::vector<KlRecord>& rs) {
  auto j = nlohmann::json::array();
  for (const auto& r : rs)
    j.push_back({{"arm", r.arm},
                 {"length", r.length},
                 {"windows", r.windows},
                 {"positions", r.positions},
                 {"kl_arm_bf16_mean", r.mean},
                 {"kl_arm_bf16_p99", r.p99},
                 {"kl_bf16_arm_mean", r.mean_rev},
                 {"kl_bf16_arm_p99", r.p99_rev},
                 {"perplexity", r.ppl},
                 {"perplexity_bf16", r.ppl_bf16}});
  return j;
}

nlohmann::json to_json(const std::vector<MemoryRecord>& rs) {
  auto j = nlohmann::json::array();
  for (const auto& r : rs) j.push_back({{"arm", r.arm}, {"tokens", r.tokens}, {"kv", kv_json(r.kv)}});
  return j;
}

}  // namespace minimakv::eval
