#include "minimakv/eval/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "minimakv/engine/capacity.h"
#include "minimakv/policy/tier_controller.h"

namespace minimakv::eval {

std::string ArmSpec::describe() const {
  const auto& c = opt.controller;
  std::string s = std::string(cache::to_string(opt.mode)) +
                  ", " + std::to_string(opt.tokens_per_page) + "-token pages, prefill chunks of " +
                  std::to_string(opt.prefill_chunk) + " with a retier checkpoint after each";
  if (cache::retiers(opt.mode))
    s += "; Recent " + std::to_string(c.recent_window) + " pages, sinks " + std::to_string(c.sink_pages) +
         (c.scoring ? ", " + std::to_string(c.anchor_budget) + " scored Anchor pages" : ", no scored anchors");
  if (!opt.protected_layers.empty()) {
    s += "; layers";
    for (size_t i = 0; i < opt.protected_layers.size(); ++i)
      s += (i ? ", " : " ") + std::to_string(opt.protected_layers[i]);
    s += " kept in FP8";
  }
  if (cache::retiers(opt.mode)) {
    if (!opt.tq4_layers) {
      s += "; Stale pages in TQ4 in the layers of the model's KV profile, if it has one";
    } else if (!opt.tq4_layers->empty()) {
      s += fmt::format("; Stale pages of layers {} in TQ4", fmt::join(*opt.tq4_layers, ", "));
    } else {
      s += "; Stale pages in TQ3 in every layer";
    }
  }
  if (prefix_reuse) s += "; document cached by a first request, question asked through the prefix cache";
  return s;
}

std::vector<std::string> known_arms() {
  return {"bf16", "fp8", "minima", "minima-scored", "minima-aggr", "minima-reuse"};
}

namespace {

[[noreturn]] void bad_arm(std::string_view name, const std::string& why) {
  throw std::invalid_argument("arm '" + std::string(name) + "': " + why);
}

uint32_t arm_count(std::string_view name, std::string_view key, std::string_view v, uint32_t lo) {
  uint32_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || x < lo || x > 1u << 20)
    bad_arm(name,
            std::string(key) + " takes a whole number from " + std::to_string(lo) + ", got '" + std::string(v) + "'");
  return x;
}

// The pieces of `s` between `sep`s; an empty piece (two `sep`s in a row, or one at either end) is an error.
std::vector<std::string_view> arm_pieces(std::string_view name, std::string_view s, char sep, const char* what) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    const std::string_view piece = s.substr(start, end == std::string_view::npos ? end : end - start);
    if (piece.empty()) bad_arm(name, std::string("an empty ") + what);
    out.push_back(piece);
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// The modifiers after the base name: @recent=W, @sinks=S, @anchors=A (scored Anchor pages; 0 turns
// scoring off), @protect=L+L+... (layers whose pages stay FP8 in every tier), @tq4=L+L+... (layers
// whose Stale pages are TQ4; @tq4=none: TQ3 in every layer, whatever the model's KV profile says).
void apply_modifiers(ArmSpec& a, std::string_view name, std::string_view mods) {
  if (!cache::retiers(a.opt.mode)) bad_arm(name, "modifiers apply to minima arms only");
  for (const std::string_view m : arm_pieces(name, mods, '@', "modifier")) {
    const size_t eq = m.find('=');
    if (eq == std::string_view::npos) bad_arm(name, "modifier '" + std::string(m) + "' is not key=value");
    const std::string_view key = m.substr(0, eq), v = m.substr(eq + 1);
    auto& c = a.opt.controller;
    if (key == "recent") {
      c.recent_window = arm_count(name, key, v, 1);
    } else if (key == "sinks") {
      c.sink_pages = arm_count(name, key, v, 0);
    } else if (key == "anchors") {
      c.anchor_budget = arm_count(name, key, v, 0);
      c.scoring = c.anchor_budget > 0;
    } else if (key == "tq4" && v == "none") {
      a.opt.tq4_layers = std::vector<int>{};
    } else if (key == "protect" || key == "tq4") {
      std::vector<int> layers;
      for (const std::string_view layer : arm_pieces(name, v, '+', key == "protect" ? "protect layer" : "tq4 layer"))
        layers.push_back(static_cast<int>(arm_count(name, key, layer, 0)));
      if (key == "protect")
        a.opt.protected_layers = std::move(layers);
      else
        a.opt.tq4_layers = std::move(layers);
    } else {
      bad_arm(name, "unknown modifier '" + std::string(key) + "' (recent, sinks, anchors, protect, tq4)");
    }
  }
}

}  // namespace

ArmSpec make_arm(std::string_view name, int page_size, int prefill_chunk) {
  ArmSpec a;
  a.name = std::string(name);
  a.opt.tokens_per_page = page_size;
  a.opt.prefill_chunk = prefill_chunk;
  a.opt.checkpoint_interval = 16;
  a.opt.controller.recent_window = 4;
  a.opt.controller.sink_pages = 1;
  a.opt.controller.anchor_budget = 0;
  a.opt.controller.scoring = false;
  const size_t at = name.find('@');
  const std::string_view base = name.substr(0, at);
  if (base == "bf16") {
    a.opt.mode = cache::KvMode::kBf16;
  } else if (base == "fp8") {
    a.opt.mode = cache::KvMode::kFp8;
  } else if (base == "minima" || base == "minima-reuse") {
    a.opt.mode = cache::KvMode::kMinima;
    a.prefix_reuse = base == "minima-reuse";
  } else if (base == "minima-scored") {
    a.opt.mode = cache::KvMode::kMinima;
    a.opt.controller.scoring = true;
    a.opt.controller.anchor_budget = 4;
  } else if (base == "minima-aggr") {
    a.opt.mode = cache::KvMode::kMinima;
    a.opt.controller.recent_window = 1;
  } else {
    std::string known;
    for (const auto& k : known_arms()) known += (known.empty() ? "" : ", ") + k;
    throw std::invalid_argument("unknown arm '" + std::string(name) + "' (arms: " + known +
                                "; minima arms take @recent=W, @sinks=S, @anchors=A, @protect=L+L, @tq4=L+L or none)");
  }
  if (at != std::string_view::npos) apply_modifiers(a, name, name.substr(at + 1));
  return a;
}

KvUse KvUse::from(const cache::Accounting& a) {
  KvUse u;
  u.recent = a.tier_bytes[static_cast<int>(cache::Tier::kRecent)];
  u.anchor = a.tier_bytes[static_cast<int>(cache::Tier::kAnchor)];
  u.stale = a.tier_bytes[static_cast<int>(cache::Tier::kStale)];
  u.block_tables = a.block_table_bytes;
  u.live_tokens = a.live_tokens;
  u.bytes_per_token = a.bytes_per_live_token();
  u.reconciled = a.reconciled;
  return u;
}

namespace {

// The token index where the question starts: the document part is everything before it.
size_t document_tokens(const model::Tokenizer& tok, const Example& ex) {
  const auto q = ex.prompt.rfind("\nWhat ");
  if (q == std::string::npos) return ex.ids.size() / 2;
  const auto doc = tok.encode(std::string_view(ex.prompt).substr(0, q));
  // BPE may merge across the boundary: keep only the common prefix of both encodings.
  size_t n = 0;
  while (n < doc.size() && n < ex.ids.size() && doc[n] == ex.ids[n]) ++n;
  return n;
}

}  // namespace

std::vector<NiahRecord> run_niah(const engine::Model& model, const NiahData& data, const NiahConfig& cfg,
                                 const std::function<void(const NiahRecord&)>& progress) {
  std::vector<const TaskSpec*> tasks;
  if (cfg.tasks.empty())
    for (const auto& t : ruler_niah_tasks()) tasks.push_back(&t);
  else
    for (const auto& n : cfg.tasks) tasks.push_back(&task_by_name(n));
  std::vector<ArmSpec> arms;
  for (const auto& a : cfg.arms) arms.push_back(make_arm(a, cfg.page_size, cfg.prefill_chunk));
  for (int len : cfg.lengths)
    if (len > static_cast<int>(model.config().max_position_embeddings))
      throw std::invalid_argument("length " + std::to_string(len) + " exceeds the model's context of " +
                                  std::to_string(model.config().max_position_embeddings));
  const NiahGenerator gen(data, model.tokenizer(), cfg.seed);
  std::vector<NiahRecord> out;
  for (int len : cfg.lengths)
    for (const auto* t : tasks)
      for (int i = cfg.first_example; i < cfg.first_example + cfg.examples; ++i) {
        const Example ex = gen.make(*t, len, cfg.gen_budget, i);
        for (const auto& arm : arms) {
          engine::GenerateOptions opt = arm.opt;
          opt.max_new_tokens = cfg.gen_budget;
          NiahRecord r;
          r.task = t->name;
          r.arm = arm.name;
          r.length = len;
          r.index = i;
          r.prompt_tokens = ex.ids.size();
          engine::GenerateResult g;
          if (arm.prefix_reuse) {
            engine::Session s(model, opt, 2 * static_cast<size_t>(len));
            const size_t doc = document_tokens(model.tokenizer(), ex);
            s.run(std::span<const int32_t>(ex.ids).first(doc), {}, 0);
            const auto res = s.run(ex.ids);
            g = res.gen;
            r.reused_tokens = res.reused_tokens;
          } else {
            g = engine::generate(model, ex.ids, opt);
          }
          r.output = model.tokenizer().decode(g.tokens);
          r.generated = g.tokens.size();
          r.score = string_match_all(r.output, ex.expected);
          r.prefill_s = g.prefill_seconds;
          r.decode_s = g.decode_seconds;
          r.kv = KvUse::from(g.accounting);
          if (progress) progress(r);
          out.push_back(std::move(r));
        }
      }
  return out;
}

namespace {

// Log-softmax rows of the last `score` positions of `ids`, prefilling chunk by chunk as `arm` does.
std::vector<float> tail_log_probs(const engine::Model& model, const std::vector<int32_t>& ids, const ArmSpec& arm,
                                  int score) {
  const auto sc = model.store_config(arm.opt, ids.size());
  const auto owned = model.make_store(sc);
  cache::KvStore& store = *owned;
  policy::TierController ctl(arm.opt.controller);
  const auto seq = store.create_sequence();
  const std::vector<cache::SeqId> seqs{seq};
  const size_t V = model.config().vocab_size, n = ids.size(), first_scored = n - static_cast<size_t>(score);
  const size_t chunk = static_cast<size_t>(arm.opt.prefill_chunk);
  const bool scoring = cache::retiers(arm.opt.mode) && arm.opt.controller.scoring;
  std::vector<float> out(static_cast<size_t>(score) * V), page_scores;
  for (size_t p = 0; p < n; p += chunk) {
    const size_t m = std::min(chunk, n - p);
    const bool want = p + m > first_scored;
    const auto logits = model.forward(store, seq, std::span<const int32_t>(ids).subspan(p, m), want,
                                      scoring ? &page_scores : nullptr);
    if (scoring) ctl.observe(seq, page_scores);
    if (cache::retiers(arm.opt.mode)) ctl.checkpoint(store, seqs);
    if (!want) continue;
    for (size_t i = 0; i < m; ++i) {
      const size_t pos = p + i;
      if (pos < first_scored) continue;
      const float* row = logits.data() + i * V;
      const float mx = *std::max_element(row, row + V);
      double z = 0;
      for (size_t k = 0; k < V; ++k) z += std::exp(static_cast<double>(row[k] - mx));
      const auto lz = static_cast<float>(std::log(z));
      float* dst = out.data() + (pos - first_scored) * V;
      for (size_t k = 0; k < V; ++k) dst[k] = row[k] - mx - lz;
    }
  }
  store.finish(seq);
  return out;
}

double kl(const float* lp, const float* lq, size_t V) {
  double s = 0;
  for (size_t k = 0; k < V; ++k) {
    const double p = std::exp(static_cast<double>(lp[k]));
    s += p * (static_cast<double>(lp[k]) - lq[k]);
  }
  return std::max(0.0, s);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  return v[static_cast<size_t>(std::min(n - 1, std::max(0.0, std::ceil(q * n) - 1)))];
}

}  // namespace

std::vector<KlRecord> run_kl(const engine::Model& model, const NiahData& data, const std::vector<int>& lengths,
                             int windows, int score_tokens, const std::vector<std::string>& arms, int page_size,
                             int prefill_chunk, uint64_t seed) {
  if (windows < 1 || score_tokens < 1) throw std::invalid_argument("run_kl: windows and score_tokens must be positive");
  std::vector<ArmSpec> specs{make_arm("bf16", page_size, prefill_chunk)};  // the reference first
  for (const auto& a : arms)
    if (a != "bf16") specs.push_back(make_arm(a, page_size, prefill_chunk));
  const size_t V = model.config().vocab_size;
  std::vector<KlRecord> out;
  for (int len : lengths) {
    if (score_tokens >= len) throw std::invalid_argument("run_kl: score_tokens must be below the length");
    std::vector<std::vector<double>> fwd(specs.size()), rev(specs.size()), nll(specs.size());
    SplitMix rng(seed ^ static_cast<uint64_t>(len));
    for (int w = 0; w < windows; ++w) {
      // A window of held-out essay text, starting at a random sentence.
      const auto ids = essay_window(data, model.tokenizer(), rng.below(data.essay_sentences.size()), len);
      const size_t first = ids.size() - static_cast<size_t>(score_tokens);
      std::vector<float> base;
      for (size_t a = 0; a < specs.size(); ++a) {
        const auto lp = tail_log_probs(model, ids, specs[a], score_tokens);
        for (int p = 0; p + 1 < score_tokens; ++p)
          nll[a].push_back(-lp[p * V + static_cast<size_t>(ids[first + p + 1])]);
        if (a == 0) {
          base = lp;
          continue;
        }
        for (int p = 0; p < score_tokens; ++p) {
          fwd[a].push_back(kl(lp.data() + p * V, base.data() + p * V, V));
          rev[a].push_back(kl(base.data() + p * V, lp.data() + p * V, V));
        }
      }
    }
    auto perplexity = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return v.empty() ? 0.0 : std::exp(s / static_cast<double>(v.size()));
    };
    for (size_t a = 0; a < specs.size(); ++a) {
      KlRecord r;
      r.arm = specs[a].name;
      r.length = len;
      r.windows = windows;
      r.positions = static_cast<size_t>(windows) * static_cast<size_t>(score_tokens);
      for (double x : fwd[a]) r.mean += x / static_cast<double>(fwd[a].size());
      for (double x : rev[a]) r.mean_rev += x / static_cast<double>(rev[a].size());
      r.p99 = a == 0 ? 0.0 : percentile(fwd[a], 0.99);
      r.p99_rev = a == 0 ? 0.0 : percentile(rev[a], 0.99);
      r.ppl = perplexity(nll[a]);
      r.ppl_bf16 = perplexity(nll[0]);
      out.push_back(r);
    }
  }
  return out;
}

std::vector<MemoryRecord> project_memory(const engine::Model& model, const std::vector<std::string>& arms,
                                         const std::vector<size_t>& tokens, int page_size, int prefill_chunk) {
  std::vector<MemoryRecord> out;
  for (const auto& name : arms) {
    const ArmSpec arm = make_arm(name, page_size, prefill_chunk);
    for (size_t T : tokens) out.push_back({name, T, KvUse::from(engine::hold_one_request(model.config(), arm.opt, T))});
  }
  return out;
}

}  // namespace minimakv::eval
