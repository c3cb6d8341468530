#include "generate_cmd.h"

#include <fmt/core.h>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "command.h"
#include "default_paths.h"
#include "engine_flags.h"
#include "load_options.h"

namespace minimakv::app {

namespace {

// Median, min and max of the decode steps' wall times, in milliseconds.
void add_step_times(nlohmann::json& j, std::vector<double> t) {
  if (t.empty()) return;
  std::sort(t.begin(), t.end());
  j["step_ms"] = {
      {"median", 1e3 * t[t.size() / 2]}, {"min", 1e3 * t.front()}, {"max", 1e3 * t.back()}, {"steps", t.size()}};
}

void add_attention_stats(nlohmann::json& j, const backend::AttentionStats& s) {
  if (s.calls == 0) return;
  j["attention"] = {{"calls", s.calls},
                    {"routes", s.routes},
                    {"bytes_read", {{"bf16", s.bytes_read[0]}, {"fp8", s.bytes_read[1]}, {"tq3", s.bytes_read[2]}}},
                    {"dense_shadow_bytes", s.dense_shadow_bytes},
                    {"fallbacks", s.fallbacks}};
}

void add_forward_stats(nlohmann::json& j, const backend::ForwardStats& s) {
  j["forward_passes"] = {
      {"eager", s.eager}, {"recorded", s.recorded}, {"captured", s.captured}, {"replayed", s.replayed}};
}

// The text of generated ids. A model whose vocabulary is larger than its tokenizer's (a dummy-weight
// model at a real geometry, run with the embedded tokenizer) can emit ids the tokenizer has no text
// for: each is shown as U+FFFD.
std::string text_of(const engine::Model& model, const std::vector<int32_t>& ids) {
  const auto known = static_cast<int32_t>(model.tokenizer().vocab_size());
  std::string text;
  std::vector<int32_t> run;
  for (int32_t id : ids) {
    if (id >= 0 && id < known) {
      run.push_back(id);
      continue;
    }
    text += model.tokenizer().decode(run) + "\xEF\xBF\xBD";
    run.clear();
  }
  return text + model.tokenizer().decode(run);
}

// The model's memory (and, after a run, the KV pools of its store): stderr as text, or into `j`.
void print_memory(const engine::Model& model, const cache::Accounting* acct, nlohmann::json* j = nullptr) {
  const auto m = model.memory();
  const auto gib = [](size_t b) { return static_cast<double>(b) / (1u << 30); };
  if (j) {
    auto& out = (*j)["memory"];
    out["weight_dtype"] = backend::to_string(m.weight_dtype);
    out["weight_bytes"] = m.weight_bytes;
    out["checkpoint_bytes"] = m.checkpoint_bytes;
    if (acct)
      for (size_t f = 0; f < codec::kNumPageFormats; ++f)
        out["kv_pool_bytes"][codec::to_string(static_cast<codec::PageFormat>(f))] =
            acct->formats[f].capacity_pages * acct->formats[f].page_bytes;
    if (m.device) {
      out["device_free_bytes"] = m.device->free;
      out["device_total_bytes"] = m.device->total;
    }
    return;
  }
  fmt::print(stderr, "memory: weights {:.2f} GiB {} (checkpoint tensors {:.2f} GiB)", gib(m.weight_bytes),
             backend::to_string(m.weight_dtype), gib(m.checkpoint_bytes));
  if (m.device) fmt::print(stderr, ", device {:.2f} GiB free of {:.2f}", gib(m.device->free), gib(m.device->total));
  fmt::print(stderr, "\n");
}

// --also: every prompt is prefilled, then all decode together; each completion is printed at the end.
int run_batch(const engine::Model& model, std::vector<std::vector<int32_t>> prompts, const GenerateCmdOptions& opt) {
  const auto context = static_cast<size_t>(model.config().max_position_embeddings);
  for (const auto& p : opt.batch_prompts) {
    auto ids = model.tokenizer().encode_bounded(p, context - static_cast<size_t>(opt.gen.max_new_tokens));
    if (!ids)
      throw std::invalid_argument("generate: an --also prompt does not fit the model's context with the new tokens");
    prompts.push_back(std::move(*ids));
  }
  for (const auto& p : prompts)
    if (p.empty() || p.size() + static_cast<size_t>(opt.gen.max_new_tokens) >
                         static_cast<size_t>(model.config().max_position_embeddings))
      throw std::invalid_argument(
          "generate: every prompt must be non-empty and fit the model's context with the new tokens");
  const auto rs = engine::generate_batch(model, prompts, opt.gen);
  size_t generated = 0;
  for (const auto& r : rs) generated += r.tokens.size();
  const auto& a = rs[0].accounting;
  if (opt.json) {
    nlohmann::json j;
    j["kv"] = opt.kv;
    if (cache::retiers(opt.gen.mode)) j["tq4_layers"] = engine::tq4_layers_for(model.config(), opt.gen);
    j["prefill_chunk"] = opt.gen.prefill_chunk;
    j["device"] = model.backend().describe();
    j["batch"] = rs.size();
    for (size_t i = 0; i < rs.size(); ++i) {
      j["results"].push_back({{"prompt_tokens", prompts[i].size()},
                              {"tokens", rs[i].tokens},
                              {"text", text_of(model, rs[i].tokens)},
                              {"prefill_s", rs[i].prefill_seconds}});
      if (opt.prompt_logits) j["results"].back()["prompt_logits"] = rs[i].prompt_logits;
    }
    j["decode_s"] = rs[0].decode_seconds;
    add_step_times(j, rs[0].step_seconds);
    // Each request's first token comes from its prefill; the decode passes make the rest.
    j["decode_tokens_per_s"] = static_cast<double>(generated - rs.size()) / rs[0].decode_seconds;
    j["kv_bytes_per_token"] = a.bytes_per_live_token();
    j["reconciled"] = a.reconciled;
    add_attention_stats(j, model.backend().attention_stats());
    add_forward_stats(j, model.backend().forward_stats());
    print_memory(model, &a, &j);
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  for (size_t i = 0; i < rs.size(); ++i)
    fmt::print("[{}] {} prompt tokens ->{}\n", i, prompts[i].size(), text_of(model, rs[i].tokens));
  fmt::print(
      "\nbatched decode of {} sequences: {} tokens in {:.2f} s ({:.1f} tok/s); KV bytes: recent {} anchor {} stale {}, "
      "reconciled: {}\n",
      rs.size(), generated - rs.size(), rs[0].decode_seconds,
      static_cast<double>(generated - rs.size()) / rs[0].decode_seconds,
      a.tier_bytes[0], a.tier_bytes[1], a.tier_bytes[2], a.reconciled ? "yes" : "NO");
  return 0;
}

}  // namespace

int run_generate(GenerateCmdOptions opt) {
  // Everything a request can get wrong is checked before the model is loaded.
  opt.gen.mode = cache::parse_kv_mode(opt.kv);
  if (!opt.tq4_layers.empty()) opt.gen.tq4_layers = engine::parse_tq4_layers(opt.tq4_layers);
  if (opt.prompt_given == !opt.prompt_file.empty())
    throw std::invalid_argument("generate: give exactly one of --prompt and --prompt-file");
  if (opt.prompt_given && opt.prompt.empty()) throw std::invalid_argument("generate: --prompt is empty");
  if (opt.batch < 1) throw std::invalid_argument("generate: --batch must be at least 1");
  if (opt.prompt_logits && !opt.json) throw std::invalid_argument("generate: --prompt-logits needs --json");
  engine::validate(opt.gen);
  const auto load = load_options(opt.weights, opt.dummy_weights, opt.dummy_seed, opt.fallback_tokenizer);
  const auto model = engine::Model::load(opt.model, backend::parse_device(opt.device), load);
  if (!opt.json) print_memory(*model, nullptr);
  const auto context = static_cast<size_t>(model->config().max_position_embeddings);
  const size_t budget = static_cast<size_t>(opt.gen.max_new_tokens);
  if (budget >= context)
    throw std::invalid_argument("generate: " + std::to_string(budget) +
                                " new tokens leave no room for a prompt in the " + "model's context of " +
                                std::to_string(context));
  std::string text = opt.prompt;
  if (!opt.prompt_file.empty()) {
    std::ifstream f(opt.prompt_file, std::ios::binary);
    if (!f) throw std::invalid_argument("generate: cannot read " + opt.prompt_file);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (text.empty()) throw std::invalid_argument("generate: " + opt.prompt_file + " is empty");
  }
  std::vector<int32_t> encoded;
  if (opt.prompt_tokens > 0) {  // about 4 bytes per token: encode only what the prompts can use
    size_t cut = (opt.prompt_tokens + 997 * static_cast<size_t>(opt.batch)) * 8;
    if (text.size() > cut) {
      while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // at a code point
      text.resize(cut);
    }
    encoded = model->tokenizer().encode(text);
  } else {
    // The prompt is used whole, so it must fit: encoding stops (or never starts) once it cannot.
    auto ids = model->tokenizer().encode_bounded(text, context - budget);
    if (!ids)
      throw std::invalid_argument("generate: the prompt (" + std::to_string(text.size()) + " bytes) plus " +
                                  std::to_string(budget) + " new tokens exceeds the model's context of " +
                                  std::to_string(context) + " tokens");
    encoded = std::move(*ids);
  }
  if (encoded.empty()) throw std::invalid_argument("generate: the prompt encodes to no tokens");
  // Prompt i starts 997 i tokens into the text, cut or repeated cyclically to --prompt-tokens.
  auto prompt_at = [&](size_t i) {
    if (opt.prompt_tokens == 0 && i == 0) return encoded;
    const size_t n = opt.prompt_tokens ? opt.prompt_tokens : encoded.size();
    std::vector<int32_t> p(n);
    for (size_t t = 0; t < n; ++t) p[t] = encoded[(997 * i + t) % encoded.size()];
    return p;
  };
  const auto ids = prompt_at(0);
  if (ids.size() + static_cast<size_t>(opt.gen.max_new_tokens) >
      static_cast<size_t>(model->config().max_position_embeddings))
    throw std::invalid_argument("generate: prompt of " + std::to_string(ids.size()) + " tokens plus " +
                                std::to_string(opt.gen.max_new_tokens) + " new tokens exceeds the model's context of " +
                                std::to_string(model->config().max_position_embeddings));
  if (!opt.prefill_chunk_given)
    opt.gen.prefill_chunk = engine::auto_prefill_chunk(*model, ids.size() + budget, opt.gen);
  if (opt.ignore_eos) opt.gen.stop_ids = {-1};  // no token id matches
  opt.gen.keep_prompt_logits = opt.prompt_logits;
  if (!opt.batch_prompts.empty() || opt.batch > 1) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < opt.batch; ++i) prompts.push_back(prompt_at(static_cast<size_t>(i)));
    return run_batch(*model, std::move(prompts), opt);
  }
  if (!opt.json) {
    const std::string layout = stale_layout(model->config(), opt.gen);
    fmt::print(stderr, "prompt: {} tokens, kv {}{}{}, device {}\n", ids.size(), opt.kv, layout.empty() ? "" : "; ",
               layout, model->backend().describe());
    opt.gen.on_prefill_progress = [](size_t done, size_t total) {
      fmt::print(stderr, "\rprefill {}/{} tokens", done, total);
      if (done == total) fmt::print(stderr, "\n");
    };
  }
  auto check_layers = [&](const std::vector<int>& layers, const char* what) {
    for (int l : layers)
      if (l < 0 || l >= model->config().num_hidden_layers)
        throw std::invalid_argument(fmt::format("generate: {} layer {} out of range", what, l));
  };
  check_layers(opt.gen.protected_layers, "protected");
  check_layers(opt.gen.tq4_layers.value_or(std::vector<int>{}), "TQ4");
  std::string streamed;
  const auto r = engine::generate(*model, ids, opt.gen, [&](int32_t t) {
    if (opt.json) return;
    const std::string piece = text_of(*model, std::vector<int32_t>{t});
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  const auto& a = r.accounting;
  const char* tiers[] = {"recent", "anchor", "stale"};
  if (opt.json) {
    nlohmann::json j;
    j["prompt_tokens"] = ids.size();
    j["tokens"] = r.tokens;
    j["text"] = text_of(*model, r.tokens);
    j["kv"] = opt.kv;
    if (cache::retiers(opt.gen.mode)) j["tq4_layers"] = engine::tq4_layers_for(model->config(), opt.gen);
    j["prefill_chunk"] = opt.gen.prefill_chunk;
    j["device"] = model->backend().describe();
    j["prefill_tokens_per_s"] = static_cast<double>(ids.size()) / r.prefill_seconds;
    j["decode_tokens_per_s"] = r.tokens.size() > 1 ? static_cast<double>(r.tokens.size() - 1) / r.decode_seconds : 0.0;
    add_step_times(j, r.step_seconds);
    for (int t = 0; t < 3; ++t) j["kv_bytes_by_tier"][tiers[t]] = a.tier_bytes[t];
    j["kv_bytes_per_token"] = a.bytes_per_live_token();
    j["block_table_bytes"] = a.block_table_bytes;
    j["reconciled"] = a.reconciled;
    add_attention_stats(j, model->backend().attention_stats());
    add_forward_stats(j, model->backend().forward_stats());
    if (opt.prompt_logits) j["prompt_logits"] = r.prompt_logits;
    print_memory(*model, &a, &j);
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print(
        "\n\nprompt {:.1f} tok/s, decode {:.1f} tok/s; KV bytes: recent {} anchor {} stale {}, "
        "{:.1f} bytes per live token (block tables included), reconciled: {}\n",
        static_cast<double>(ids.size()) / r.prefill_seconds,
        r.tokens.size() > 1 ? static_cast<double>(r.tokens.size() - 1) / r.decode_seconds : 0.0, a.tier_bytes[0],
        a.tier_bytes[1], a.tier_bytes[2], a.bytes_per_live_token(), a.reconciled ? "yes" : "NO");
    const auto st = model->backend().attention_stats();
    if (st.calls) {
      std::string routes;
      for (const auto& [name, n] : st.routes) routes += fmt::format("{}{} {}", routes.empty() ? "" : ", ", name, n);
      fmt::print(
          "attention on {}: {} calls ({}); read bf16 {} fp8 {} tq3 {} bytes; dense copies {} bytes, fallbacks {}\n",
          model->backend().describe(), st.calls, routes, st.bytes_read[0], st.bytes_read[1], st.bytes_read[2],
          st.dense_shadow_bytes, st.fallbacks);
    }
  }
  return 0;
}

namespace {
const Registration kCommand(
    {"generate", "run a prompt through a model with the KV cache in bf16, fp8 or minima mode", 60, [](CLI::App& sub) {
       auto opt = std::make_shared<GenerateCmdOptions>();
       opt->model = default_model_dir();
       sub.add_option("--model", opt->model, "model directory (config.json, tokenizer.json, safetensors)");
       auto* prompt_opt = sub.add_option("--prompt", opt->prompt, "prompt text");
       sub.add_option("--prompt-file", opt->prompt_file, "read the prompt from this file");
       sub.add_option("--prompt-tokens", opt->prompt_tokens, "cut or cyclically repeat the prompt to this many tokens")
           ->check(CLI::Range(size_t{0}, size_t{1} << 24));
       sub.add_option("--batch", opt->batch, "decode this many prompts together, each starting further into the text")
           ->check(CLI::Range(1, 4096));
       sub.add_option("--also", opt->batch_prompts, "further prompts, decoded together with the first (batched decode)")
           ->expected(1)
           ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
       sub.add_option("--kv", opt->kv, "bf16 (dense control), fp8 or minima")
           ->check(CLI::IsMember({"bf16", "fp8", "minima"}));
       sub.add_option("--device", opt->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
       sub.add_option("--weights", opt->weights,
                      "weight matrices: auto (BF16 on cuda; the checkpoint's precision on cpu), bf16, or fp32")
           ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
       sub.add_flag("--dummy-weights", opt->dummy_weights,
                    "random weights from --model's config.json alone (benchmarks at real geometry; bench/configs/)");
       sub.add_option("--dummy-seed", opt->dummy_seed, "seed of the dummy weights");
       opt->fallback_tokenizer = default_model_dir() + "/tokenizer.json";
       sub.add_option("--max-tokens", opt->gen.max_new_tokens, "tokens to generate")->check(CLI::Range(0, 1 << 20));
       sub.add_option("--page-size", opt->gen.tokens_per_page, "tokens per KV page")->check(CLI::Range(16, 4096));
       auto* chunk_opt = sub.add_option("--prefill-chunk", opt->gen.prefill_chunk,
                                        "prompt tokens per prefill chunk (default: 512 on the CPU; on a GPU 4096, "
                                        "less when device memory is short)")
                             ->check(CLI::Range(1, 1 << 20));
       sub.add_option("--recent-window", opt->gen.controller.recent_window, "Recent pages (minima)")
           ->check(CLI::Range(1u, 1u << 20));
       sub.add_option("--anchor-budget", opt->gen.controller.anchor_budget, "scored Anchor pages (minima)")
           ->check(CLI::Range(0u, 1u << 20));
       sub.add_option("--sinks", opt->gen.controller.sink_pages, "sink pages kept as Anchors (minima)")
           ->check(CLI::Range(0u, 1u << 20));
       sub.add_option("--checkpoint-interval", opt->gen.checkpoint_interval, "decode tokens between retier checkpoints")
           ->check(CLI::Range(0, 1 << 20));
       sub.add_option("--protected-layers", opt->gen.protected_layers, "layers kept FP8 in every tier (minima)")
           ->check(CLI::Range(0, 1 << 18));
       add_tq4_layers_option(sub, opt->tq4_layers);
       sub.add_option("--temperature", opt->gen.temperature, "0 for greedy")
           ->check(finite())
           ->check(CLI::Range(0.0, 100.0));
       sub.add_option("--top-p", opt->gen.top_p, "nucleus mass")->check(finite())->check(CLI::Range(0.0, 1.0));
       sub.add_option("--seed", opt->gen.seed, "sampling seed");
       sub.add_flag("--json", opt->json, "machine-readable output");
       sub.add_flag("--ignore-eos", opt->ignore_eos, "generate --max-tokens tokens even past an end-of-sequence token");
       sub.add_flag("--prompt-logits", opt->prompt_logits, "with --json: include the logits after the prompt");
       sub.add_flag("--scoring", opt->gen.controller.scoring, "feed attention page scores to the controller (minima)");
       return std::function<int()>([=] {
         opt->prompt_given = prompt_opt->count() > 0;
         opt->prefill_chunk_given = chunk_opt->count() > 0;
         return run_generate(*opt);
       });
     }});
}  // namespace

}  // namespace minimakv::app
