// Every operator of the CUDA backend against the CPU backend (the reference) over a grid of shapes, on
// fresh random inputs, outputs poisoned before each call. Per-operator tolerances: data movement
// (embed, copy, gather_rows, add) is exact; fp32 arithmetic in another order (rmsnorm, rope, swiglu,
// the fused operators) within a few ulps; GEMMs against fp64 (BF16 weights: of the BF16-rounded inputs).
// The fused kernels must also equal the CUDA kernels they replace bit for bit, and the BF16 copy a
// fused norm writes for the next GEMM must equal a fresh conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "minimakv/backend/backend.h"
#include "minimakv/codec/half.h"
#include "test_util.h"

namespace minimakv::backend {
namespace {

model::ModelConfig config(int head_dim) {
  model::ModelConfig c;
  c.hidden_size = 512;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = head_dim;
  c.rope_theta = 1e6;
  c.max_position_embeddings = 1 << 16;
  return c;
}

struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
  explicit Pair(int head_dim) : cpu(make_cpu_backend(config(head_dim))), gpu(make_cuda_backend(config(head_dim))) {}
};

std::vector<float> randn(std::mt19937_64& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

std::vector<float> down(Backend& be, const Tensor& t) {
  std::vector<float> out(t.size());
  be.to_host(t, out);
  return out;
}

// A device tensor filled with NaN, so that an element the kernel fails to write is caught.
Tensor poisoned(Backend& be, size_t n) {
  std::vector<float> p(n);
  testing::poison(p);
  return be.upload(p);
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * (1.0 + std::abs(want[i]))) << what << " at " << i;
}

TEST(BackendOps, MovementIsExact) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  Pair b(64);
  for (int dim : {1, 64, 1000}) {
    const int vocab = 50, rows = 7;
    const auto table = randn(rng, static_cast<size_t>(vocab) * dim);
    std::vector<int32_t> ids(rows);
    for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
    std::vector<float> got[2];
    for (int d = 0; d < 2; ++d) {
      Backend& be = d ? *b.gpu : *b.cpu;
      const Tensor t = be.upload(table);
      Tensor out = poisoned(be, static_cast<size_t>(rows) * dim);
      be.embed(t, dim, ids, out);
      got[d] = down(be, out);
    }
    EXPECT_EQ(got[0], got[1]) << "embed dim " << dim;
    // BF16 table: the widened BF16 values, on both backends.
    std::vector<uint16_t> bits(table.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = codec::float_to_bf16(table[i]);
    for (int d = 0; d < 2; ++d) {
      Backend& be = d ? *b.gpu : *b.cpu;
      const Tensor t = be.upload_bf16(bits, DType::kBF16);
      Tensor out = poisoned(be, static_cast<size_t>(rows) * dim);
      be.embed(t, dim, ids, out);
      got[d] = down(be, out);
    }
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < dim; ++i)
        ASSERT_EQ(got[1][static_cast<size_t>(r) * dim + i],
                  codec::bf16_to_float(bits[static_cast<size_t>(ids[static_cast<size_t>(r)]) * dim + i]));
    EXPECT_EQ(got[0], got[1]) << "bf16 embed dim " << dim;
    // add, copy, gather_rows
    const auto x = randn(rng, static_cast<size_t>(rows) * dim), y = randn(rng, x.size());
    std::vector<int> pick{6, 0, 3};
    for (int d = 0; d < 2; ++d) {
      Backend& be = d ? *b.gpu : *b.cpu;
      Tensor tx = be.upload(x), ty = be.upload(y), tc = poisoned(be, x.size()),
             tg = poisoned(be, pick.size() * static_cast<size_t>(dim));
      be.add(tx, ty);
      be.copy(tx, tc);
      be.gather_rows(tc, dim, pick, tg);
      got[d] = down(be, tg);
    }
    EXPECT_EQ(got[0], got[1]) << "add/copy/gather dim " << dim;
  }
}

TEST(BackendOps, NormsRopeSwigluAndTheirFusionsMatch) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int head_dim : {64, 128, 256}) {
    Pair b(head_dim);
    for (int rows : {1, 5, 64}) {
      const int heads = 4, dim = heads * head_dim;
      std::vector<SeqRows> seqs{{1, 0, rows / 2, static_cast<uint32_t>(rng() % 5000)},
                                {2, rows / 2, rows - rows / 2, static_cast<uint32_t>(rng() % 30000)}};
      if (rows / 2 == 0) seqs.erase(seqs.begin()), seqs[0].row = 0;
      const auto x = randn(rng, static_cast<size_t>(rows) * dim, 3.0f), y = randn(rng, x.size());
      const auto w = randn(rng, static_cast<size_t>(dim)), wh = randn(rng, static_cast<size_t>(head_dim));
      std::vector<float> out[2][5];
      for (int d = 0; d < 2; ++d) {
        Backend& be = d ? *b.gpu : *b.cpu;
        const Tensor tw = be.upload(w), twh = be.upload(wh);
        // add_rmsnorm against add + copy + rmsnorm on the same backend
        Tensor x1 = be.upload(x), y1 = be.upload(y), h1 = poisoned(be, x.size());
        be.add_rmsnorm(x1, &y1, h1, static_cast<size_t>(rows), dim, tw, 1e-6f);
        Tensor x2 = be.upload(x), y2 = be.upload(y), h2 = poisoned(be, x.size());
        be.add(x2, y2);
        be.copy(x2, h2);
        be.rmsnorm(h2, static_cast<size_t>(rows), dim, tw, 1e-6f);
        out[d][0] = down(be, h1);
        EXPECT_EQ(out[d][0], down(be, h2)) << "add_rmsnorm is not add + copy + rmsnorm on " << be.describe();
        EXPECT_EQ(down(be, x1), down(be, x2));
        // norm_rope against rmsnorm (per head) + rope
        Tensor q1 = be.upload(x), q2 = be.upload(x);
        be.norm_rope(q1, heads, head_dim, twh, 1e-6f, seqs);
        be.rmsnorm(q2, static_cast<size_t>(rows) * heads, head_dim, twh, 1e-6f);
        be.rope(q2, heads, seqs);
        out[d][1] = down(be, q1);
        EXPECT_EQ(out[d][1], down(be, q2)) << "norm_rope is not rmsnorm + rope on " << be.describe();
        // norm_rope_qk against norm_rope of q, then of k (fewer heads, another weight)
        const auto k = randn(rng, static_cast<size_t>(rows) * head_dim * 2, 3.0f);
        const auto wk = randn(rng, static_cast<size_t>(head_dim));
        const Tensor twk = be.upload(wk);
        Tensor q3 = be.upload(x), k3 = be.upload(k), k4 = be.upload(k);
        be.norm_rope_qk(q3, heads, twh, k3, 2, twk, head_dim, 1e-6f, seqs);
        be.norm_rope(k4, 2, head_dim, twk, 1e-6f, seqs);
        EXPECT_EQ(down(be, q3), out[d][1]) << "norm_rope_qk's q on " << be.describe();
        EXPECT_EQ(down(be, k3), down(be, k4)) << "norm_rope_qk's k on " << be.describe();
        // swiglu
        Tensor g = be.upload(x), u = be.upload(y), a = poisoned(be, x.size());
        be.swiglu(g, u, a);
        out[d][2] = down(be, a);
      }
      const std::string shape = "head_dim " + std::to_string(head_dim) + " rows " + std::to_string(rows);
      // Sums of squares in another order (a tree on the GPU), FMA contraction and expf differ by ulps.
      expect_close(out[1][0], out[0][0], 1e-5, "add_rmsnorm " + shape);
      expect_close(out[1][1], out[0][1], 1e-5, "norm_rope " + shape);
      expect_close(out[1][2], out[0][2], 1e-5, "swiglu " + shape);
    }
  }
}

// GEMMs against fp64: fp32 weights (SGEMM), BF16 weights (tensor cores on the GPU, the activation
// rounded to BF16; widened blocks on the CPU, the activation exact).
TEST(BackendOps, GemmsMatchFp64) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  Pair b(64);
  // One row with in % 8 == 0 takes the backend's own BF16 GEMV (tails of out not a multiple of its 4 rows
  // a block included); in % 8 != 0 and more rows take cuBLAS.
  for (auto [n, in, out] : {std::tuple{1, 64, 48}, {1, 4096, 1026}, {1, 1032, 7}, {1, 60, 33}, {3, 512, 1000},
                            {8, 4096, 1026}, {17, 1024, 96}, {130, 256, 4100}}) {
    const auto x = randn(rng, static_cast<size_t>(n) * in), w = randn(rng, static_cast<size_t>(out) * in, 0.05f);
    std::vector<uint16_t> wb(w.size());
    for (size_t i = 0; i < w.size(); ++i) wb[i] = codec::float_to_bf16(w[i]);
    for (int d = 0; d < 2; ++d) {
      Backend& be = d ? *b.gpu : *b.cpu;
      for (bool bf16 : {false, true}) {
        const Tensor tx = be.upload(x), tw = bf16 ? be.upload_bf16(wb, DType::kBF16) : be.upload(w);
        Tensor ty = poisoned(be, static_cast<size_t>(n) * out);
        be.matmul(tx, n, in, tw, out, ty);
        const auto y = down(be, ty);
        const bool round_x = bf16 && d == 1;
        for (int r = 0; r < n; ++r)
          for (int c = 0; c < out; ++c) {
            double ref = 0, mag = 0;
            for (int k = 0; k < in; ++k) {
              double xv = x[static_cast<size_t>(r) * in + k];
              if (round_x) xv = codec::bf16_to_float(codec::float_to_bf16(static_cast<float>(xv)));
              const double wv = bf16 ? codec::bf16_to_float(wb[static_cast<size_t>(c) * in + k])
                                     : w[static_cast<size_t>(c) * in + k];
              ref += xv * wv;
              mag += std::abs(xv * wv);
            }
            // fp32 accumulation in any order: error bounded by ~in * eps * sum |x_k w_k|.
            ASSERT_NEAR(y[static_cast<size_t>(r) * out + c], ref, 1e-6 * in * mag + 1e-30)
                << be.describe() << (bf16 ? " bf16" : " fp32") << " n=" << n << " in=" << in << " out=" << out;
          }
      }
    }
  }
}

// Fused projections (Backend::fuse_weights, matmul_group) equal separate matmuls bit for bit: one row
// through the single GEMV over the concatenated weights, more rows and outputs that do not lie back to
// back through one matmul each. The fused weights are slices of one allocation, in order.
TEST(BackendOps, FusedProjectionsEqualSeparateOnes) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  Pair b(64);
  Backend& be = *b.gpu;
  const int in = 512, outs[3] = {512, 128, 128};
  Tensor fused[3], plain[3];
  for (int i = 0; i < 3; ++i) {
    const auto w = randn(rng, static_cast<size_t>(outs[i]) * in, 0.05f);
    std::vector<uint16_t> wb(w.size());
    for (size_t j = 0; j < w.size(); ++j) wb[j] = codec::float_to_bf16(w[j]);
    fused[i] = be.upload_bf16(wb, DType::kBF16);
    plain[i] = be.upload_bf16(wb, DType::kBF16);
  }
  Tensor* fuse[] = {&fused[0], &fused[1], &fused[2]};
  const Tensor storage = be.fuse_weights(fuse);
  ASSERT_EQ(storage.size(), static_cast<size_t>(in) * (512 + 128 + 128));
  EXPECT_EQ(fused[0].raw(), storage.raw());
  EXPECT_EQ(static_cast<uint8_t*>(fused[2].raw()), static_cast<uint8_t*>(storage.raw()) + 2 * in * (512 + 128));
  for (int n : {1, 4}) {
    for (bool back_to_back : {true, false}) {
      const auto x = randn(rng, static_cast<size_t>(n) * in);
      const Tensor tx = be.upload(x);
      Tensor all = poisoned(be, static_cast<size_t>(n) * (512 + 128 + 128) + 8);
      Tensor group[3], separate[3];
      size_t at = 0;
      for (int i = 0; i < 3; ++i) {
        at += back_to_back ? 0 : 2;  // a gap: the group must not run as one product
        group[i] = all.slice(at, static_cast<size_t>(n) * outs[i]);
        at += group[i].size();
        separate[i] = poisoned(be, static_cast<size_t>(n) * outs[i]);
        be.matmul(tx, n, in, plain[i], outs[i], separate[i]);
      }
      const Projection ps[] = {
          {&fused[0], outs[0], &group[0]}, {&fused[1], outs[1], &group[1]}, {&fused[2], outs[2], &group[2]}};
      be.matmul_group(tx, n, in, ps);
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(down(be, group[i]), down(be, separate[i]))
            << "projection " << i << ", n " << n << (back_to_back ? "" : ", with gaps");
    }
  }
  Tensor mixed[2] = {be.upload(randn(rng, 64)), be.upload_bf16(std::vector<uint16_t>(64, 0), DType::kBF16)};
  Tensor* bad[] = {&mixed[0], &mixed[1]};
  EXPECT_THROW(be.fuse_weights(bad), std::invalid_argument);
  EXPECT_EQ(mixed[0].size(), 64u);  // left as it was
}

// The gated MLP's input half (matmul_swiglu) equals matmul_group then swiglu bit for bit: one row over
// fused gate/up weights runs as one GEMV with the SwiGLU as its epilogue (odd widths leave a partial last
// block), more rows or weights that are not back to back as the two steps. Its output's BF16 copy feeds
// the down projection like a fresh conversion, and it is within fp32 rounding of fp64.
TEST(BackendOps, GateUpWithSwigluEqualsTheTwoSteps) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  Pair b(64);
  Backend& be = *b.gpu;
  const int in = 512;
  for (int inter : {1, 333, 1536}) {
    for (int n : {1, 3}) {
      for (bool fused_weights : {true, false}) {
        const auto x = randn(rng, static_cast<size_t>(n) * in);
        std::vector<uint16_t> wb[2];
        Tensor w[2];
        for (int i = 0; i < 2; ++i) {
          const auto wf = randn(rng, static_cast<size_t>(inter) * in, 0.05f);
          wb[i].resize(wf.size());
          for (size_t j = 0; j < wf.size(); ++j) wb[i][j] = codec::float_to_bf16(wf[j]);
          w[i] = be.upload_bf16(wb[i], DType::kBF16);
        }
        Tensor storage;
        if (fused_weights) {
          Tensor* fuse[] = {&w[0], &w[1]};
          storage = be.fuse_weights(fuse);
        }
        const size_t id = static_cast<size_t>(n) * inter;
        const Tensor tx = be.upload(x);
        Tensor gu1 = poisoned(be, 2 * id), gu2 = poisoned(be, 2 * id);
        Tensor g1 = gu1.slice(0, id), u1 = gu1.slice(id, id), g2 = gu2.slice(0, id), u2 = gu2.slice(id, id);
        Tensor a1 = poisoned(be, id), a2 = poisoned(be, id);
        const Projection p1[] = {{&w[0], inter, &g1}, {&w[1], inter, &u1}};
        const Projection p2[] = {{&w[0], inter, &g2}, {&w[1], inter, &u2}};
        be.matmul_swiglu(tx, n, in, p1, a1);
        const auto fused = down(be, a1);
        be.matmul_group(tx, n, in, p2);
        be.swiglu(g2, u2, a2);
        const std::string what = "inter " + std::to_string(inter) + " n " + std::to_string(n) +
                                 (fused_weights ? "" : ", separate weights");
        ASSERT_EQ(fused, down(be, a2)) << what;
        for (int r = 0; r < n; ++r)
          for (int i = 0; i < inter; ++i) {
            double gate = 0, up = 0, mag = 0;
            for (int k = 0; k < in; ++k) {
              const double xv = codec::bf16_to_float(codec::float_to_bf16(x[static_cast<size_t>(r) * in + k]));
              const double gw = codec::bf16_to_float(wb[0][static_cast<size_t>(i) * in + k]);
              const double uw = codec::bf16_to_float(wb[1][static_cast<size_t>(i) * in + k]);
              gate += xv * gw;
              up += xv * uw;
              mag += std::abs(xv) * (std::abs(gw) + std::abs(uw));
            }
            const double ref = gate / (1.0 + std::exp(-gate)) * up;
            ASSERT_NEAR(fused[static_cast<size_t>(r) * inter + i], ref, 1e-6 * in * mag * (1.0 + mag) + 1e-30)
                << what << " row " << r << " output " << i;
          }
        // The down projection reads the fused pass's BF16 copy of its output: the same bits as from a copy.
        const auto m = randn(rng, static_cast<size_t>(96) * inter, 0.05f);
        std::vector<uint16_t> mb(m.size());
        for (size_t j = 0; j < m.size(); ++j) mb[j] = codec::float_to_bf16(m[j]);
        const Tensor tm = be.upload_bf16(mb, DType::kBF16);
        Tensor y1 = poisoned(be, static_cast<size_t>(n) * 96), y2 = poisoned(be, static_cast<size_t>(n) * 96);
        be.matmul_swiglu(tx, n, in, p1, a1);
        be.matmul(a1, n, inter, tm, 96, y1);
        Tensor copy = poisoned(be, id);
        be.copy(a1, copy);
        be.matmul(copy, n, inter, tm, 96, y2);
        EXPECT_EQ(down(be, y1), down(be, y2)) << what;
      }
    }
  }
  // Not a gate/up pair: refused before anything runs.
  Tensor w = be.upload_bf16(std::vector<uint16_t>(64 * 8, 0), DType::kBF16), y = poisoned(be, 8), a = poisoned(be, 8);
  const Projection one[] = {{&w, 8, &y}};
  EXPECT_THROW(be.matmul_swiglu(be.upload(randn(rng, 64)), 1, 64, one, a), std::invalid_argument);
}

// Rows the register-row norm kernels do not take (dim not a multiple of 4, or wider than they hold)
// go through the scalar kernels, still equal to the CPU within ulps and fused equal to unfused.
TEST(BackendOps, NormsOfOddAndWideRows) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  Pair b(64);
  for (int dim : {514, 8192, 9000}) {
    const int rows = 3;
    const auto x = randn(rng, static_cast<size_t>(rows) * dim, 3.0f), y = randn(rng, x.size()),
               w = randn(rng, static_cast<size_t>(dim));
    std::vector<float> got[2];
    for (int d = 0; d < 2; ++d) {
      Backend& be = d ? *b.gpu : *b.cpu;
      const Tensor tw = be.upload(w);
      Tensor x1 = be.upload(x), y1 = be.upload(y), h1 = poisoned(be, x.size());
      be.add_rmsnorm(x1, &y1, h1, rows, dim, tw, 1e-6f);
      Tensor x2 = be.upload(x), y2 = be.upload(y);
      be.add(x2, y2);
      be.rmsnorm(x2, rows, dim, tw, 1e-6f);
      got[d] = down(be, h1);
      EXPECT_EQ(got[d], down(be, x2)) << "dim " << dim << " on " << be.describe();
    }
    expect_close(got[1], got[0], 1e-5, "add_rmsnorm dim " + std::to_string(dim));
  }
}

// The BF16 copy that add_rmsnorm and swiglu write for the next GEMM equals a fresh conversion: a GEMM
// on their output gives the same bits as one on a copy of it (which must be converted anew).
TEST(BackendOps, FusedBf16CopiesEqualAFreshConversion) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  Pair b(64);
  Backend& be = *b.gpu;
  const int rows = 9, dim = 768, out = 320;
  const auto x = randn(rng, static_cast<size_t>(rows) * dim), y = randn(rng, x.size()),
             w = randn(rng, static_cast<size_t>(dim)), m = randn(rng, static_cast<size_t>(out) * dim, 0.05f);
  std::vector<uint16_t> mb(m.size());
  for (size_t i = 0; i < m.size(); ++i) mb[i] = codec::float_to_bf16(m[i]);
  const Tensor tm = be.upload_bf16(mb, DType::kBF16), tw = be.upload(w);
  Tensor tx = be.upload(x), ty = be.upload(y), h = poisoned(be, x.size()), fresh = poisoned(be, x.size());
  be.add_rmsnorm(tx, &ty, h, rows, dim, tw, 1e-6f);
  Tensor y1 = poisoned(be, static_cast<size_t>(rows) * out), y2 = poisoned(be, static_cast<size_t>(rows) * out);
  be.matmul(h, rows, dim, tm, out, y1);  // reads the norm's own BF16 copy
  be.copy(h, fresh);
  be.matmul(fresh, rows, dim, tm, out, y2);  // converts anew
  EXPECT_EQ(down(be, y1), down(be, y2));
  Tensor a = poisoned(be, x.size()), a2 = poisoned(be, x.size());
  be.swiglu(tx, ty, a);
  be.matmul(a, rows, dim, tm, out, y1);
  be.copy(a, a2);
  be.matmul(a2, rows, dim, tm, out, y2);
  EXPECT_EQ(down(be, y1), down(be, y2));
  // Writing the source invalidates its copy: the next GEMM sees the new values.
  be.add(h, ty);
  be.matmul(h, rows, dim, tm, out, y1);
  be.copy(h, fresh);
  be.matmul(fresh, rows, dim, tm, out, y2);
  EXPECT_EQ(down(be, y1), down(be, y2));
}

}  // namespace
}  // namespace minimakv::backend
