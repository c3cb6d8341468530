// Microbenchmarks of the codecs, one (token, head) vector per iteration.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/page_codec.h"
#include "minimakv/codec/rotation.h"
#include "minimakv/codec/tq3.h"

namespace {
using namespace minimakv::codec;

std::vector<float> gaussian(size_t n) {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> g;
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

void BM_Fp8Encode(benchmark::State& st) {
  const int d = static_cast<int>(st.range(0));
  auto x = gaussian(d);
  std::vector<uint8_t> c(d);
  for (auto _ : st) benchmark::DoNotOptimize(fp8_encode_vector(x, c));
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * d * 4);
}
BENCHMARK(BM_Fp8Encode)->Arg(64)->Arg(128)->Arg(256);

void BM_Fp8Decode(benchmark::State& st) {
  const int d = static_cast<int>(st.range(0));
  auto x = gaussian(d);
  std::vector<uint8_t> c(d);
  std::vector<float> y(d);
  const float s = fp8_encode_vector(x, c);
  for (auto _ : st) {
    fp8_decode_vector(c, s, y);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * d * 4);
}
BENCHMARK(BM_Fp8Decode)->Arg(64)->Arg(128)->Arg(256);

void BM_RotationForward(benchmark::State& st) {
  const int d = static_cast<int>(st.range(0));
  auto x = gaussian(d);
  const Rotation r(d, 1);
  for (auto _ : st) {
    r.forward(x);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * d * 4);
}
BENCHMARK(BM_RotationForward)->Arg(64)->Arg(128)->Arg(256);

void BM_Tq3Encode(benchmark::State& st) {
  const int d = static_cast<int>(st.range(0));
  auto x = gaussian(d);
  std::vector<float> scratch(d);
  std::vector<uint8_t> p(tq3_packed_bytes(d));
  const Rotation r(d, 1);
  for (auto _ : st) benchmark::DoNotOptimize(tq3_encode(x, r, scratch, p, NormCorrection::kUnbiased));
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * d * 4);
}
BENCHMARK(BM_Tq3Encode)->Arg(64)->Arg(128)->Arg(256);

void BM_Tq3DotRotated(benchmark::State& st) {
  const int d = static_cast<int>(st.range(0));
  auto x = gaussian(d);
  auto q = gaussian(d);
  std::vector<uint8_t> p(tq3_packed_bytes(d));
  const uint16_t a = tq3_encode_rotated(x, p, NormCorrection::kUnbiased);
  for (auto _ : st) benchmark::DoNotOptimize(tq3_dot_rotated(q, p, a));
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(p.size() + 2));
}
BENCHMARK(BM_Tq3DotRotated)->Arg(64)->Arg(128)->Arg(256);

void BM_ConvertPageFp8ToTq3(benchmark::State& st) {
  const int B = static_cast<int>(st.range(0)), H = 8, d = 128;
  const PageLayout f8(PageFormat::kFp8, {B, H, d}), t3(PageFormat::kTq3, {B, H, d});
  std::vector<uint8_t> src(f8.bytes()), dst(t3.bytes());
  auto k = gaussian(static_cast<size_t>(H) * d);
  for (int t = 0; t < B; ++t) write_token(src, f8, t, k, k);
  std::vector<Rotation> rots;
  for (int h = 0; h < H; ++h) rots.emplace_back(d, static_cast<uint64_t>(h));
  for (auto _ : st) {
    convert_fp8_to_tq3(src, f8, dst, t3, rots, B);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(src.size()));
}
BENCHMARK(BM_ConvertPageFp8ToTq3)->Arg(16)->Arg(256);

}  // namespace
