// KV capacity of a memory envelope: request bytes measured on a real store agree with the page layouts
// (dense modes: every page of every layer in one format), the envelope arithmetic holds, minima holds
// at least 4.5x the requests of bf16 at 16K tokens, and byte counts with units parse.
#include <gtest/gtest.h>

#include "minimakv/codec/page_layout.h"
#include "minimakv/engine/capacity.h"
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
    for (size_t f = 0; f < codec::kNumPageFormats; ++f) EXPECT_EQ(r.pool_bytes[f], r.max_requests * r.request_bytes_by_format[f]);
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
