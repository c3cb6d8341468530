// The CUDA backend's projections at a model's geometry: each weight matrix of config.json (q, k, v, o,
// gate, up, down, lm_head) times n token rows through Backend::matmul, with BF16 weights (tensor cores,
// the activation rounded to BF16 first, as the engine runs it) and with fp32 weights (SGEMM, the old
// path), dummy values drawn on the device. Prints one JSON object per (dtype, projection, n): median
// milliseconds over --reps timed batches and TFLOP/s. Then the decode step's GEMV chain in one CUDA
// graph: through cuBLAS with fp32 and BF16 outputs, and through the engine's own GEMV on the engine's
// shapes (q, k, v and gate, up fused), with 2 (the default), 4 and 8 output rows a block.
// scripts/bench/bf16-engine.sh sets PyTorch's BF16 matmul and GEMV chains at the same shapes beside it.
//   cuda_gemm_bench --config bench/configs/qwen3-8b/config.json --tokens 1,8,8192 [--reps 7]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "minimakv/backend/backend.h"
#include "minimakv/backend/dummy_weights.h"
#include "minimakv/model/config.h"
#include "src/backend/cuda_gemv.h"

namespace {

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace minimakv;
  std::string config_path;
  std::vector<int> tokens{1, 8, 8192};
  int reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--config")) config_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--tokens")) tokens = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::max(3, std::atoi(argv[i + 1]));
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "usage: cuda_gemm_bench --config CONFIG.json [--tokens 1,8,8192] [--reps 7]\n");
    return 2;
  }
  const std::string dir = config_path.substr(0, config_path.rfind('/'));
  const auto cfg = model::load_config(dir);
  auto be = backend::make_cuda_backend(cfg);
  const int H = static_cast<int>(cfg.hidden_size), I = static_cast<int>(cfg.intermediate_size);
  const int Q = static_cast<int>(cfg.num_attention_heads * cfg.head_dim);
  const int KV = static_cast<int>(cfg.num_key_value_heads * cfg.head_dim), V = static_cast<int>(cfg.vocab_size);
  struct Proj {
    const char* name;
    int out, in;
  };
  const Proj projs[] = {{"q", Q, H}, {"k", KV, H}, {"v", KV, H}, {"o", H, Q},
                        {"gate", I, H}, {"up", I, H}, {"down", H, I}, {"lm_head", V, H}};
  backend::Tensor sync = be->alloc(1);
  float host = 0;
  auto wait = [&] { be->to_host(sync, std::span<float>(&host, 1)); };
  for (auto dtype : {backend::DType::kBF16, backend::DType::kF32}) {
    for (const Proj& p : projs) {
      const auto w = be->random_weight(static_cast<size_t>(p.out) * p.in, 11, backend::kDummyWeightScale, dtype);
      for (int n : tokens) {
        const auto x = be->random_weight(static_cast<size_t>(n) * p.in, 12, 1.0f, backend::DType::kF32);
        auto y = be->alloc(static_cast<size_t>(n) * p.out);
        // Enough calls per timed batch for about 20 ms of work at 400 TFLOP/s (3 to 2,000).
        const double flop = 2.0 * n * p.in * p.out;
        const int calls = std::max(3, std::min(2000, static_cast<int>(8e12 / flop)));
        for (int c = 0; c < 3; ++c) be->matmul(x, n, p.in, w, p.out, y);
        wait();
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int c = 0; c < calls; ++c) be->matmul(x, n, p.in, w, p.out, y);
          wait();
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / calls);
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        std::printf("{\"dtype\": \"%s\", \"proj\": \"%s\", \"n\": %d, \"in\": %d, \"out\": %d, \"ms\": %.5f, "
                    "\"ms_min\": %.5f, \"ms_max\": %.5f, \"tflops\": %.2f}\n",
                    backend::to_string(dtype), p.name, n, p.in, p.out, med, ms.front(), ms.back(),
                    flop / (med * 1e-3) / 1e12);
        std::fflush(stdout);
      }
    }
  }
  // The decode step's projection chain at batch 1 (every layer's 7 GEMVs and lm_head, BF16 weights),
  // captured in one CUDA graph and replayed, with fp32 output (the engine's GEMMs) and with BF16 output
  // (PyTorch's): what the weights cost a decode step without anything else, and what the output dtype
  // costs.
  {
    cudaStream_t st;
    cudaStreamCreate(&st);
    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetStream(h, st);
    void* ws = nullptr;
    cudaMalloc(&ws, size_t{32} << 20);
    cublasSetWorkspace(h, ws, size_t{32} << 20);
    std::vector<backend::Tensor> weights;
    const int L = static_cast<int>(cfg.num_hidden_layers);
    for (int l = 0; l < L; ++l)
      for (int p = 0; p < 7; ++p)
        weights.push_back(be->random_weight(static_cast<size_t>(projs[p].out) * projs[p].in, 100 + 7 * l + p,
                                            backend::kDummyWeightScale, backend::DType::kBF16));
    weights.push_back(be->random_weight(static_cast<size_t>(V) * H, 99, backend::kDummyWeightScale, backend::DType::kBF16));
    const int widest = std::max({H, I, Q, V});
    const auto x = be->random_weight(static_cast<size_t>(widest), 5, 1.0f, backend::DType::kBF16);
    void* y = nullptr;
    cudaMalloc(&y, static_cast<size_t>(widest) * 4);
    wait();
    // One graph of `chain` on st, replayed: median, min and max milliseconds a replay.
    auto time_graph = [&](auto&& chain) {
      chain();
      cudaStreamSynchronize(st);
      cudaGraph_t g;
      cudaGraphExec_t ge;
      cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
      chain();
      cudaStreamEndCapture(st, &g);
      cudaGraphInstantiate(&ge, g, 0);
      std::vector<double> ms;
      for (int r = 0; r < reps + 2; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 10; ++i) cudaGraphLaunch(ge, st);
        cudaStreamSynchronize(st);
        if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10);
      }
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
      std::sort(ms.begin(), ms.end());
      return std::array<double, 3>{ms[ms.size() / 2], ms.front(), ms.back()};
    };
    for (auto out_type : {CUDA_R_32F, CUDA_R_16BF}) {
      const float one = 1.0f, zero = 0.0f;
      auto chain = [&] {
        for (int l = 0; l <= L; ++l)
          for (int p = 0; p < (l < L ? 7 : 1); ++p) {
            const Proj& pr = l < L ? projs[p] : projs[7];
            const auto& w = weights[static_cast<size_t>(l < L ? 7 * l + p : 7 * L)];
            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, pr.out, 1, pr.in, &one, w.raw(), CUDA_R_16BF, pr.in, x.raw(),
                         CUDA_R_16BF, pr.in, &zero, y, out_type, pr.out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
          }
      };
      const auto t = time_graph(chain);
      std::printf("{\"chain\": \"decode_b1\", \"out\": \"%s\", \"ms\": %.4f, \"ms_min\": %.4f, \"ms_max\": %.4f}\n",
                  out_type == CUDA_R_32F ? "fp32" : "bf16", t[0], t[1], t[2]);
    }
    // The engine's GEMV on the engine's shapes: per layer q, k, v as one matrix, o, gate and up as one,
    // down; then lm_head. fp32 output, as the engine's.
    weights.clear();
    const int fused_out[4] = {Q + 2 * KV, H, 2 * I, H}, fused_in[4] = {H, Q, H, I};
    for (int l = 0; l < L; ++l)
      for (int p = 0; p < 4; ++p)
        weights.push_back(be->random_weight(static_cast<size_t>(fused_out[p]) * fused_in[p], 300 + 4 * l + p,
                                            backend::kDummyWeightScale, backend::DType::kBF16));
    weights.push_back(be->random_weight(static_cast<size_t>(V) * H, 98, backend::kDummyWeightScale, backend::DType::kBF16));
    float* yf = nullptr;
    cudaMalloc(&yf, static_cast<size_t>(std::max(widest, 2 * I)) * sizeof(float));
    wait();
    for (int rows : {backend::cuda_gemv::kWarpPerRow, 2, 4, 8}) {
      auto chain = [&] {
        for (int l = 0; l <= L; ++l)
          for (int p = 0; p < (l < L ? 4 : 1); ++p) {
            const int out = l < L ? fused_out[p] : V, in = l < L ? fused_in[p] : H;
            backend::cuda_gemv::gemv_bf16(static_cast<const uint16_t*>(x.raw()), in,
                                          static_cast<const uint16_t*>(weights[static_cast<size_t>(l < L ? 4 * l + p : 4 * L)].raw()),
                                          out, yf, st, rows);
          }
      };
      const auto t = time_graph(chain);
      std::printf("{\"chain\": \"decode_b1_gemv\", \"out\": \"fp32\", \"rows_per_block\": %d, \"ms\": %.4f, "
                  "\"ms_min\": %.4f, \"ms_max\": %.4f}\n",
                  rows, t[0], t[1], t[2]);
    }
    cudaFree(yf);
    cudaFree(y);
    cudaFree(ws);
    cublasDestroy(h);
    cudaStreamDestroy(st);
  }
  return 0;
}
