// LlamaForCausalLM: rotate-half RoPE on q and k (with Llama 3's frequency scaling when config.json asks
// for it; the backend's rope reads it from the config).
#include "architectures.h"

namespace minimakv::engine::arch {

namespace {

class Llama final : public Architecture {
 public:
  const char* name() const override { return "LlamaForCausalLM"; }
  DecoderLayer load_layer(WeightReader& w, const model::ModelConfig& c, int64_t layer) const override {
    return load_llama_style_layer(w, c, layer);
  }
  void encode_positions(backend::Backend& be, const DecoderLayer&, const model::ModelConfig& c, backend::Tensor& q,
                        backend::Tensor& k, std::span<const backend::SeqRows> seqs) const override {
    be.rope(q, static_cast<int>(c.num_attention_heads), seqs);
    be.rope(k, static_cast<int>(c.num_key_value_heads), seqs);
  }
};

}  // namespace

const Architecture& llama() {
  static const Llama a;
  return a;
}

}  // namespace minimakv::engine::arch
