#include "kv_flags.h"

#include <stdexcept>

#include "minimakv/engine/capacity.h"

namespace minimakv::app {

void add_kv_options(CLI::App& sub, engine::KvOptions& kv) {
  sub.add_option("--page-size", kv.tokens_per_page, "tokens per KV page")->check(CLI::Range(16, 4096));
  sub.add_option("--prefill-chunk", kv.prefill_chunk, "most prompt tokens of one request per pass")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--recent-window", kv.controller.recent_window, "Recent pages (minima)")
      ->check(CLI::Range(1u, 1u << 20));
  sub.add_option("--checkpoint-interval", kv.checkpoint_interval, "decode tokens between retier checkpoints")
      ->check(CLI::Range(0, 1 << 20));
  sub.add_flag("--scoring", kv.controller.scoring, "feed attention page scores to the controller (minima)");
}

KvMemory KvMemory::parse(const std::string& spec, const std::string& command) {
  KvMemory m;
  m.spec = spec;
  m.command = command;
  if (!spec.empty() && spec.back() == '%') {
    double p = -1;
    try {
      size_t used = 0;
      p = std::stod(spec.substr(0, spec.size() - 1), &used);
      if (used + 1 != spec.size()) p = -1;
    } catch (const std::exception&) {
      p = -1;
    }
    if (!(p > 0 && p <= 100))
      throw std::invalid_argument(command + ": --kv-memory " + spec + " must be a share in (0%, 100%] or a byte count");
    m.percent = p;
    return m;
  }
  m.bytes = engine::parse_bytes(spec);
  return m;
}

size_t KvMemory::bytes_for(const engine::Model& model) const {
  if (percent <= 0) return bytes;
  const auto mem = model.memory().device;
  if (!mem) throw std::invalid_argument(command + ": --kv-memory as a share of free memory needs --device cuda");
  return static_cast<size_t>(static_cast<double>(mem->free) * percent / 100.0);
}

}  // namespace minimakv::app
