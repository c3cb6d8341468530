// The operator set the transformer forward pass is written against, implemented once per device.
//
// Owns: the interface and the Tensor handle. A Tensor is a flat array (fp32, or BF16 for weights) in its
// backend's memory (host memory for the CPU backend, device memory for CUDA) and owns that allocation
// (move-only).
// Shapes are row-major and passed explicitly; weights are [out][in] as Hugging Face stores them, so a
// projection is y = x W^T. A backend may run calls asynchronously (the CUDA backend queues them on one
// stream); to_host() returns once every earlier call has finished. Backends are not thread-safe: one
// forward pass at a time per backend.
// Attention goes through the paged KV store: attention() writes the chunk's K/V of one layer into the
// sequence's pages (quantized on write) and attends over every page in its stored format, causal inside
// the chunk, with no dense copy of the cache. The store must come from the same backend's make_store(),
// so its pages live where the backend's kernels read them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/attention/thread_pool.h"
#include "minimakv/cache/kv_store.h"
#include "minimakv/model/config.h"

namespace minimakv::backend {

enum class Device { kCpu, kCuda };
const char* to_string(Device d);
Device parse_device(std::string_view name);  // "cpu" | "cuda"; throws std::invalid_argument otherwise

// Element types of tensors. Activations are kF32; weight matrices may be kBF16 (checkpoint precision)
// on a backend that computes with them (the CUDA backend's tensor-core GEMMs).
enum class DType : uint8_t { kF32, kBF16 };
size_t dtype_bytes(DType t);
const char* to_string(DType t);

class Tensor {
 public:
  Tensor() = default;
  Tensor(float* data, size_t size, std::function<void(float*)> release)
      : p_(data, [r = std::move(release)](void* q) { r(static_cast<float*>(q)); }), n_(size) {}
  Tensor(void* data, size_t size, DType dtype, std::function<void(void*)> release)
      : p_(data, std::move(release)), n_(size), dtype_(dtype) {}
  float* data() const { return static_cast<float*>(p_.get()); }  // kF32 tensors
  void* raw() const { return p_.get(); }
  size_t size() const { return n_; }  // elements
  DType dtype() const { return dtype_; }
  size_t bytes() const { return n_ * dtype_bytes(dtype_); }
  // Elements [first, first + n) as a tensor that does not own them: valid while this one lives.
  Tensor slice(size_t first, size_t n) const;

 private:
  std::unique_ptr<void, std::function<void(void*)>> p_{nullptr, [](void*) {}};
  size_t n_ = 0;
  DType dtype_ = DType::kF32;
};

// One projection of a group that reads the same input: y[n][out] = x[n][in] w[out][in]^T.
struct Projection {
  const Tensor* w;
  int out;
  Tensor* y;
};

// The output rows of a projection group that can run as one product, or 0: one row of x, BF16 weights of
// the stated shapes lying back to back in memory (Backend::fuse_weights), outputs back to back too.
size_t fused_group_rows(int n, int in, std::span<const Projection> ps);

// Device memory as the driver reports it (bytes).
struct DeviceMemory {
  size_t free = 0, total = 0;
};

// Rows [row, row + n) of a forward pass belong to sequence `seq` at positions first, first + 1, ...
// The i-th SeqRows of a pass is the i-th sequence of its cache::ForwardStep.
struct SeqRows {
  cache::SeqId seq = 0;
  int row = 0, n = 0;
  uint32_t first = 0;
};

// What attention() read, summed over the calls since the backend was made (the paper's contribution
// 4): calls per route ("mixed", "fp8-only", "tq3-only", "dense"), bytes per page format (K and V codes
// and metadata of the valid tokens), bytes of any dense copy made (0 on every route we have) and
// fallbacks to a slower path (0). Backends that do not instrument their kernels report calls = 0.
struct AttentionStats {
  uint64_t calls = 0;
  std::map<std::string, uint64_t> routes;
  std::array<uint64_t, codec::kNumPageFormats> bytes_read{};
  uint64_t dense_shadow_bytes = 0, fallbacks = 0;
};

// How the forward passes since the backend was made ran: eagerly (every call launched as it came),
// recorded (eager, measuring what a graph of the pass needs), captured into a graph and launched, or
// replayed from a graph captured earlier. Backends without graphs count every pass as eager.
struct ForwardStats {
  uint64_t eager = 0, recorded = 0, captured = 0, replayed = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string describe() const = 0;  // e.g. the GPU's name

  // ---- memory
  virtual Tensor alloc(size_t n) = 0;  // contents undefined
  virtual Tensor upload(std::span<const float> host) = 0;
  virtual void to_host(const Tensor& t, std::span<float> out) = 0;  // waits for every earlier call
  // Weights. upload_bf16 takes BF16 bit patterns and keeps them in `dtype` (kBF16 as given, or widened
  // exactly to kF32). random_weight draws n values uniform in [-scale, scale], a pure function of
  // (seed, index), in `dtype`, where the backend computes (dummy weights: no host copy of an 8B model).
  virtual Tensor upload_bf16(std::span<const uint16_t> bits, DType dtype) = 0;
  virtual Tensor random_weight(size_t n, uint64_t seed, float scale, DType dtype) = 0;
  // The weight dtype this backend computes projections in when the user does not choose.
  virtual DType default_weight_dtype() const { return DType::kF32; }
  virtual std::optional<DeviceMemory> device_memory() const { return std::nullopt; }

  // ---- operators (x, y, out: distinct tensors unless stated)
  virtual void embed(const Tensor& table, int dim, std::span<const int32_t> ids, Tensor& out) = 0;  // table: any dtype
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // y[n][out] = x[n][in] w[out][in]^T; w kF32, or kBF16 where the backend has it (x is then rounded to
  // BF16 for the tensor cores and the products accumulate in fp32, as a BF16 model computes).
  virtual void matmul(const Tensor& x, int n, int in, const Tensor& w, int out, Tensor& y) = 0;
  // Projections of one input (q, k, v; gate, up), equal bit for bit to one matmul each. A backend may
  // run them as one product where it fused the weights (fuse_weights) and the outputs lie back to back.
  virtual void matmul_group(const Tensor& x, int n, int in, std::span<const Projection> ps) {
    for (const Projection& p : ps) matmul(x, n, in, *p.w, p.out, *p.y);
  }
  // Puts the weights (one dtype) back to back in one allocation, in order, and makes each a slice of it;
  // returns the allocation, which must outlive the slices. A backend that gains nothing by it returns
  // an empty tensor and leaves the weights as they are.
  virtual Tensor fuse_weights(std::span<Tensor* const> /*ws*/) { return {}; }
  // In place over rows of length dim: x / sqrt(mean(x^2) + eps) * w (also QK-norm, per head).
  virtual void rmsnorm(Tensor& x, size_t rows, int dim, const Tensor& w, float eps) = 0;
  // In place: rotate-half RoPE of x[rows][heads][head_dim], each row at its sequence position.
  virtual void rope(Tensor& x, int heads, std::span<const SeqRows> seqs) = 0;
  virtual void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) = 0;  // silu(gate) * up
  virtual void add(Tensor& x, const Tensor& y) = 0;                            // x += y
  // Fused operators: each equals the sequence of operators named, bit for bit, and a backend may run it
  // as one pass (the defaults run the sequence).
  // x += *y when y is given (the residual add of the block before), then h = rmsnorm(x) * w.
  virtual void add_rmsnorm(Tensor& x, const Tensor* y, Tensor& h, size_t rows, int dim, const Tensor& w, float eps) {
    if (y) add(x, *y);
    copy(x, h);
    rmsnorm(h, rows, dim, w, eps);
  }
  // The gated MLP's input half: the projections gate_up (gate, then up, of one width) of x, then out =
  // silu(gate) * up; `out` equals matmul_group then swiglu bit for bit. A backend that runs it as one
  // pass may leave the projections' outputs unwritten.
  virtual void matmul_swiglu(const Tensor& x, int n, int in, std::span<const Projection> gate_up, Tensor& out) {
    if (gate_up.size() != 2) throw std::invalid_argument("matmul_swiglu: the gate and up projections");
    matmul_group(x, n, in, gate_up);
    swiglu(*gate_up[0].y, *gate_up[1].y, out);
  }
  // In place on x[rows][heads][head_dim]: per-head RMSNorm with w (Qwen3's QK-norm), then RoPE.
  virtual void norm_rope(Tensor& x, int heads, int head_dim, const Tensor& w, float eps,
                         std::span<const SeqRows> seqs) {
    size_t rows = 0;
    for (const SeqRows& s : seqs) rows += static_cast<size_t>(s.n);
    rmsnorm(x, rows * static_cast<size_t>(heads), head_dim, w, eps);
    rope(x, heads, seqs);
  }
  // norm_rope of q (q_heads, weight wq) and then of k (kv_heads, weight wk) at the same rows: Qwen3's
  // QK-norm and RoPE of one layer.
  virtual void norm_rope_qk(Tensor& q, int q_heads, const Tensor& wq, Tensor& k, int kv_heads, const Tensor& wk,
                            int head_dim, float eps, std::span<const SeqRows> seqs) {
    norm_rope(q, q_heads, head_dim, wq, eps, seqs);
    norm_rope(k, kv_heads, head_dim, wk, eps, seqs);
  }
  // out[i][:] = x[rows[i]][:] for rows of length dim.
  virtual void gather_rows(const Tensor& x, int dim, std::span<const int> rows, Tensor& out) = 0;

  // ---- attention through the paged KV cache
  virtual std::unique_ptr<cache::KvStore> make_store(const cache::StoreConfig& cfg) = 0;
  // q: [rows][q_heads][head_dim] after RoPE; k, v: [rows][kv_heads][head_dim]; out like q. The step
  // holds the pass's appends: attention writes the layer's K/V at its write slots (into the step's
  // storage) and reads each sequence through its paged view; it never sees the store. page_scores, when
  // given, has one vector per sequence, to which this layer adds each logical page's score (eq. 7-9,
  // averaged over the query heads and the sequence's rows) times `score_weight`. A backend may keep
  // the sum on its device from layer 0 on and add it to page_scores only in collect_page_scores(),
  // which the forward pass calls once after its last layer.
  virtual void attention(cache::ForwardStep& step, int layer, std::span<const SeqRows> seqs, const Tensor& q,
                         const Tensor& k, const Tensor& v, Tensor& out, int q_heads,
                         std::vector<std::vector<float>>* page_scores, float score_weight) = 0;
  virtual void collect_page_scores(std::vector<std::vector<float>>& /*page_scores*/) {}
  virtual AttentionStats attention_stats() const { return {}; }

  // ---- forward passes
  // A forward pass calls begin_forward once its inputs are validated and its step begun, and
  // end_forward(true) after its last computing call, before it reads anything back (to_host,
  // collect_page_scores); end_forward(false) when it is abandoned by an exception. Between the two a
  // backend may only queue the calls' work, and tensors allocated in between live until the next
  // begin_forward: this lets the CUDA backend capture a decode step's launches in a graph once and
  // replay it for later steps of the same shape, running only the host-side bookkeeping per call.
  virtual void begin_forward(cache::ForwardStep& /*step*/, std::span<const SeqRows> /*seqs*/, bool /*page_scores*/) {}
  virtual void end_forward(bool /*completed*/) {}
  // Graph replay on or off (on by default where the backend has it; MINIMAKV_CUDA_GRAPHS=0 in the
  // environment turns it off for the CUDA backend). Results are bit-identical either way.
  virtual void set_graphs(bool /*on*/) {}
  virtual ForwardStats forward_stats() const { return {}; }
};

// acc[p] += weight * scores[p], growing acc to the sequence's page count (page scores of one layer
// folded into a forward pass's average over layers).
void add_page_scores(std::vector<float>& acc, std::span<const float> scores, float weight);

// The CPU backend: OpenBLAS GEMMs, Highway SIMD attention and BF16 GEMVs on a thread pool of its own with
// `threads` threads (0: one per hardware thread).
std::unique_ptr<Backend> make_cpu_backend(const model::ModelConfig& cfg, unsigned threads = 0);
// The CUDA backend: cuBLAS GEMMs, the mixed-format paged kernels, device page pools. Throws
// std::runtime_error when the library was built without CUDA or no GPU is visible.
std::unique_ptr<Backend> make_cuda_backend(const model::ModelConfig& cfg);
std::unique_ptr<Backend> make_backend(Device d, const model::ModelConfig& cfg, unsigned cpu_threads = 0);

}  // namespace minimakv::backend
