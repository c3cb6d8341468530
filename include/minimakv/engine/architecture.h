// One decoder architecture: which tensors a layer has (names and shapes in the checkpoint) and what
// the layer does to q and k between their projections and attention. Everything else of the forward
// pass (norms, projections, attention through the paged store, the SwiGLU MLP, the LM head) is shared
// and lives in engine/model.cpp.
//
// Owns: the architectures this engine runs (src/engine/arch/<name>.cpp, one file each, built on the
// shared loaders below) and their lookup by config.json's "architectures"[0]. Adding one is
// docs/adding-an-architecture.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "minimakv/backend/backend.h"
#include "minimakv/model/config.h"

namespace minimakv::engine {

// The weights of one decoder layer; tensors an architecture does not use stay empty. Where the backend
// fuses weights (Backend::fuse_weights), wq, wk, wv are slices of qkv_storage and gate, up of
// gate_up_storage, which own them.
struct DecoderLayer {
  backend::Tensor wq, wk, wv, wo, q_norm, k_norm, in_norm, post_norm, gate, up, down;
  backend::Tensor qkv_storage, gate_up_storage;
};

// Where weights come from (a checkpoint, or dummy weights drawn on the device): a matrix in the
// model's weight dtype, or a norm weight in fp32.
class WeightReader {
 public:
  virtual ~WeightReader() = default;
  virtual backend::Tensor matrix(const std::string& name, std::vector<int64_t> shape) = 0;
  virtual backend::Tensor vector(const std::string& name, std::vector<int64_t> shape) = 0;
};

class Architecture {
 public:
  virtual ~Architecture() = default;
  virtual const char* name() const = 0;  // as config.json's "architectures" names it
  virtual DecoderLayer load_layer(WeightReader& w, const model::ModelConfig& c, int64_t layer) const = 0;
  // q ([rows][Hq][D]) and k ([rows][Hkv][D]) after their projections, before attention.
  virtual void encode_positions(backend::Backend& be, const DecoderLayer& layer, const model::ModelConfig& c,
                                backend::Tensor& q, backend::Tensor& k,
                                std::span<const backend::SeqRows> seqs) const = 0;
};

// The architecture config.json names; std::invalid_argument (listing the supported ones) otherwise.
const Architecture& architecture_for(const model::ModelConfig& c);

// Shared loaders: the attention projections, the two RMSNorms and the SwiGLU MLP under the names
// transformers' Llama-style decoders use ("model.layers.N.self_attn.q_proj.weight", ...).
DecoderLayer load_llama_style_layer(WeightReader& w, const model::ModelConfig& c, int64_t layer);

}  // namespace minimakv::engine
