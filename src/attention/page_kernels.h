// Internal: SIMD inner loops of paged attention (page_kernels.cpp), dispatched to the best target the
// CPU supports. Rows of one KV head are contiguous: row t starts at codes + t * row_bytes; per-row
// metadata (FP8 fp32 scale, TQ3 fp16 alpha; none for BF16) is contiguous at meta.
#pragma once

#include <cstddef>
#include <cstdint>

#include "minimakv/codec/page_layout.h"

namespace minimakv::attention::detail {

// s[g * nt + t] = scale_t * <q_g, row_t> for the G query heads of the group (q_g = q + g * q_stride).
void page_logits(codec::PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt,
                 const float* q, size_t q_stride, int G, int d, float* s);
// acc_g += sum_t w[g * nt + t] * scale_t * row_t.
void page_accumulate(codec::PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt,
                     const float* w, int G, int d, float* acc, size_t acc_stride);

// x[i] <- exp(x[i] - sub) * mul; returns the sum of exp(x[i] - sub) (vectorised exp).
float exp_sub_sum(float* x, size_t n, float sub, float mul);
// The largest of x[0 .. n) for n >= 1; NaN when any is NaN.
float max_of(const float* x, size_t n);

}  // namespace minimakv::attention::detail
