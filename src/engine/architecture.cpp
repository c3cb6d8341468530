#include "minimakv/engine/architecture.h"

#include <stdexcept>

#include "arch/architectures.h"

namespace minimakv::engine {

const Architecture& architecture_for(const model::ModelConfig& c) {
  std::string known;
  for (const Architecture* a : arch::all()) {
    if (c.architecture == a->name()) return *a;
    known += (known.empty() ? "" : ", ") + std::string(a->name());
  }
  throw std::invalid_argument("the engine has no architecture '" + c.architecture + "' (it runs " + known + ")");
}

DecoderLayer load_llama_style_layer(WeightReader& w, const model::ModelConfig& c, int64_t layer) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t QD = c.num_attention_heads * D, KD = c.num_key_value_heads * D;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  DecoderLayer L;
  L.wq = w.matrix(p + "self_attn.q_proj.weight", {QD, H});
  L.wk = w.matrix(p + "self_attn.k_proj.weight", {KD, H});
  L.wv = w.matrix(p + "self_attn.v_proj.weight", {KD, H});
  L.wo = w.matrix(p + "self_attn.o_proj.weight", {H, QD});
  L.in_norm = w.vector(p + "input_layernorm.weight", {H});
  L.post_norm = w.vector(p + "post_attention_layernorm.weight", {H});
  L.gate = w.matrix(p + "mlp.gate_proj.weight", {I, H});
  L.up = w.matrix(p + "mlp.up_proj.weight", {I, H});
  L.down = w.matrix(p + "mlp.down_proj.weight", {H, I});
  return L;
}

}  // namespace minimakv::engine
