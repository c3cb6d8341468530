// KV capacity of a memory envelope: request bytes measured on a real store agree with the page layouts
// (dense modes: every page of every layer in one format), the envelope arithmetic holds, minima holds
// at least 4.5x the requests of bf16 at 16K tokens, and byte counts with units parse. Also the prefill
// chunk a GPU run picks from its free memory.
#include <gtest/gtest.h>

#include "minimakv/codec/page_layout.h"
#include "minimakv/engine/capacity.h"
#include "minimakv/engine/generate.h"
#include "minimakv/engine/options.h"
#include "minimakv/model/config.h"

namespace minimakv::engine {
namespace {

const std::string kDir = std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m";

TEST(Capacity, DenseModesMatchThePageLayoutsAndMinimaHoldsMore) {
  const auto cfg = model::load_config(kDir);
  GenerateOptions opt;
  const size_t T = 16384 + 17, envelope = size_t{3} << 30;  // a partial last page too
  const cache::KvMode modes[] = {cache::KvMode::kBf16, cache::KvMode::kFp8, cache::KvMode::kMinima};
  const auto rows = measure_capacity(cfg, modes, T, envelope, opt);
  ASSERT_EQ(rows.size(), 3u);
  const codec::PageGeometry geo{opt.tokens_per_page, static_cast<int>(cfg.num_key_value_heads),
                                static_cast<int>(cfg.head_dim)};
  const size_t pages = (T + static_cast<size_t>(opt.tokens_per_page) - 1) / static_cast<size_t>(opt.tokens_per_page);
  const size_t layer_pages = pages * static_cast<size_t>(cfg.num_hidden_layers);
  EXPECT_EQ(rows[0].request_bytes_by_format[0], layer_pages * codec::PageLayout(codec::PageFormat::kBf16, geo).bytes());
  EXPECT_EQ(rows[1].request_bytes_by_format[1], layer_pages * codec::PageLayout(codec::PageFormat::kFp8, geo).bytes());
  for (const auto& r : rows) {
    EXPECT_TRUE(r.reconciled);
    EXPECT_GT(r.block_table_bytes, 0u);
    size_t sum = r.block_table_bytes;
    for (size_t b : r.request_bytes_by_format) sum += b;
    EXPECT_EQ(sum, r.request_bytes);
    EXPECT_LE(r.max_requests * r.request_bytes, envelope);
    EXPECT_GT((r.max_requests + 1) * r.request_bytes, envelope);
    for (size_t f = 0; f < codec::kNumPageFormats; ++f)
      EXPECT_EQ(r.pool_bytes[f], r.max_requests * r.request_bytes_by_format[f]);
  }
  // Minima: the Recent window and the sink page in FP8, every other page TQ3.
  const auto& m = rows[2];
  EXPECT_GT(m.request_bytes_by_format[1], 0u);
  EXPECT_GT(m.request_bytes_by_format[2], 10 * m.request_bytes_by_format[1]);
  EXPECT_EQ(m.request_bytes_by_format[0], 0u);
  EXPECT_GE(static_cast<double>(m.max_requests), 4.5 * static_cast<double>(rows[0].max_requests));
  EXPECT_THROW(measure_capacity(cfg, modes, 0, envelope, opt), std::invalid_argument);
}

TEST(Capacity, ByteCountsParseWithUnits) {
  EXPECT_EQ(parse_bytes("1000"), 1000u);
  EXPECT_EQ(parse_bytes("64MiB"), size_t{64} << 20);
  EXPECT_EQ(parse_bytes("40GiB"), size_t{40} << 30);
  EXPECT_EQ(parse_bytes("40gi"), size_t{40} << 30);
  EXPECT_EQ(parse_bytes("1.5GB"), size_t{1500000000});
  EXPECT_EQ(parse_bytes("2K"), 2000u);
  for (const char* bad : {"", "abc", "-5", "0", "12XB", "1e30", "nan", "inf", "5 GiB", "3Ki B"})
    EXPECT_THROW(parse_bytes(bad), std::invalid_argument) << bad;
}

}  // namespace
}  // namespace minimakv::engine

namespace minimakv {
namespace {

TEST(PrefillChunk, GpuChunksShrinkWithFreeMemoryAndStayWithinTheirRange) {
  const size_t per = 300000;  // about the 8B geometry's bytes per chunk token at 32K
  EXPECT_EQ(engine::gpu_prefill_chunk(100ull << 30, per), 4096);
  // 4096 x 300 KB needs 1.2 GB, a quarter of 4.9 GB: below that the chunk halves once, then stops.
  EXPECT_EQ(engine::gpu_prefill_chunk(4096ull * per * 4, per), 4096);
  EXPECT_EQ(engine::gpu_prefill_chunk(4096ull * per * 4 - 1, per), 2048);
  EXPECT_EQ(engine::gpu_prefill_chunk(2048ull * per * 4, per), 2048);
  EXPECT_EQ(engine::gpu_prefill_chunk(2048ull * per * 4 - 1, per), 512);
  EXPECT_EQ(engine::gpu_prefill_chunk(0, per), 512);
}

TEST(PrefillChunk, BytesPerTokenCountActivationsWorkspaceAndPagePartials) {
  model::ModelConfig cfg;
  cfg.hidden_size = 4096;
  cfg.intermediate_size = 12288;
  cfg.num_attention_heads = 32;
  cfg.num_key_value_heads = 8;
  cfg.head_dim = 128;
  const size_t dense = engine::prefill_bytes_per_token(cfg, 32768, 64, false);
  // fp32 activations and BF16 GEMM inputs: 4 (4h + 3 mlp + 2 qd + 2 kvd) + 2 (h + mlp); workspace 4 qd (2 + 2).
  EXPECT_EQ(dense, 4u * (4 * 4096 + 3 * 12288 + 2 * 4096 + 2 * 1024) + 2u * (4096 + 12288) + 4u * 4096 * 4);
  // Page scores add page_m and page_l for every page a row sees, per query head.
  EXPECT_EQ(engine::prefill_bytes_per_token(cfg, 32768, 64, true) - dense, 8u * 32 * (32768 / 64 + 1));
  EXPECT_LT(engine::prefill_bytes_per_token(cfg, 4096, 64, false), dense);
}

}  // namespace
}  // namespace minimakv
