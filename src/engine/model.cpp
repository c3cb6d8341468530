#include "minimakv/engine/model.h"

#include <algorithm>

#include "minimakv/attention/paged_attention.h"
#include "minimakv/engine/cpu_ops.h"
#include "minimakv/model/safetensors.h"

namespace minimakv::engine {

std::unique_ptr<Model> Model::load(const std::string& dir) {
  auto m = std::unique_ptr<Model>(new Model());
  m->cfg_ = model::load_config(dir);
  const auto& c = m->cfg_;
  m->tok_ = std::make_unique<model::Tokenizer>(model::Tokenizer::load(dir + "/tokenizer.json"));
  const model::Checkpoint ck = model::Checkpoint::open(dir);
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t QD = c.num_attention_heads * D, KD = c.num_key_value_heads * D;
  auto load = [&](const std::string& name, std::vector<int64_t> shape) { return ck.load_f32(name, shape); };
  m->embed_ = load("model.embed_tokens.weight", {c.vocab_size, H});
  m->final_norm_ = load("model.norm.weight", {H});
  if (!c.tie_word_embeddings) m->lm_head_ = load("lm_head.weight", {c.vocab_size, H});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer L;
    L.wq = load(p + "self_attn.q_proj.weight", {QD, H});
    L.wk = load(p + "self_attn.k_proj.weight", {KD, H});
    L.wv = load(p + "self_attn.v_proj.weight", {KD, H});
    L.wo = load(p + "self_attn.o_proj.weight", {H, QD});
    if (c.qk_norm) {
      L.q_norm = load(p + "self_attn.q_norm.weight", {D});
      L.k_norm = load(p + "self_attn.k_norm.weight", {D});
    }
    L.in_norm = load(p + "input_layernorm.weight", {H});
    L.post_norm = load(p + "post_attention_layernorm.weight", {H});
    L.gate = load(p + "mlp.gate_proj.weight", {I, H});
    L.up = load(p + "mlp.up_proj.weight", {I, H});
    L.down = load(p + "mlp.down_proj.weight", {H, I});
    m->layers_.push_back(std::move(L));
  }
  m->rope_ = std::make_unique<Rope>(c);
  return m;
}

cache::StoreConfig Model::store_config(cache::KvMode mode, int tokens_per_page, size_t max_tokens) const {
  cache::StoreConfig s;
  s.layers = static_cast<int>(cfg_.num_hidden_layers);
  s.kv_heads = static_cast<int>(cfg_.num_key_value_heads);
  s.head_dim = static_cast<int>(cfg_.head_dim);
  s.tokens_per_page = tokens_per_page;
  s.mode = mode;
  const size_t pages = (max_tokens / static_cast<size_t>(tokens_per_page) + 2) * static_cast<size_t>(s.layers);
  (mode == cache::KvMode::kBf16 ? s.bf16_pages : s.fp8_pages) = pages;
  if (mode == cache::KvMode::kMinima) s.tq3_pages = pages;
  return s;
}

std::vector<float> Model::forward(cache::KvStore& store, cache::SeqId seq, std::span<const int32_t> ids,
                                  attention::ThreadPool* pool, bool all_logits, std::vector<float>* page_scores) const {
  const auto& c = cfg_;
  const int n = static_cast<int>(ids.size());
  const int H = static_cast<int>(c.hidden_size), D = static_cast<int>(c.head_dim),
            I = static_cast<int>(c.intermediate_size);
  const int Hq = static_cast<int>(c.num_attention_heads), Hkv = static_cast<int>(c.num_key_value_heads);
  const auto V = static_cast<int>(c.vocab_size);
  const auto eps = static_cast<float>(c.rms_norm_eps);
  for (int32_t id : ids)
    if (id < 0 || id >= V) throw std::invalid_argument("forward: token id " + std::to_string(id) + " out of range");
  const auto first = static_cast<uint32_t>(store.length(seq));
  if (first + static_cast<uint32_t>(n) > static_cast<uint32_t>(c.max_position_embeddings))
    throw std::invalid_argument("forward: the sequence would exceed the model's context of " +
                                std::to_string(c.max_position_embeddings) + " tokens");
  std::vector<float> x(static_cast<size_t>(n) * H), h(x.size()), q(static_cast<size_t>(n) * Hq * D),
      k(static_cast<size_t>(n) * Hkv * D), v(k.size()), attn(q.size()), o(x.size()), g(static_cast<size_t>(n) * I),
      u(g.size()), a(g.size());
  for (int t = 0; t < n; ++t)
    std::copy_n(embed_.begin() + static_cast<std::ptrdiff_t>(ids[t]) * H, H,
                x.begin() + static_cast<std::ptrdiff_t>(t) * H);
  store.begin_append(seq, ids);
  if (page_scores) page_scores->clear();
  attention::PagePartials partials;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    h = x;
    rmsnorm(h, H, L.in_norm, eps);
    matmul(h, n, H, L.wq, Hq * D, q);
    matmul(h, n, H, L.wk, Hkv * D, k);
    matmul(h, n, H, L.wv, Hkv * D, v);
    if (c.qk_norm) {
      rmsnorm(q, D, L.q_norm, eps);
      rmsnorm(k, D, L.k_norm, eps);
    }
    rope_->apply(q, n, Hq, first);
    rope_->apply(k, n, Hkv, first);
    store.write_layer(seq, static_cast<int>(l), k, v);
    {
      auto pin = store.pin(seq);
      const auto in = attention::layer_input(store, pin, static_cast<int>(l), Hq);
      attention::attend(in, {q, n, first}, attn, page_scores ? &partials : nullptr, {0, pool});
    }
    if (page_scores) {
      const auto r = attention::page_scores(partials);
      if (page_scores->size() < r.size()) page_scores->resize(r.size(), 0.0f);
      for (size_t p = 0; p < r.size(); ++p) (*page_scores)[p] += r[p] / static_cast<float>(layers_.size());
    }
    matmul(attn, n, Hq * D, L.wo, H, o);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = x;
    rmsnorm(h, H, L.post_norm, eps);
    matmul(h, n, H, L.gate, I, g);
    matmul(h, n, H, L.up, I, u);
    swiglu(g, u, a);
    matmul(a, n, I, L.down, H, o);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
  }
  store.commit_append(seq);
  rmsnorm(x, H, final_norm_, eps);
  const std::vector<float>& head = lm_head_.empty() ? embed_ : lm_head_;
  const int rows = all_logits ? n : 1;
  std::vector<float> logits(static_cast<size_t>(rows) * V);
  const std::span<const float> src =
      all_logits ? std::span<const float>(x) : std::span<const float>(x).subspan(static_cast<size_t>(n - 1) * H, H);
  matmul(src, rows, H, head, V, logits);
  return logits;
}

}  // namespace minimakv::engine
