// Qwen3ForCausalLM: the Llama-style layer plus an RMSNorm on every q and k head (QK-norm) before RoPE,
// fused with it on the backend.
#include "architectures.h"

namespace minimakv::engine::arch {

namespace {

class Qwen3 final : public Architecture {
 public:
  const char* name() const override { return "Qwen3ForCausalLM"; }
  DecoderLayer load_layer(WeightReader& w, const model::ModelConfig& c, int64_t layer) const override {
    DecoderLayer L = load_llama_style_layer(w, c, layer);
    const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
    L.q_norm = w.vector(p + "q_norm.weight", {c.head_dim});
    L.k_norm = w.vector(p + "k_norm.weight", {c.head_dim});
    return L;
  }
  void encode_positions(backend::Backend& be, const DecoderLayer& L, const model::ModelConfig& c, backend::Tensor& q,
                        backend::Tensor& k, std::span<const backend::SeqRows> seqs) const override {
    const auto eps = static_cast<float>(c.rms_norm_eps);
    const int D = static_cast<int>(c.head_dim);
    be.norm_rope_qk(q, static_cast<int>(c.num_attention_heads), L.q_norm, k, static_cast<int>(c.num_key_value_heads),
                    L.k_norm, D, eps, seqs);
  }
};

}  // namespace

const Architecture& qwen3() {
  static const Qwen3 a;
  return a;
}

}  // namespace minimakv::engine::arch
