// Highway kernels of bf16_gemv.h (compiled once per SIMD target, dispatched at run time).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/bf16_gemv.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "bf16_gemv.h"
#include "minimakv/codec/half.h"

HWY_BEFORE_NAMESPACE();
namespace minimakv::backend::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// NR rows of x against each output row of W: NR accumulators, W's row loaded and widened once per
// vector for all of them.
template <int NR>
void GemvRows(const float* x, int in, const uint16_t* w, size_t o_begin, size_t o_end, int out, float* y) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::bfloat16_t, decltype(df)> dbf;
  const size_t N = hn::Lanes(df), K = static_cast<size_t>(in);
  for (size_t o = o_begin; o < o_end; ++o) {
    const auto* wr = reinterpret_cast<const hwy::bfloat16_t*>(w + o * K);
    hn::Vec<decltype(df)> acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = hn::Zero(df);
    size_t k = 0;
    for (; k + N <= K; k += N) {
      const auto wv = hn::PromoteTo(df, hn::LoadU(dbf, wr + k));
      for (int r = 0; r < NR; ++r) acc[r] = hn::MulAdd(wv, hn::LoadU(df, x + static_cast<size_t>(r) * K + k), acc[r]);
    }
    for (int r = 0; r < NR; ++r) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r]));
      for (size_t t = k; t < K; ++t) s += codec::bf16_to_float(w[o * K + t]) * x[static_cast<size_t>(r) * K + t];
      y[static_cast<size_t>(r) * static_cast<size_t>(out) + o] = s;
    }
  }
}

void Bf16GemvRows(const float* x, int n, int in, const uint16_t* w, size_t o_begin, size_t o_end, int out, float* y) {
  switch (n) {
    case 1: return GemvRows<1>(x, in, w, o_begin, o_end, out, y);
    case 2: return GemvRows<2>(x, in, w, o_begin, o_end, out, y);
    case 3: return GemvRows<3>(x, in, w, o_begin, o_end, out, y);
    case 4: return GemvRows<4>(x, in, w, o_begin, o_end, out, y);
    case 5: return GemvRows<5>(x, in, w, o_begin, o_end, out, y);
    case 6: return GemvRows<6>(x, in, w, o_begin, o_end, out, y);
    case 7: return GemvRows<7>(x, in, w, o_begin, o_end, out, y);
    default: return GemvRows<8>(x, in, w, o_begin, o_end, out, y);
  }
}

}  // namespace minimakv::backend::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace minimakv::backend::detail {
HWY_EXPORT(Bf16GemvRows);

void bf16_gemv_rows(const float* x, int n, int in, const uint16_t* w, size_t o_begin, size_t o_end, int out,
                    float* y) {
  HWY_DYNAMIC_DISPATCH(Bf16GemvRows)(x, n, in, w, o_begin, o_end, out, y);
}
}  // namespace minimakv::backend::detail
#endif
