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
  const SeqChunk one{seq, ids};
  std::vector<std::vector<float>> scores;
  auto out =
      forward_batch(store, std::span<const SeqChunk>(&one, 1), pool, all_logits, page_scores ? &scores : nullptr);
  if (page_scores) *page_scores = std::move(scores[0]);
  return out;
}

std::vector<float> Model::forward_batch(cache::KvStore& store, std::span<const SeqChunk> chunks,
                                        attention::ThreadPool* pool, bool all_logits,
                                        std::vector<std::vector<float>>* page_scores) const {
  const auto& c = cfg_;
  const int H = static_cast<int>(c.hidden_size), D = static_cast<int>(c.head_dim),
            I = static_cast<int>(c.intermediate_size);
  const int Hq = static_cast<int>(c.num_attention_heads), Hkv = static_cast<int>(c.num_key_value_heads);
  const auto V = static_cast<int>(c.vocab_size);
  const auto eps = static_cast<float>(c.rms_norm_eps);
  if (chunks.empty()) throw std::invalid_argument("forward: no sequences");
  // Validate everything before the store changes.
  std::vector<int> row0(chunks.size() + 1, 0);
  std::vector<uint32_t> first(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto& ch = chunks[i];
    if (ch.ids.empty()) throw std::invalid_argument("forward: empty token chunk");
    for (int32_t id : ch.ids)
      if (id < 0 || id >= V) throw std::invalid_argument("forward: token id " + std::to_string(id) + " out of range");
    first[i] = static_cast<uint32_t>(store.length(ch.seq));
    if (first[i] + ch.ids.size() > static_cast<size_t>(c.max_position_embeddings))
      throw std::invalid_argument("forward: the sequence would exceed the model's context of " +
                                  std::to_string(c.max_position_embeddings) + " tokens");
    row0[i + 1] = row0[i] + static_cast<int>(ch.ids.size());
  }
  const int n = row0.back();
  std::vector<float> x(static_cast<size_t>(n) * H), h(x.size()), q(static_cast<size_t>(n) * Hq * D),
      k(static_cast<size_t>(n) * Hkv * D), v(k.size()), attn(q.size()), o(x.size()), g(static_cast<size_t>(n) * I),
      u(g.size()), a(g.size());
  for (size_t i = 0; i < chunks.size(); ++i)
    for (size_t t = 0; t < chunks[i].ids.size(); ++t)
      std::copy_n(embed_.begin() + static_cast<std::ptrdiff_t>(chunks[i].ids[t]) * H, H,
                  x.begin() + static_cast<std::ptrdiff_t>(row0[i] + static_cast<int>(t)) * H);
  std::vector<cache::KvStore::AppendChunk> appends;
  for (const auto& ch : chunks) appends.push_back({ch.seq, ch.ids});
  store.begin_append_batch(appends);  // capacity for every sequence checked first
  if (page_scores) page_scores->assign(chunks.size(), {});
  attention::PagePartials partials;
  const size_t qrow = static_cast<size_t>(Hq) * D, kvrow = static_cast<size_t>(Hkv) * D;
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
    for (size_t i = 0; i < chunks.size(); ++i) {
      const auto r = static_cast<size_t>(row0[i]), m = chunks[i].ids.size();
      const std::span<float> qi(q.data() + r * qrow, m * qrow), ki(k.data() + r * kvrow, m * kvrow);
      rope_->apply(qi, static_cast<int>(m), Hq, first[i]);
      rope_->apply(ki, static_cast<int>(m), Hkv, first[i]);
      store.write_layer(chunks[i].seq, static_cast<int>(l), ki,
                        std::span<const float>(v.data() + r * kvrow, m * kvrow));
      {
        auto pin = store.pin(chunks[i].seq);
        const auto in = attention::layer_input(store, pin, static_cast<int>(l), Hq);
        attention::attend(in, {qi, static_cast<int>(m), first[i]}, std::span<float>(attn.data() + r * qrow, m * qrow),
                          page_scores ? &partials : nullptr, {0, pool});
      }
      if (page_scores) {
        const auto sc = attention::page_scores(partials);
        auto& acc = (*page_scores)[i];
        if (acc.size() < sc.size()) acc.resize(sc.size(), 0.0f);
        for (size_t p = 0; p < sc.size(); ++p) acc[p] += sc[p] / static_cast<float>(layers_.size());
      }
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
  for (const auto& ch : chunks) store.commit_append(ch.seq);
  rmsnorm(x, H, final_norm_, eps);
  const std::vector<float>& head = lm_head_.empty() ? embed_ : lm_head_;
  if (all_logits) {
    std::vector<float> logits(static_cast<size_t>(n) * V);
    matmul(x, n, H, head, V, logits);
    return logits;
  }
  // The last row of each chunk.
  std::vector<float> last(chunks.size() * static_cast<size_t>(H));
  for (size_t i = 0; i < chunks.size(); ++i)
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(row0[i + 1] - 1) * H, H,
                last.begin() + static_cast<std::ptrdiff_t>(i) * H);
  std::vector<float> logits(chunks.size() * static_cast<size_t>(V));
  matmul(last, static_cast<int>(chunks.size()), H, head, V, logits);
  return logits;
}

}  // namespace minimakv::engine
