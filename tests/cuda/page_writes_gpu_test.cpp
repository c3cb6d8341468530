// Pages written on the GPU (append, FP8 -> TQ3 conversion, TQ3 -> FP8 promotion) equal, byte for byte,
// the pages the CPU codec writes from the same input, on fresh random data with outliers, zero vectors
// and non-finite values, for every head_dim, partial pages and several layers' rotations. A page
// written on the CPU survives the upload/download round trip unchanged.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "minimakv/codec/page_codec.h"
#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/page_writes.h"
#include "test_util.h"

namespace minimakv {
namespace {

using codec::PageFormat;

std::vector<float> random_rows(std::mt19937_64& rng, size_t n) {
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = t(rng);
  return x;
}

// A host FP8 page with `tokens` random tokens, some vectors zero, some with an outlier or a NaN/inf.
std::vector<uint8_t> random_fp8_page(std::mt19937_64& rng, const codec::PageLayout& L, int tokens) {
  const auto& g = L.geometry();
  std::vector<uint8_t> page(L.bytes(), 0);
  const size_t n = static_cast<size_t>(g.kv_heads) * g.head_dim;
  for (int t = 0; t < tokens; ++t) {
    auto k = random_rows(rng, n), v = random_rows(rng, n);
    if (t % 7 == 3) std::fill(k.begin(), k.begin() + g.head_dim, 0.0f);
    if (t % 11 == 5) k[1] *= 300.0f;
    if (t % 13 == 6) v[2] = std::numeric_limits<float>::quiet_NaN();
    if (t % 17 == 8) v[3] = std::numeric_limits<float>::infinity();
    // Finite but huge: the rotated vector's sum of squares overflows fp32 (the encoder's 2^-64 path).
    if (t % 19 == 9)
      for (int i = 0; i < g.head_dim; ++i) k[g.head_dim + i] *= 1e30f;
    codec::write_token(page, L, t, k, v);
  }
  return page;
}

std::vector<codec::Rotation> rotations_for(int layer, const codec::PageGeometry& g) {
  std::vector<codec::Rotation> r;
  for (int h = 0; h < g.kv_heads; ++h)
    r.push_back(codec::Rotation::for_head(g.head_dim, static_cast<uint32_t>(layer), static_cast<uint32_t>(h)));
  return r;
}

TEST(GpuPageWrites, UploadDownloadRoundTripsEveryFormat) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const codec::PageGeometry g{32, 3, 128};
  cuda::DevicePagePool pool(g, 4);
  const auto& L = pool.layout(PageFormat::kFp8);
  const auto page = random_fp8_page(rng, L, 29);
  pool.upload(PageFormat::kFp8, 2, page);
  std::vector<uint8_t> back(L.bytes());
  testing::poison(std::span<uint8_t>(back));
  pool.download(PageFormat::kFp8, 2, back);
  EXPECT_EQ(back, page);
  EXPECT_THROW(pool.upload(PageFormat::kFp8, 0, page), std::invalid_argument);  // the null page
  EXPECT_THROW(pool.upload(PageFormat::kFp8, 4, page), std::invalid_argument);  // past capacity
  EXPECT_THROW(pool.upload(PageFormat::kTq3, 1, page), std::invalid_argument);  // wrong size
}

TEST(GpuPageWrites, AppendEqualsCpuWriteTokenForFp8AndBf16) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int d : {64, 128, 256}) {
    const codec::PageGeometry g{16, 2, d};
    const int pages = 5, n = 37;
    cuda::DevicePagePool pool(g, pages + 1);
    // n distinct random (page, slot) destinations.
    std::vector<cuda::AppendSlot> slots;
    for (uint32_t p = 1; p <= pages; ++p)
      for (uint32_t t = 0; t < 16; ++t) slots.push_back({p, t});
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(n);
    const size_t row = static_cast<size_t>(g.kv_heads) * d;
    auto k = random_rows(rng, n * row), v = random_rows(rng, n * row);
    k[5] = std::numeric_limits<float>::quiet_NaN();
    std::fill(v.begin() + row, v.begin() + row + d, 0.0f);
    cuda::DeviceArray<float> dk(k.size()), dv(v.size());
    cuda::DeviceArray<cuda::AppendSlot> ds(slots.size());
    cuda::check(cudaMemcpy(dk.get(), k.data(), dk.bytes(), cudaMemcpyHostToDevice), "k");
    cuda::check(cudaMemcpy(dv.get(), v.data(), dv.bytes(), cudaMemcpyHostToDevice), "v");
    cuda::check(cudaMemcpy(ds.get(), slots.data(), ds.bytes(), cudaMemcpyHostToDevice), "slots");
    for (PageFormat f : {PageFormat::kFp8, PageFormat::kBf16}) {
      const auto& L = pool.layout(f);
      cuda::append_tokens(pool.views(), f, g, dk.get(), dv.get(), ds.get(), n, nullptr);
      cuda::check(cudaDeviceSynchronize(), "append");
      std::vector<std::vector<uint8_t>> host(pages + 1, std::vector<uint8_t>(L.bytes(), 0));
      for (int i = 0; i < n; ++i)
        codec::write_token(host[slots[i].page_id], L, static_cast<int>(slots[i].token), {k.data() + i * row, row},
                           {v.data() + i * row, row});
      for (uint32_t p = 1; p <= pages; ++p) {
        std::vector<uint8_t> got(L.bytes());
        pool.download(f, p, got);
        EXPECT_EQ(got, host[p]) << codec::to_string(f) << " d=" << d << " page " << p;
      }
    }
    EXPECT_THROW(cuda::append_tokens(pool.views(), PageFormat::kTq3, g, dk.get(), dv.get(), ds.get(), n, nullptr),
                 std::invalid_argument);
  }
}

// Both rotated formats: TQ3 through the fused kernels, TQ4 through the per-vector ones.
TEST(GpuPageWrites, BatchedConversionsEqualCpuCodecByteForByte) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (const PageFormat rf : {PageFormat::kTq3, PageFormat::kTq4})
    for (int d : {64, 128, 256}) {
      for (int B : {16, 37, 832}) {  // 37: rows and metadata end inside a 16-byte block (padding)
        const codec::PageGeometry g{B, 2, d};
        const int layers = 3, jobs_n = 6;
        cuda::DevicePagePool pool(g, jobs_n + 1);
        const auto& FL = pool.layout(PageFormat::kFp8);
        const auto& TL = pool.layout(rf);
        const char* name = codec::to_string(rf);
        const auto signs = cuda::upload_rotation_signs(layers, g.kv_heads, d, codec::kDefaultRotationSeed);
        std::vector<cuda::ConvertJob> jobs;
        std::vector<std::vector<uint8_t>> fp8_pages;
        for (int j = 0; j < jobs_n; ++j) {
          const int tokens = j == 0 ? B : 1 + static_cast<int>(rng() % B);
          fp8_pages.push_back(random_fp8_page(rng, FL, tokens));
          pool.upload(PageFormat::kFp8, static_cast<uint32_t>(j + 1), fp8_pages.back());
          // Destination ids permuted, so a job never writes "its own" slot by accident.
          jobs.push_back({static_cast<uint32_t>(j + 1), static_cast<uint32_t>(jobs_n - j),
                          static_cast<uint32_t>(tokens), static_cast<uint32_t>(j % layers)});
        }
        cuda::DeviceArray<cuda::ConvertJob> dj(jobs.size());
        cuda::check(cudaMemcpy(dj.get(), jobs.data(), dj.bytes(), cudaMemcpyHostToDevice), "jobs");
        for (const codec::Tq3Policy pol :
             {codec::Tq3Policy{}, codec::Tq3Policy{codec::NormCorrection::kPreserveNorm, codec::NormCorrection::kNone},
              codec::Tq3Policy{codec::NormCorrection::kMinMse, codec::NormCorrection::kUnbiased}}) {
          // Poison the destinations: the kernel must write every byte.
          for (int j = 1; j <= jobs_n; ++j) cuda::check(cudaMemset(pool.page(rf, j), 0xa5, TL.bytes()), "poison");
          if (rf == PageFormat::kTq3)
            cuda::convert_fp8_to_tq3(pool.views(), g, signs.get(), dj.get(), jobs_n, pol, nullptr);
          else
            cuda::convert_fp8_to_tq4(pool.views(), g, signs.get(), dj.get(), jobs_n, pol, nullptr);
          cuda::check(cudaDeviceSynchronize(), "convert");
          for (const auto& job : jobs) {
            std::vector<uint8_t> want(TL.bytes()), got(TL.bytes());
            codec::convert_fp8_to_rotated(fp8_pages[job.src_page - 1], FL, want, TL, rotations_for(job.layer, g),
                                          static_cast<int>(job.tokens), pol);
            pool.download(rf, job.dst_page, got);
            EXPECT_EQ(got, want) << "fp8->" << name << " d=" << d << " B=" << B << " job " << job.src_page;
          }
        }
        // Promotion back: the rotated pages (just checked equal to the CPU's) -> FP8 pages.
        std::vector<cuda::ConvertJob> back;
        for (const auto& job : jobs) back.push_back({job.dst_page, job.src_page, job.tokens, job.layer});
        cuda::check(cudaMemcpy(dj.get(), back.data(), dj.bytes(), cudaMemcpyHostToDevice), "jobs");
        for (int j = 1; j <= jobs_n; ++j)
          cuda::check(cudaMemset(pool.page(PageFormat::kFp8, j), 0xa5, FL.bytes()), "poison");
        if (rf == PageFormat::kTq3)
          cuda::convert_tq3_to_fp8(pool.views(), g, signs.get(), dj.get(), jobs_n, nullptr);
        else
          cuda::convert_tq4_to_fp8(pool.views(), g, signs.get(), dj.get(), jobs_n, nullptr);
        cuda::check(cudaDeviceSynchronize(), "promote");
        for (const auto& job : back) {
          std::vector<uint8_t> tq(TL.bytes()), want(FL.bytes()), got(FL.bytes());
          pool.download(rf, job.src_page, tq);
          codec::convert_rotated_to_fp8(tq, TL, want, FL, rotations_for(job.layer, g), static_cast<int>(job.tokens));
          pool.download(PageFormat::kFp8, job.dst_page, got);
          EXPECT_EQ(got, want) << name << "->fp8 d=" << d << " B=" << B << " job " << job.src_page;
        }
      }
    }
}

// The fused conversion kernels (FP8 -> TQ3, then the promotion back) against the former per-vector
// kernels on many large pages written on the device (more vectors than the CPU codec checks quickly): every byte of the
// TQ3 pool equal, for every head_dim, full and partial pages, several layers, and destinations poisoned differently
// before each.
TEST(GpuPageWrites, FusedConversionsEqualPerVectorKernelsOnLargePages) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int d : {64, 128, 256}) {
    const codec::PageGeometry g{d == 256 ? 1792 : 256, d == 64 ? 8 : 4, d};
    const int jobs_n = d == 256 ? 8 : 24, layers = 4;
    cuda::DevicePagePool pool(g, jobs_n + 1);
    const auto views = pool.views();
    // Random FP8 pages through the append kernel (checked against the CPU codec above).
    const size_t vec = static_cast<size_t>(g.kv_heads) * d, n_tok = static_cast<size_t>(jobs_n) * g.tokens_per_page;
    auto k = random_rows(rng, n_tok * vec), v = random_rows(rng, n_tok * vec);
    for (size_t t = 0; t < n_tok; t += 97) k[t * vec + rng() % vec] *= 1e4f;  // outliers
    std::vector<cuda::AppendSlot> slots;
    for (int j = 0; j < jobs_n; ++j)
      for (int t = 0; t < g.tokens_per_page; ++t)
        slots.push_back({static_cast<uint32_t>(j + 1), static_cast<uint32_t>(t)});
    cuda::DeviceArray<float> dk(k.size()), dv(v.size());
    cuda::DeviceArray<cuda::AppendSlot> ds(slots.size());
    cuda::check(cudaMemcpy(dk.get(), k.data(), dk.bytes(), cudaMemcpyHostToDevice), "k");
    cuda::check(cudaMemcpy(dv.get(), v.data(), dv.bytes(), cudaMemcpyHostToDevice), "v");
    cuda::check(cudaMemcpy(ds.get(), slots.data(), ds.bytes(), cudaMemcpyHostToDevice), "slots");
    cuda::append_tokens(views, PageFormat::kFp8, g, dk.get(), dv.get(), ds.get(), static_cast<int>(n_tok), nullptr);
    std::vector<cuda::ConvertJob> jobs;
    for (int j = 0; j < jobs_n; ++j) {
      const int tokens = j % 3 == 0 ? g.tokens_per_page : 1 + static_cast<int>(rng() % g.tokens_per_page);
      jobs.push_back({static_cast<uint32_t>(j + 1), static_cast<uint32_t>(jobs_n - j), static_cast<uint32_t>(tokens),
                      static_cast<uint32_t>(rng() % layers)});
    }
    cuda::DeviceArray<cuda::ConvertJob> dj(jobs.size());
    cuda::check(cudaMemcpy(dj.get(), jobs.data(), dj.bytes(), cudaMemcpyHostToDevice), "jobs");
    const auto signs = cuda::upload_rotation_signs(layers, g.kv_heads, d, codec::kDefaultRotationSeed);
    // Both kernels write pool `f`, poisoned differently before each; page 0 is no job's destination, so
    // the per-vector kernel's copy of it is put back before the fused run and only job pages can differ.
    const auto compare = [&](PageFormat f, const char* what, auto per_vector, auto fused) {
      const size_t page_bytes = pool.layout(f).bytes(), pool_bytes = (jobs_n + 1) * page_bytes;
      uint8_t* base = views.base[static_cast<int>(f)];
      std::vector<uint8_t> want(pool_bytes), got(pool_bytes);
      cuda::check(cudaMemset(base, 0x5a, pool_bytes), "poison");
      per_vector();
      cuda::check(cudaMemcpy(want.data(), base, pool_bytes, cudaMemcpyDeviceToHost), "want");
      cuda::check(cudaMemset(base, 0xa5, pool_bytes), "poison");
      cuda::check(cudaMemcpy(base, want.data(), page_bytes, cudaMemcpyHostToDevice), "null page");
      fused();
      cuda::check(cudaMemcpy(got.data(), base, pool_bytes, cudaMemcpyDeviceToHost), "got");
      size_t differ = 0, first = pool_bytes;
      for (size_t i = 0; i < pool_bytes; ++i)
        if (got[i] != want[i]) {
          ++differ;
          first = std::min(first, i);
        }
      EXPECT_EQ(differ, 0u) << what << " d=" << d << ": " << differ << " bytes differ, the first at " << first;
    };
    compare(
        PageFormat::kTq3, "fp8->tq3",
        [&] { cuda::convert_fp8_to_tq3_per_vector(views, g, signs.get(), dj.get(), jobs_n, {}, nullptr); },
        [&] { cuda::convert_fp8_to_tq3(views, g, signs.get(), dj.get(), jobs_n, {}, nullptr); });

    // Promotion of those TQ3 pages back into the FP8 pool, by both kernels.
    std::vector<cuda::ConvertJob> back;
    for (const auto& j : jobs) back.push_back({j.dst_page, j.src_page, j.tokens, j.layer});
    cuda::check(cudaMemcpy(dj.get(), back.data(), dj.bytes(), cudaMemcpyHostToDevice), "jobs");
    compare(
        PageFormat::kFp8, "tq3->fp8",
        [&] { cuda::convert_tq3_to_fp8_per_vector(views, g, signs.get(), dj.get(), jobs_n, nullptr); },
        [&] { cuda::convert_tq3_to_fp8(views, g, signs.get(), dj.get(), jobs_n, nullptr); });
  }
}

}  // namespace
}  // namespace minimakv
