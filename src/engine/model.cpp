#include "minimakv/engine/model.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>

#include "minimakv/backend/dummy_weights.h"
#include "minimakv/model/safetensors.h"

namespace minimakv::engine {

namespace {
size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}
}  // namespace

std::unique_ptr<Model> Model::load(const std::string& dir, backend::Device device, const LoadOptions& options) {
  auto m = std::unique_ptr<Model>(new Model());
  m->cfg_ = model::load_config(dir);
  const auto& c = m->cfg_;
  m->arch_ = &architecture_for(c);
  std::string tokenizer_path = dir + "/tokenizer.json";
  if (!std::filesystem::exists(tokenizer_path) && !options.fallback_tokenizer.empty())
    tokenizer_path = options.fallback_tokenizer;
  m->tok_ = std::make_unique<model::Tokenizer>(model::Tokenizer::load(tokenizer_path));
  if (m->tok_->vocab_size() > static_cast<size_t>(c.vocab_size))
    throw std::invalid_argument(tokenizer_path + ": the tokenizer has " + std::to_string(m->tok_->vocab_size()) +
                                " ids, more than the model's vocab_size of " + std::to_string(c.vocab_size));
  m->backend_ = backend::make_backend(device, c, options.cpu_threads);
  backend::Backend& be = *m->backend_;
  using W = LoadOptions::Weights;
  std::optional<model::Checkpoint> ck;
  if (!options.dummy) ck = model::Checkpoint::open(dir);
  // kAuto: the backend's compute dtype where it has one of its own (CUDA: BF16); otherwise the
  // checkpoint's precision, so a BF16 checkpoint stays BF16 (the same values, half the bytes of their
  // fp32 widening) and an F32 or F16 one is not rounded. Dummy weights count as a BF16 checkpoint.
  const bool bf16_checkpoint = options.dummy || ck->tensor("model.embed_tokens.weight").dtype == model::DType::kBF16;
  m->weight_dtype_ = options.weights == W::kBf16                                             ? backend::DType::kBF16
                     : options.weights == W::kFp32                                           ? backend::DType::kF32
                     : be.default_weight_dtype() == backend::DType::kBF16 || bf16_checkpoint ? backend::DType::kBF16
                                                                                             : backend::DType::kF32;
  // Matrices in the chosen dtype; norm weights always fp32 (ones for dummy weights: the identity scale).
  struct Reader final : WeightReader {
    Model& m;
    backend::Backend& be;
    const LoadOptions& options;
    std::optional<model::Checkpoint>& ck;
    Reader(Model& model, backend::Backend& backend, const LoadOptions& o, std::optional<model::Checkpoint>& c)
        : m(model), be(backend), options(o), ck(c) {}
    backend::Tensor matrix(const std::string& name, std::vector<int64_t> shape) override {
      if (options.dummy) {
        m.checkpoint_bytes_ += 2 * numel(shape);
        return be.random_weight(numel(shape), options.dummy_seed ^ std::hash<std::string>{}(name),
                                backend::kDummyWeightScale, m.weight_dtype_);
      }
      const auto& t = ck->tensor(name);
      m.checkpoint_bytes_ += t.end - t.begin;
      if (m.weight_dtype_ == backend::DType::kBF16)
        return be.upload_bf16(ck->load_bf16(name, shape), backend::DType::kBF16);
      return be.upload(ck->load_f32(name, shape));
    }
    backend::Tensor vector(const std::string& name, std::vector<int64_t> shape) override {
      if (options.dummy) {
        m.checkpoint_bytes_ += 2 * numel(shape);
        return be.upload(std::vector<float>(numel(shape), 1.0f));
      }
      const auto& t = ck->tensor(name);
      m.checkpoint_bytes_ += t.end - t.begin;
      return be.upload(ck->load_f32(name, shape));
    }
  } reader(*m, be, options, ck);
  const int64_t H = c.hidden_size;
  m->embed_ = reader.matrix("model.embed_tokens.weight", {c.vocab_size, H});
  m->final_norm_ = reader.vector("model.norm.weight", {H});
  if (!c.tie_word_embeddings) m->lm_head_ = reader.matrix("lm_head.weight", {c.vocab_size, H});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DecoderLayer L = m->arch_->load_layer(reader, c, l);
    // The projections that read the same input, one allocation each (see forward_batch).
    backend::Tensor* qkv[] = {&L.wq, &L.wk, &L.wv};
    backend::Tensor* gate_up[] = {&L.gate, &L.up};
    L.qkv_storage = be.fuse_weights(qkv);
    L.gate_up_storage = be.fuse_weights(gate_up);
    m->layers_.push_back(std::move(L));
  }
  return m;
}

MemoryReport Model::memory() const {
  MemoryReport r;
  r.weight_dtype = weight_dtype_;
  r.checkpoint_bytes = checkpoint_bytes_;
  r.weight_bytes = embed_.bytes() + final_norm_.bytes() + lm_head_.bytes();
  for (const DecoderLayer& L : layers_)
    for (const backend::Tensor* t :
         {&L.wq, &L.wk, &L.wv, &L.wo, &L.q_norm, &L.k_norm, &L.in_norm, &L.post_norm, &L.gate, &L.up, &L.down})
      r.weight_bytes += t->bytes();
  r.device = backend_->device_memory();
  return r;
}

cache::StoreConfig store_config_for(const model::ModelConfig& cfg, const KvOptions& kv, size_t max_tokens) {
  cache::StoreConfig s;
  s.layers = static_cast<int>(cfg.num_hidden_layers);
  s.kv_heads = static_cast<int>(cfg.num_key_value_heads);
  s.head_dim = static_cast<int>(cfg.head_dim);
  s.tokens_per_page = kv.tokens_per_page;
  s.mode = kv.mode;
  s.protected_layers = kv.protected_layers;
  s.tq4_layers = tq4_layers_for(cfg, kv);
  const size_t per_layer = max_tokens / static_cast<size_t>(kv.tokens_per_page) + 2;
  s.pages_of(cache::append_format(kv.mode)) = per_layer * static_cast<size_t>(s.layers);
  if (cache::retiers(kv.mode))
    for (const codec::PageFormat f : s.stale_formats())
      if (f != cache::append_format(kv.mode)) s.pages_of(f) += per_layer;
  return s;
}

cache::StoreConfig Model::store_config(const KvOptions& kv, size_t max_tokens) const {
  return store_config_for(cfg_, kv, max_tokens);
}

std::vector<float> Model::forward(cache::KvStore& store, cache::SeqId seq, std::span<const int32_t> ids,
                                  bool all_logits, std::vector<float>* page_scores) const {
  const SeqChunk one{seq, ids};
  std::vector<std::vector<float>> scores;
  auto out = forward_batch(store, std::span<const SeqChunk>(&one, 1), all_logits, page_scores ? &scores : nullptr);
  if (page_scores) *page_scores = std::move(scores[0]);
  return out;
}

std::vector<float> Model::forward_batch(cache::KvStore& store, std::span<const SeqChunk> chunks, bool all_logits,
                                        std::vector<std::vector<float>>* page_scores) const {
  const auto& c = cfg_;
  backend::Backend& be = *backend_;
  const int H = static_cast<int>(c.hidden_size), D = static_cast<int>(c.head_dim),
            I = static_cast<int>(c.intermediate_size);
  const int Hq = static_cast<int>(c.num_attention_heads), Hkv = static_cast<int>(c.num_key_value_heads);
  const auto V = static_cast<int>(c.vocab_size);
  const auto eps = static_cast<float>(c.rms_norm_eps);
  if (chunks.empty()) throw std::invalid_argument("forward: no sequences");
  const auto& sc = store.config();
  if (sc.layers != static_cast<int>(layers_.size()) || sc.kv_heads != Hkv || sc.head_dim != D)
    throw std::invalid_argument("forward: the store's geometry does not match the model");
  // Validate everything before the store changes.
  std::vector<backend::SeqRows> seqs;
  std::vector<int32_t> ids;
  for (const auto& ch : chunks) {
    if (ch.ids.empty()) throw std::invalid_argument("forward: empty token chunk");
    for (int32_t id : ch.ids)
      if (id < 0 || id >= V) throw std::invalid_argument("forward: token id " + std::to_string(id) + " out of range");
    const auto first = static_cast<uint32_t>(store.length(ch.seq));
    if (first + ch.ids.size() > static_cast<size_t>(c.max_position_embeddings))
      throw std::invalid_argument("forward: the sequence would exceed the model's context of " +
                                  std::to_string(c.max_position_embeddings) + " tokens");
    seqs.push_back({ch.seq, static_cast<int>(ids.size()), static_cast<int>(ch.ids.size()), first});
    ids.insert(ids.end(), ch.ids.begin(), ch.ids.end());
  }
  const int n = static_cast<int>(ids.size());
  const auto rows = static_cast<size_t>(n);
  std::vector<cache::KvStore::AppendChunk> appends;
  for (const auto& ch : chunks) appends.push_back({ch.seq, ch.ids});
  // Capacity for every sequence checked first; the step rolls the append back if the pass throws.
  cache::ForwardStep step = store.begin_step(appends);
  if (page_scores) page_scores->assign(chunks.size(), {});
  be.begin_forward(step, seqs, page_scores != nullptr);
  // Ends the pass as abandoned unless it reached its read-back.
  struct PassGuard {
    backend::Backend& be;
    bool open = true;
    void complete() {
      open = false;
      be.end_forward(true);
    }
    ~PassGuard() {
      if (open) be.end_forward(false);
    }
  } pass{be};
  // q, k, v (and gate, up) back to back in one buffer each: a backend may then run the projections of a
  // one-row pass as one product (Backend::matmul_group).
  const size_t qd = rows * Hq * D, kd = rows * Hkv * D, id = rows * I;
  backend::Tensor x = be.alloc(rows * H), h = be.alloc(rows * H), qkv = be.alloc(qd + 2 * kd),
                  attn = be.alloc(rows * Hq * D), o = be.alloc(rows * H), gu = be.alloc(2 * id), a = be.alloc(id);
  backend::Tensor q = qkv.slice(0, qd), k = qkv.slice(qd, kd), v = qkv.slice(qd + kd, kd), g = gu.slice(0, id),
                  u = gu.slice(id, id);
  be.embed(embed_, H, ids, x);
  const float layer_weight = 1.0f / static_cast<float>(layers_.size());
  // The residual stream x gets each block's output o added just before the next norm reads it (one
  // fused pass on the GPU); the last block's is added before the final norm.
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DecoderLayer& L = layers_[l];
    be.add_rmsnorm(x, l ? &o : nullptr, h, rows, H, L.in_norm, eps);
    const backend::Projection qkv_proj[] = {{&L.wq, Hq * D, &q}, {&L.wk, Hkv * D, &k}, {&L.wv, Hkv * D, &v}};
    be.matmul_group(h, n, H, qkv_proj);
    arch_->encode_positions(be, L, c, q, k, seqs);
    be.attention(step, static_cast<int>(l), seqs, q, k, v, attn, Hq, page_scores, layer_weight);
    be.matmul(attn, n, Hq * D, L.wo, H, o);
    be.add_rmsnorm(x, &o, h, rows, H, L.post_norm, eps);
    const backend::Projection gate_up_proj[] = {{&L.gate, I, &g}, {&L.up, I, &u}};
    be.matmul_swiglu(h, n, H, gate_up_proj, a);
    be.matmul(a, n, I, L.down, H, o);
  }
  be.add(x, o);
  be.rmsnorm(x, rows, H, final_norm_, eps);
  const backend::Tensor& head = lm_head_.size() ? lm_head_ : embed_;
  auto finish = [&](const backend::Tensor& logits) {
    pass.complete();
    std::vector<float> out(logits.size());
    be.to_host(logits, out);
    if (page_scores) be.collect_page_scores(*page_scores);
    step.commit();
    return out;
  };
  if (all_logits) {
    backend::Tensor logits = be.alloc(rows * V);
    be.matmul(x, n, H, head, V, logits);
    return finish(logits);
  }
  // The last row of each chunk.
  std::vector<int> last_rows;
  for (const auto& s : seqs) last_rows.push_back(s.row + s.n - 1);
  const int m = static_cast<int>(last_rows.size());
  backend::Tensor last = be.alloc(static_cast<size_t>(m) * H), logits = be.alloc(static_cast<size_t>(m) * V);
  be.gather_rows(x, H, last_rows, last);
  be.matmul(last, m, H, head, V, logits);
  return finish(logits);
}

}  // namespace minimakv::engine
