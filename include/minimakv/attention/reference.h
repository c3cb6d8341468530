// fp64 reference attention over dequantized pages, and the dense reference page-score collector.
//
// Owns: the independent computation every attention kernel is tested against. Each page row is decoded
// with the codec's own decoders into the original domain (TQ3 rows are un-rotated), then logits, the
// softmax and the output are computed in double precision over the concatenated visible tokens.
#pragma once

#include <span>
#include <vector>

#include "minimakv/attention/paged_attention.h"

namespace minimakv::attention {

struct ReferenceResult {
  std::vector<double> out;        // [n][q_heads][d]
  std::vector<double> page_mass;  // [n][page][q_head]: softmax mass of each page (sums to 1 per head)
};

ReferenceResult attend_reference(const LayerInput& in, const QueryBlock& qb);

// Reference over raw (unquantized) K/V: k, v as [tokens][kv_heads][d], all tokens visible to a query at
// position first_position + i being those with index <= that position.
std::vector<double> attend_dense_reference(std::span<const float> k, std::span<const float> v, int tokens, int kv_heads,
                                           int q_heads, int d, const QueryBlock& qb);

}  // namespace minimakv::attention
