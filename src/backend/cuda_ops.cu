#include "cuda_ops.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "cuda_activation.cuh"
#include "minimakv/backend/dummy_weights.h"
#include "minimakv/cuda/chained_launch.cuh"
#include "minimakv/cuda/device_memory.h"

namespace minimakv::backend::cuda_ops {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

__global__ void embed_kernel(const float* table, int dim, const int32_t* ids, float* out) {
  cuda::chain_begin();
  const float* src = table + static_cast<size_t>(ids[blockIdx.x]) * dim;
  float* dst = out + static_cast<size_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

__global__ void embed_bf16_kernel(const __nv_bfloat16* table, int dim, const int32_t* ids, float* out) {
  cuda::chain_begin();
  const __nv_bfloat16* src = table + static_cast<size_t>(ids[blockIdx.x]) * dim;
  float* dst = out + static_cast<size_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
}

// Two elements per thread: fp32 pairs to BF16 pairs, round to nearest even.
__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, size_t n) {
  cuda::chain_begin();
  const size_t i = 2 * (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (i + 1 < n) {
    const float2 v = *reinterpret_cast<const float2*>(x + i);
    *reinterpret_cast<__nv_bfloat162*>(y + i) = __floats2bfloat162_rn(v.x, v.y);
  } else if (i < n) {
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

__global__ void dummy_bf16_kernel(__nv_bfloat16* w, size_t n, uint64_t seed, float scale) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    w[i] = __float2bfloat16_rn(dummy_weight(seed, i, scale));
}

__global__ void dummy_f32_kernel(float* w, size_t n, uint64_t seed, float scale) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    w[i] = dummy_weight(seed, i, scale);
}

// 1 / sqrt(mean of squares + eps) of a row whose threads hold partial sums of squares `ss`: one tree
// through shared memory, the same in every norm kernel, so they agree bit for bit. Every thread of the
// block (kThreads of them) must call it.
__device__ float inverse_rms(float ss, int dim, float eps) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  return 1.0f / sqrtf(partial[0] / static_cast<float>(dim) + eps);
}

// One block per row; the sum of squares in fp32, reduced through shared memory.
__global__ void rmsnorm_kernel(float* x, int dim, const float* w, float eps) {
  cuda::chain_begin();
  float* row = x + static_cast<size_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += row[i] * row[i];
  const float inv = inverse_rms(ss, dim, eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) row[i] = row[i] * inv * w[i];
}

// The register-row variants: a row of `dim` floats held in registers, float4 chunk
// c = threadIdx.x + j * kThreads in v[j], so a row costs one load round trip instead of one per
// element (a strided loop that also stores cannot hoist its loads past the stores, which left a
// 4096-wide add + norm latency-bound at ~17 us). For rows of dim % 4 == 0 up to kMaxRegisterRow floats
// at 16-byte aligned addresses; other rows take the scalar kernels.
constexpr int kRowChunks = 8;
constexpr int kMaxRegisterRow = kRowChunks * kThreads * 4;  // 8192 floats

struct RegisterRow {
  float4 v[kRowChunks];
  // This thread's chunks of a row of `chunks` float4s (one load round trip for the whole row).
  __device__ void load(const float4* __restrict__ row, int chunks) {
#pragma unroll
    for (int j = 0; j < kRowChunks; ++j) {
      const int c = static_cast<int>(threadIdx.x) + j * kThreads;
      if (c < chunks) v[j] = row[c];
    }
  }
  // Sum of squares of this thread's chunks, chunk by chunk and x, y, z, w within one: the order both
  // register-row kernels use, so they agree bit for bit.
  __device__ float sum_squares(int chunks) const {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kRowChunks; ++j)
      if (static_cast<int>(threadIdx.x) + j * kThreads < chunks) {
        ss += v[j].x * v[j].x;
        ss += v[j].y * v[j].y;
        ss += v[j].z * v[j].z;
        ss += v[j].w * v[j].w;
      }
    return ss;
  }
};

__device__ inline float4 scaled(float4 a, float inv, float4 g) {
  return make_float4(a.x * inv * g.x, a.y * inv * g.y, a.z * inv * g.z, a.w * inv * g.w);
}

__global__ void rmsnorm_vec_kernel(float* __restrict__ x, int dim, const float* __restrict__ w, float eps) {
  const int chunks = dim / 4;
  RegisterRow g;  // the norm's weight: nothing in the pass writes it, so it loads before the wait
  g.load(reinterpret_cast<const float4*>(w), chunks);
  cuda::chain_begin();
  auto* row = reinterpret_cast<float4*>(x + static_cast<size_t>(blockIdx.x) * dim);
  RegisterRow r;
  r.load(row, chunks);
  const float inv = inverse_rms(r.sum_squares(chunks), dim, eps);
#pragma unroll
  for (int j = 0; j < kRowChunks; ++j) {
    const int c = static_cast<int>(threadIdx.x) + j * kThreads;
    if (c < chunks) row[c] = scaled(r.v[j], inv, g.v[j]);
  }
}

// One thread per (row, head, i < half). The angle is an fp32 product, as transformers computes it; its
// cosine and sine are taken in double and rounded, as the CPU backend does.
__global__ void rope_kernel(float* x, int rows, int heads, int head_dim, const uint32_t* positions,
                            const float* inv_freq) {
  cuda::chain_begin();
  const int half = head_dim / 2;
  const size_t n = static_cast<size_t>(rows) * heads * half;
  const size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const int i = static_cast<int>(t % half);
  const size_t rh = t / half;  // row * heads + head
  const int row = static_cast<int>(rh / heads);
  const float angle = __fmul_rn(static_cast<float>(positions[row]), inv_freq[i]);
  const auto c = static_cast<float>(cos(static_cast<double>(angle)));
  const auto s = static_cast<float>(sin(static_cast<double>(angle)));
  float* v = x + rh * head_dim;
  const float a = v[i], b = v[i + half];
  v[i] = a * c - b * s;
  v[i + half] = b * c + a * s;
}

// x += y (when y is given), then h = x / sqrt(mean(x^2) + eps) * w, and a BF16 copy of h when hb is
// given. One block per row, the same reduction as rmsnorm_kernel, so h is bit-identical to add, copy and
// rmsnorm run one after another.
__global__ void add_rmsnorm_kernel(float* x, const float* y, float* h, __nv_bfloat16* hb, int dim, const float* w,
                                   float eps) {
  cuda::chain_begin();
  const size_t base = static_cast<size_t>(blockIdx.x) * dim;
  float* row = x + base;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = row[i];
    if (y) {
      v += y[base + i];
      row[i] = v;
    }
    ss += v * v;
  }
  const float inv = inverse_rms(ss, dim, eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = row[i] * inv * w[i];
    h[base + i] = v;
    if (hb) hb[base + i] = __float2bfloat16_rn(v);
  }
}

// add_rmsnorm_kernel on a register row: the sum reduced as rmsnorm_vec_kernel reduces it, so h equals
// add, copy and rmsnorm in sequence bit for bit on every row both take.
__global__ void add_rmsnorm_vec_kernel(float* __restrict__ x, const float* __restrict__ y, float* __restrict__ h,
                                       __nv_bfloat16* __restrict__ hb, int dim, const float* __restrict__ w,
                                       float eps) {
  const int chunks = dim / 4;
  RegisterRow g;  // the norm's weight: nothing in the pass writes it, so it loads before the wait
  g.load(reinterpret_cast<const float4*>(w), chunks);
  cuda::chain_begin();
  const size_t base = static_cast<size_t>(blockIdx.x) * dim;
  auto* row = reinterpret_cast<float4*>(x + base);
  RegisterRow r;
  r.load(row, chunks);
  if (y) {
    const auto* y4 = reinterpret_cast<const float4*>(y + base);
#pragma unroll
    for (int j = 0; j < kRowChunks; ++j) {
      const int c = static_cast<int>(threadIdx.x) + j * kThreads;
      if (c >= chunks) continue;
      const float4 b = y4[c];
      r.v[j] = make_float4(r.v[j].x + b.x, r.v[j].y + b.y, r.v[j].z + b.z, r.v[j].w + b.w);
      row[c] = r.v[j];
    }
  }
  const float inv = inverse_rms(r.sum_squares(chunks), dim, eps);
  auto* h4 = reinterpret_cast<float4*>(h + base);
#pragma unroll
  for (int j = 0; j < kRowChunks; ++j) {
    const int c = static_cast<int>(threadIdx.x) + j * kThreads;
    if (c >= chunks) continue;
    const float4 o = scaled(r.v[j], inv, g.v[j]);
    h4[c] = o;
    if (hb) {
      auto* hb2 = reinterpret_cast<__nv_bfloat162*>(hb + base) + 2 * c;
      hb2[0] = __floats2bfloat162_rn(o.x, o.y);
      hb2[1] = __floats2bfloat162_rn(o.z, o.w);
    }
  }
}

// Qwen3's QK-norm then RoPE, in place on one (row, head) vector per block: the norm as rmsnorm_kernel
// over head_dim, the rotation as rope_kernel (same products, cosines in double), so the result is
// bit-identical to the two kernels in sequence.
// Blocks [0, blocks_x) take x (heads per row, weight w); blocks from blocks_x on take x2 (heads2, w2),
// when given: the q and k of one pass in one launch, each head computed as in its own launch.
__global__ void norm_rope_kernel(float* x, int heads, const float* w, unsigned blocks_x, float* x2, int heads2,
                                 const float* w2, int head_dim, float eps, const uint32_t* positions,
                                 const float* inv_freq) {
  unsigned b = blockIdx.x;
  if (b >= blocks_x) {
    b -= blocks_x;
    x = x2;
    heads = heads2;
    w = w2;
  }
  // This thread's first norm weight and frequency (weights: nothing in the pass writes them, so they load
  // before the wait).
  const int t0 = static_cast<int>(threadIdx.x);
  const float w0 = t0 < head_dim ? w[t0] : 0.0f, f0 = t0 < head_dim / 2 ? inv_freq[t0] : 0.0f;
  cuda::chain_begin();
  extern __shared__ float vec[];
  float* v = x + static_cast<size_t>(b) * head_dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) ss += v[i] * v[i];
  const float inv = inverse_rms(ss, head_dim, eps);
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) vec[i] = v[i] * inv * (i == t0 ? w0 : w[i]);
  __syncthreads();
  const int half = head_dim / 2;
  const int row = static_cast<int>(b / static_cast<unsigned>(heads));
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = __fmul_rn(static_cast<float>(positions[row]), i == t0 ? f0 : inv_freq[i]);
    const auto c = static_cast<float>(cos(static_cast<double>(angle)));
    const auto sn = static_cast<float>(sin(static_cast<double>(angle)));
    const float a = vec[i], b = vec[i + half];
    v[i] = a * c - b * sn;
    v[i + half] = b * c + a * sn;
  }
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, __nv_bfloat16* out_bf16, size_t n) {
  cuda::chain_begin();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = swiglu_value(gate[i], up[i]);
  out[i] = v;
  if (out_bf16) out_bf16[i] = __float2bfloat16_rn(v);
}

__global__ void add_kernel(float* x, const float* y, size_t n) {
  cuda::chain_begin();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void gather_kernel(const float* x, int dim, const int32_t* rows, float* out) {
  cuda::chain_begin();
  const float* src = x + static_cast<size_t>(rows[blockIdx.x]) * dim;
  float* dst = out + static_cast<size_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// Whether rows of `dim` floats at these addresses take the register-row kernels. Rows of at most
// kThreads floats keep the scalar kernels (one element per thread, nothing to hoist), whose reduction
// order norm_rope_kernel shares: QK-norm through rmsnorm() stays bit-identical to norm_rope().
bool vector_row(int dim, const void* a, const void* b, const void* c, const void* d) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return dim > kThreads && dim % 4 == 0 && dim <= kMaxRegisterRow && aligned(a) && aligned(b) && aligned(c) &&
         aligned(d);
}

}  // namespace

void embed(const float* table, int dim, const int32_t* ids, int rows, float* out, cudaStream_t s) {
  if (rows == 0) return;
  cuda::launch_chained(embed_kernel, rows, kThreads, 0, s, "embed", table, dim, ids, out);
}

void embed_bf16(const uint16_t* table, int dim, const int32_t* ids, int rows, float* out, cudaStream_t s) {
  if (rows == 0) return;
  cuda::launch_chained(embed_bf16_kernel, rows, kThreads, 0, s, "embed_bf16",
                       reinterpret_cast<const __nv_bfloat16*>(table), dim, ids, out);
}

void to_bf16(const float* x, uint16_t* y, size_t n, cudaStream_t s) {
  if (n == 0) return;
  cuda::launch_chained(to_bf16_kernel, blocks_for((n + 1) / 2), kThreads, 0, s, "to_bf16", x,
                       reinterpret_cast<__nv_bfloat16*>(y), n);
}

void fill_dummy(void* w, size_t n, bool bf16, uint64_t seed, float scale, cudaStream_t s) {
  if (n == 0) return;
  const unsigned blocks = std::min<unsigned>(blocks_for(n), 65535u);
  if (bf16)
    dummy_bf16_kernel<<<blocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(w), n, seed, scale);
  else
    dummy_f32_kernel<<<blocks, kThreads, 0, s>>>(static_cast<float*>(w), n, seed, scale);
  cuda::check(cudaGetLastError(), "fill_dummy");
}

void rmsnorm(float* x, size_t rows, int dim, const float* w, float eps, cudaStream_t s) {
  if (rows == 0) return;
  if (vector_row(dim, x, nullptr, nullptr, w))
    cuda::launch_chained(rmsnorm_vec_kernel, static_cast<unsigned>(rows), kThreads, 0, s, "rmsnorm", x, dim,
                         w, eps);
  else
    cuda::launch_chained(rmsnorm_kernel, static_cast<unsigned>(rows), kThreads, 0, s, "rmsnorm", x, dim, w, eps);
}

void rope(float* x, int rows, int heads, int head_dim, const uint32_t* positions, const float* inv_freq,
          cudaStream_t s) {
  const size_t n = static_cast<size_t>(rows) * heads * (head_dim / 2);
  if (n == 0) return;
  cuda::launch_chained(rope_kernel, blocks_for(n), kThreads, 0, s, "rope", x, rows, heads, head_dim, positions,
                       inv_freq);
}

void swiglu(const float* gate, const float* up, float* out, uint16_t* out_bf16, size_t n, cudaStream_t s) {
  if (n == 0) return;
  cuda::launch_chained(swiglu_kernel, blocks_for(n), kThreads, 0, s, "swiglu", gate, up, out,
                       reinterpret_cast<__nv_bfloat16*>(out_bf16), n);
}

void add_rmsnorm(float* x, const float* y, float* h, uint16_t* h_bf16, size_t rows, int dim, const float* w, float eps,
                 cudaStream_t s) {
  if (rows == 0) return;
  if (vector_row(dim, x, y, h, w))
    cuda::launch_chained(add_rmsnorm_vec_kernel, static_cast<unsigned>(rows), kThreads, 0, s, "add_rmsnorm",
                         x, y, h, reinterpret_cast<__nv_bfloat16*>(h_bf16), dim, w, eps);
  else
    cuda::launch_chained(add_rmsnorm_kernel, static_cast<unsigned>(rows), kThreads, 0, s, "add_rmsnorm", x, y, h,
                         reinterpret_cast<__nv_bfloat16*>(h_bf16), dim, w, eps);
}

void norm_rope(float* x, int rows, int heads, int head_dim, const float* w, float eps, const uint32_t* positions,
               const float* inv_freq, cudaStream_t s) {
  const auto blocks = static_cast<unsigned>(rows) * static_cast<unsigned>(heads);
  if (blocks == 0) return;
  cuda::launch_chained(norm_rope_kernel, blocks, kThreads, static_cast<size_t>(head_dim) * sizeof(float), s,
                       "norm_rope", x, heads, w, blocks, nullptr, 0, nullptr, head_dim, eps, positions,
                       inv_freq);
}

void norm_rope_qk(float* q, int q_heads, const float* wq, float* k, int k_heads, const float* wk, int rows,
                  int head_dim, float eps, const uint32_t* positions, const float* inv_freq, cudaStream_t s) {
  const auto blocks_q = static_cast<unsigned>(rows) * static_cast<unsigned>(q_heads);
  const auto blocks = blocks_q + static_cast<unsigned>(rows) * static_cast<unsigned>(k_heads);
  if (blocks == 0) return;
  cuda::launch_chained(norm_rope_kernel, blocks, kThreads, static_cast<size_t>(head_dim) * sizeof(float), s,
                       "norm_rope_qk", q, q_heads, wq, blocks_q, k, k_heads, wk, head_dim, eps, positions,
                       inv_freq);
}

void add(float* x, const float* y, size_t n, cudaStream_t s) {
  if (n == 0) return;
  cuda::launch_chained(add_kernel, blocks_for(n), kThreads, 0, s, "add", x, y, n);
}

void gather_rows(const float* x, int dim, const int32_t* rows, int n, float* out, cudaStream_t s) {
  if (n == 0) return;
  cuda::launch_chained(gather_kernel, n, kThreads, 0, s, "gather_rows", x, dim, rows, out);
}

}  // namespace minimakv::backend::cuda_ops
