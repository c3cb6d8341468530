#include "stress_cmd.h"

#include <fmt/core.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "default_paths.h"
#include "minimakv/sim/stress.h"

namespace minimakv::app {

int run_stress_cmd(const StressCmdOptions& opt) {
  sim::StressOptions so;
  so.ops = opt.ops;
  so.seed = opt.seed;
  const sim::StressResult r = sim::run_stress(so);
  const auto& a = r.final_accounting;
  const char* names[] = {"bf16", "fp8", "tq3"};
  if (opt.json) {
    nlohmann::json j;
    j["seed"] = opt.seed;
    j["ops"] = r.ops;
    j["invariant_checks"] = r.invariant_checks;
    j["page_byte_checks"] = r.page_byte_checks;
    j["expected_errors"] = r.expected_errors;
    j["capacity_errors"] = r.capacity_errors;
    j["conversions"] = r.conversions;
    j["promotions"] = r.promotions;
    j["rebinds"] = r.rebinds;
    j["prefix_hits"] = r.prefix_hits;
    j["evictions"] = r.evictions;
    j["peak_used_bytes"] = r.peak_used_bytes;
    j["leaked_pages"] = r.leaked_pages;
    j["reconciled"] = r.reconciled;
    j["ok"] = r.ok();
    j["failure"] = r.failure;
    for (int f = 0; f < 3; ++f) {
      const auto& fa = a.formats[f];
      j["pages_at_end"][names[f]] = {{"live", fa.request_pages},
                                     {"cached", fa.cache_only_pages},
                                     {"transient", fa.transient_pages},
                                     {"free", fa.free_pages}};
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("minimakv stress  seed={}  operations={}\n", opt.seed, r.ops);
    fmt::print("  invariant checks passed  {}\n  page byte checks         {}\n", r.invariant_checks,
               r.page_byte_checks);
    fmt::print("  invalid calls rejected   {} (state unchanged each time)\n", r.expected_errors);
    fmt::print("  capacity errors          {} (state unchanged each time)\n", r.capacity_errors);
    fmt::print("  conversions {}  promotions {}  rebinds {}  prefix hits {}  evictions {}\n", r.conversions,
               r.promotions, r.rebinds, r.prefix_hits, r.evictions);
    fmt::print("  pages before teardown (live / cached / transient / free):\n");
    for (int f = 0; f < 3; ++f) {
      const auto& fa = a.formats[f];
      fmt::print("    {:5} {:6} {:6} {:6} {:6}\n", names[f], fa.request_pages, fa.cache_only_pages, fa.transient_pages,
                 fa.free_pages);
    }
    fmt::print("  peak bytes in use        {}\n  leaked pages             {}\n  accounting reconciled    {}\n",
               r.peak_used_bytes, r.leaked_pages, r.reconciled ? "yes" : "NO");
    if (!r.failure.empty()) fmt::print("  FAILURE: {}\n", r.failure);
    fmt::print("  result                   {}\n", r.ok() ? "ok" : "FAILED");
  }
  return r.ok() ? 0 : 1;
}

namespace {
const Registration kCommand(
    {"stress", "randomized model-based simulation of the paged KV store", 30, [](CLI::App& sub) {
       auto opt = std::make_shared<StressCmdOptions>();
       sub.add_option("--ops", opt->ops, "operations to run")->check(CLI::Range(uint64_t{1}, uint64_t{1000000000}));
       sub.add_option("--seed", opt->seed, "random seed");
       sub.add_flag("--json", opt->json, "machine-readable output");
       return std::function<int()>([=] { return run_stress_cmd(*opt); });
     }});
}  // namespace

}  // namespace minimakv::app
