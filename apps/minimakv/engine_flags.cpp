#include "engine_flags.h"

#include <fmt/format.h>

#include <stdexcept>

#include "default_paths.h"
#include "load_options.h"
#include "minimakv/engine/kv_budget.h"

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

std::string stale_layout(const model::ModelConfig& cfg, const engine::KvOptions& kv) {
  if (!cache::retiers(kv.mode)) return "";
  const auto layers = engine::tq4_layers_for(cfg, kv);
  if (layers.empty()) return "Stale pages TQ3 in every layer";
  return fmt::format("Stale pages TQ4 in layer{} {} ({}), TQ3 elsewhere", layers.size() > 1 ? "s" : "",
                     fmt::join(layers, ", "), kv.tq4_layers ? "--tq4-layers" : "the model's kv_profile.json");
}

void add_tq4_layers_option(CLI::App& sub, std::vector<std::string>& pieces) {
  sub.add_option("--tq4-layers", pieces,
                 "layers whose Stale pages are TQ4 instead of TQ3 (minima), or 'none'; default: the model's "
                 "kv_profile.json (minimakv calibrate)")
      ->delimiter(',');
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

EngineFlags::EngineFlags() : model(default_model_dir()), fallback_tokenizer(default_model_dir() + "/tokenizer.json") {}

void EngineFlags::add_to(CLI::App& sub, const std::string& kv_memory_help, const std::string& reference_help) {
  sub.add_option("--model", model, "model directory");
  sub.add_option("--kv", kv, "bf16, fp8 or minima")->check(CLI::IsMember({"bf16", "fp8", "minima"}));
  sub.add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub.add_option("--weights", weights, "auto, bf16 or fp32")->check(CLI::IsMember({"auto", "bf16", "fp32"}));
  sub.add_flag("--dummy-weights", dummy_weights, "random weights from --model's config.json alone");
  sub.add_option("--dummy-seed", dummy_seed, "seed of the dummy weights");
  sub.add_option("--kv-memory", kv_memory, kv_memory_help);
  sub.add_option("--reference-tokens", reference_tokens, reference_help)->check(CLI::Range(size_t{0}, size_t{1} << 24));
  sub.add_option("--admission", admission, "reserve (never preempts) or preempt (vLLM's default)")
      ->check(CLI::IsMember({"reserve", "preempt"}));
  sub.add_option("--max-step-tokens", max_step_tokens, "tokens per forward pass")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  sub.add_option("--max-running", max_running, "requests holding pages at once")
      ->check(CLI::Range(size_t{1}, size_t{1} << 16));
  add_kv_options(sub, kv_opt);
  add_tq4_layers_option(sub, tq4_layers);
}

void EngineFlags::check(const std::string& command) {
  kv_opt.mode = cache::parse_kv_mode(kv);
  if (!tq4_layers.empty()) kv_opt.tq4_layers = engine::parse_tq4_layers(tq4_layers);
  admission_ = engine::parse_admission(admission);
  memory_ = KvMemory::parse(kv_memory, command);
  engine::validate(kv_opt);
}

EngineSetup EngineFlags::load(const std::function<size_t(const engine::Model&)>& default_reference) const {
  EngineSetup s;
  auto opts = load_options(weights, dummy_weights, dummy_seed, fallback_tokenizer);
  opts.cpu_threads = cpu_threads;
  s.model = engine::Model::load(model, backend::parse_device(device), opts);
  s.envelope = memory_.bytes_for(*s.model);
  s.reference_tokens = reference_tokens ? reference_tokens : default_reference(*s.model);
  s.scheduler.kv = kv_opt;
  s.scheduler.max_step_tokens = max_step_tokens;
  s.scheduler.max_running = max_running;
  s.scheduler.admission = admission_;
  const engine::KvBudget budget(s.model->config(), kv_opt);
  s.pools = budget.pools_for_memory(s.envelope, s.reference_tokens, max_step_tokens);
  engine::GenerateOptions cap_opt;
  static_cast<engine::KvOptions&>(cap_opt) = kv_opt;
  const cache::KvMode modes[] = {cache::KvMode::kBf16, cache::KvMode::kFp8, cache::KvMode::kMinima};
  s.capacity = engine::measure_capacity(s.model->config(), modes, s.reference_tokens, s.envelope, cap_opt);
  return s;
}

}  // namespace minimakv::app
