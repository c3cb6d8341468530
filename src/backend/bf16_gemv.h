// Internal: the CPU backend's GEMV over BF16 weights, for the few rows of a decode step.
//
// Owns: bf16_gemv_rows, y[r][o] = sum_k x[r][k] * w[o][k] for rows r < n and outputs o in [o_begin,
// o_end), W in BF16 bits widened in registers (exactly) and multiplied in fp32, each row of W read once
// for all n rows of x (n <= kMaxGemvRows). Highway picks the widest SIMD target at run time. Callers split
// [0, out) across threads; disjoint output ranges never share a written element.
#pragma once

#include <cstddef>
#include <cstdint>

namespace minimakv::backend::detail {

inline constexpr int kMaxGemvRows = 8;

void bf16_gemv_rows(const float* x, int n, int in, const uint16_t* w, size_t o_begin, size_t o_end, int out, float* y);

}  // namespace minimakv::backend::detail
