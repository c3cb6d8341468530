// `minimakv capacity`: how many requests of a given length a KV memory envelope holds in bf16, fp8 and
// minima mode, measured on a real store with the model's geometry (engine/capacity.h). Needs only the
// model's config.json, so `--model bench/configs/qwen3-8b` works without weights.
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "default_paths.h"
#include "minimakv/engine/capacity.h"
#include "minimakv/model/config.h"

namespace minimakv::app {

namespace {

struct CapacityOptions {
  std::string model;
  std::string kv_memory = "40GiB";
  size_t request_tokens = 16384;
  int page_size = 64, prefill_chunk = 512;
  bool json = false;
};

int run_capacity(const CapacityOptions& o) {
  const size_t envelope = engine::parse_bytes(o.kv_memory);
  const auto cfg = model::load_config(o.model);
  engine::GenerateOptions opt;
  opt.tokens_per_page = o.page_size;
  opt.prefill_chunk = o.prefill_chunk;
  const cache::KvMode modes[] = {cache::KvMode::kBf16, cache::KvMode::kFp8, cache::KvMode::kMinima};
  const auto rows = engine::measure_capacity(cfg, modes, o.request_tokens, envelope, opt);
  const auto gib = [](size_t b) { return static_cast<double>(b) / (1u << 30); };
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["kv_memory_bytes"] = envelope;
    j["request_tokens"] = o.request_tokens;
    j["page_size"] = o.page_size;
    for (const auto& r : rows) {
      nlohmann::json x;
      x["mode"] = cache::to_string(r.mode);
      x["request_bytes"] = r.request_bytes;
      x["block_table_bytes"] = r.block_table_bytes;
      x["bytes_per_token"] = r.bytes_per_token;
      x["max_requests"] = r.max_requests;
      x["tokens_held"] = r.tokens_held;
      x["reconciled"] = r.reconciled;
      for (size_t f = 0; f < codec::kNumPageFormats; ++f) {
        const char* name = codec::to_string(static_cast<codec::PageFormat>(f));
        x["request_bytes_by_format"][name] = r.request_bytes_by_format[f];
        x["pool_bytes"][name] = r.pool_bytes[f];
      }
      x["vs_bf16"] =
          static_cast<double>(r.max_requests) / static_cast<double>(std::max<size_t>(1, rows[0].max_requests));
      j["modes"].push_back(x);
    }
    fmt::print("{}\n", j.dump(1));
    return 0;
  }
  fmt::print("KV capacity of {:.2f} GiB for {}-token requests ({} layers, {} KV heads, head_dim {}, {}-token pages)\n",
             gib(envelope), o.request_tokens, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim,
             o.page_size);
  fmt::print("{:<7} {:>14} {:>11} {:>13} {:>9} {:>8}   pools for that many (GiB)\n", "mode", "bytes/request",
             "bytes/token", "tokens held", "requests", "vs bf16");
  for (const auto& r : rows) {
    std::string pools;
    for (size_t f = 0; f < codec::kNumPageFormats; ++f)
      if (r.pool_bytes[f])
        pools += fmt::format("{}{} {:.2f}", pools.empty() ? "" : ", ",
                             codec::to_string(static_cast<codec::PageFormat>(f)), gib(r.pool_bytes[f]));
    fmt::print("{:<7} {:>14} {:>11.0f} {:>13} {:>9} {:>7.2f}x   {}\n", cache::to_string(r.mode), r.request_bytes,
               r.bytes_per_token, r.tokens_held, r.max_requests,
               static_cast<double>(r.max_requests) / static_cast<double>(std::max<size_t>(1, rows[0].max_requests)),
               pools);
  }
  return 0;
}

const Registration kCommand(
    {"capacity", "requests and tokens a KV memory envelope holds in bf16, fp8 and minima (measured)", 55,
     [](CLI::App& sub) {
       auto opt = std::make_shared<CapacityOptions>();
       opt->model = default_model_dir();
       sub.add_option("--model", opt->model,
                      "directory holding config.json (weights not needed; e.g. bench/configs/qwen3-8b)");
       sub.add_option("--kv-memory", opt->kv_memory, "KV memory envelope: bytes, or with a unit (64MiB, 40GiB, 1.5GB)");
       sub.add_option("--request-tokens", opt->request_tokens, "tokens per request (prompt plus output)")
           ->check(CLI::Range(size_t{1}, size_t{1} << 24));
       sub.add_option("--page-size", opt->page_size, "tokens per KV page")->check(CLI::Range(16, 4096));
       sub.add_option("--prefill-chunk", opt->prefill_chunk, "prompt tokens per prefill chunk (retier after each)")
           ->check(CLI::Range(16, 1 << 20));
       sub.add_flag("--json", opt->json, "machine-readable output");
       return std::function<int()>([=] { return run_capacity(*opt); });
     }});

}  // namespace

}  // namespace minimakv::app
