// The caller's buffers of one paged attention call on the GPU, decode or prefill: one type for both
// kernel families (their workspaces own everything else).
//
// Owns nothing: plain device pointers. "Rows" are the batch items of a decode step or the query rows of
// a prefill call. Invariants: q and out hold [rows][q_heads][head_dim] floats, signs the layer's rotation
// signs [kv_heads][head_dim] (+-1); the optional outputs are written only when non-null; score_acc needs
// m, l, page_m and page_l.
#pragma once

#include <cstdint>

namespace minimakv::cuda {

struct AttentionBuffers {
  const float* q = nullptr;      // [rows][q_heads][head_dim]
  const float* signs = nullptr;  // rotation signs of this layer: [kv_heads][head_dim] (+-1)
  float* out = nullptr;          // [rows][q_heads][head_dim]
  float* m = nullptr;            // optional merged max logits [rows][q_heads]
  float* l = nullptr;            // optional merged sums [rows][q_heads]
  // Optional per-page softmax partials. Decode: per plan entry, [entry][q_heads] (needs a page-granular
  // plan). Prefill: [row][page][q_head] per sequence at its stats_offset, written for every page a row's
  // position reaches (l = 0 when masked); pages past a row's position are left unwritten.
  float* page_m = nullptr;
  float* page_l = nullptr;
  // Optional (needs m, l, page_m, page_l): score_acc[offset + logical page] += score_weight * r_p, the
  // page score of eq. 7-9 as attention::page_scores computes it (renormalised over the pages each row
  // sees, averaged over query heads and rows) for each sequence, whose pages start at offset (decode:
  // the pages of the items before it; prefill: the sequence's score_offset). Computed on the device in
  // a fixed order.
  float* score_acc = nullptr;
  float score_weight = 1.0f;
  // Optional BF16 copy of out (rounded to nearest even) for the BF16 GEMM that reads it next:
  // [rows][q_heads][head_dim].
  uint16_t* out_bf16 = nullptr;
};

}  // namespace minimakv::cuda
