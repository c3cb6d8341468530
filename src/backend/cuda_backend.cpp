// The CUDA backend: device tensors from the stream-ordered allocator, cuBLAS GEMMs (BF16 weights on the
// tensor cores with fp32 accumulation, or fp32 weights through SGEMM for debugging), our own kernels for
// the rest, and attention through device page pools with the mixed-format paged kernels.
//
// Every call is queued on one stream, which is also the stream of every page operation of the stores
// this backend makes (cache::PageStorage's ordering contract). Attention of one layer:
//   1. the forward step hands out the slots of the chunk's tokens (write_slots) and append_tokens
//      quantizes K/V into them (FP8, or BF16 in the dense mode) on the device;
//   2. decode (one row per sequence): each row becomes one item of a decode plan over its sequence's
//      pages, and the split-K paged decode kernels attend and merge under one softmax;
//   3. prefill (a chunk of rows in some sequence): the tiled tensor-core prefill kernels take query
//      tiles x key splits of each sequence, causal, reading every earlier page in its stored format,
//      FP8 and TQ3, with no dense copy;
//   4. with page scores, the kernels turn their per-page (m_p, l_p) into page scores on the device (the
//      formula of attention::page_scores) and sum them over the layers of the forward pass, which
//      collects them once, after its last layer (collect_page_scores).
// This file holds the operators, the GEMMs and the step graphs' state machine; the plans, workspaces,
// page scores and statistics of 2-4 are CudaPagedAttention's (cuda_paged_attention.h).
// Decode steps (one row per sequence, no page scores) run from CUDA graphs: the first step of a shape
// runs eagerly and measures the tensors it allocates, the next is captured, and later steps of the same
// shape only run the host bookkeeping (slots, pins, plans, inputs written into pinned memory) and replay
// the graphs, whose copy nodes read those inputs. A step is captured as one graph per layer (everything
// up to and including that layer's attention) plus one for the head, each launched as soon as its host
// work is done, so the GPU runs layer l while the host prepares layer l + 1. Each layer has its own
// decode workspace, launched at capacity, so one graph fits any later plan within that capacity;
// growing any buffer a graph names bumps the epoch and forces a new capture.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "cuda_gemv.h"
#include "cuda_ops.h"
#include "cuda_page_storage.h"
#include "cuda_paged_attention.h"
#include "cuda_step_graph.h"
#include "cuda_stream.h"
#include "minimakv/attention/paged_attention.h"
#include "minimakv/backend/backend.h"
#include "minimakv/backend/cpu_ops.h"
#include "minimakv/codec/half.h"
#include "minimakv/cuda/chained_launch.h"
#include "minimakv/cuda/device_memory.h"
#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/page_writes.h"
#include "minimakv/cuda/paged_decode.h"
#include "minimakv/cuda/paged_prefill.h"

namespace minimakv::backend {

namespace {

using cuda::check;

void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw cuda::CudaError(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

// The query, rotation signs and output (and its BF16 copy, if asked for) of one layer's attention
// (decode or prefill).
cuda::AttentionBuffers attend_buffers(const Tensor& q, const DevicePageStorage& dev, int layer, Tensor& out,
                                      uint16_t* out_bf16) {
  cuda::AttentionBuffers io;
  io.q = q.data();
  io.signs = dev.signs(layer);
  io.out = out.data();
  io.out_bf16 = out_bf16;
  return io;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const model::ModelConfig& cfg) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
      throw std::runtime_error("the CUDA backend needs a GPU, and none is usable here");
    stream_ = std::make_shared<Stream>();
    segment_begun_.emplace();
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    name_ = prop.name;
    check_blas(cublasCreate(&blas_), "cublasCreate");
    check_blas(cublasSetStream(blas_, stream_->s), "cublasSetStream");
    check_blas(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // fp32, no TF32
    // A workspace of our own, so that no GEMM allocates while a step is being captured.
    blas_ws_ = cuda::DeviceArray<uint8_t>(size_t{32} << 20);
    check_blas(cublasSetWorkspace(blas_, blas_ws_.get(), blas_ws_.bytes()), "cublasSetWorkspace");
    q_heads_ = static_cast<int>(cfg.num_attention_heads);
    const char* g = std::getenv("MINIMAKV_CUDA_GRAPHS");
    graphs_on_ = !(g && std::string_view(g) == "0");
    // MINIMAKV_CUDA_GEMV=0: one-row products through cuBLAS as well (the A/B of docs/benchmarks.md).
    const char* gv = std::getenv("MINIMAKV_CUDA_GEMV");
    gemv_on_ = !(gv && std::string_view(gv) == "0");
    const char* sg = std::getenv("MINIMAKV_CUDA_GEMV_SWIGLU");
    swiglu_gemv_on_ = !(sg && std::string_view(sg) == "0");
    const Rope rope(cfg);
    inv_freq_ = cuda::DeviceArray<float>(rope.inv_freq().size());
    check(cudaMemcpy(inv_freq_.get(), rope.inv_freq().data(), inv_freq_.bytes(), cudaMemcpyHostToDevice), "inv_freq");
    head_dim_ = static_cast<int>(cfg.head_dim);
    paged_ = std::make_unique<CudaPagedAttention>(stream_, profile_);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_->s);
    segments_.clear();
    paged_.reset();
    cublasDestroy(blas_);
  }

  Device device() const override { return Device::kCuda; }
  std::string describe() const override { return name_; }

  Tensor alloc(size_t n) override {
    if (n == 0) return {};
    if (mode_ != Mode::kEager) {
      if (float* a = arena_.take(n)) return Tensor(a, n, [](float*) {});  // the arena is reused by the next pass
      if (mode_ != Mode::kRecord) throw std::logic_error("alloc: a captured step outgrew the arena it recorded");
    }
    void* p = nullptr;
    check(cudaMallocAsync(&p, n * sizeof(float), stream_->s), "cudaMallocAsync");
    if (p == bf16_src_) bf16_src_ = nullptr;  // a new tensor at a freed source's address
    auto st = stream_;
    return Tensor(static_cast<float*>(p), n, [st](float* q) { cudaFreeAsync(q, st->s); });
  }
  Tensor upload(std::span<const float> host) override {
    Tensor t = alloc(host.size());
    written(t);
    if (!host.empty())
      check(cudaMemcpyAsync(t.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream_->s), "upload");
    return t;
  }
  Tensor upload_bf16(std::span<const uint16_t> bits, DType dtype) override {
    if (dtype == DType::kF32) {
      std::vector<float> wide(bits.size());
      for (size_t i = 0; i < bits.size(); ++i) wide[i] = codec::bf16_to_float(bits[i]);
      Tensor t = upload(wide);
      check(cudaStreamSynchronize(stream_->s), "upload_bf16");  // `wide` goes out of scope
      return t;
    }
    Tensor t = alloc_weight(bits.size(), dtype);
    bf16_weights_ = true;
    if (!bits.empty())
      check(cudaMemcpyAsync(t.raw(), bits.data(), bits.size_bytes(), cudaMemcpyHostToDevice, stream_->s), "upload_bf16");
    check(cudaStreamSynchronize(stream_->s), "upload_bf16");  // the host buffer is the caller's
    return t;
  }
  Tensor random_weight(size_t n, uint64_t seed, float scale, DType dtype) override {
    Tensor t = alloc_weight(n, dtype);
    written(t);
    bf16_weights_ = bf16_weights_ || dtype == DType::kBF16;
    cuda_ops::fill_dummy(t.raw(), n, dtype == DType::kBF16, seed, scale, stream_->s);
    return t;
  }
  DType default_weight_dtype() const override { return DType::kBF16; }
  std::optional<DeviceMemory> device_memory() const override {
    DeviceMemory m;
    check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo");
    return m;
  }
  void to_host(const Tensor& t, std::span<float> out) override {
    if (out.size() != t.size()) throw std::invalid_argument("to_host: size mismatch");
    // The copy into pageable memory already waits for the queued work: time both.
    const HostProfile::Scope sc(profile_, "to_host wait");
    if (!out.empty())
      check(cudaMemcpyAsync(out.data(), t.data(), out.size_bytes(), cudaMemcpyDeviceToHost, stream_->s), "to_host");
    check(cudaStreamSynchronize(stream_->s), "to_host: cudaStreamSynchronize");
    graph_in_flight_ = false;
  }

  void embed(const Tensor& table, int dim, std::span<const int32_t> ids, Tensor& out) override {
    if (out.size() != ids.size() * static_cast<size_t>(dim)) throw std::invalid_argument("embed: output size mismatch");
    written(out);
    const int32_t* d = graph_input(step_ids_, 0, ids, ints_);
    if (replaying()) return;
    if (table.dtype() == DType::kBF16)
      cuda_ops::embed_bf16(static_cast<const uint16_t*>(table.raw()), dim, d, static_cast<int>(ids.size()), out.data(),
                           stream_->s);
    else
      cuda_ops::embed(table.data(), dim, d, static_cast<int>(ids.size()), out.data(), stream_->s);
  }
  void copy(const Tensor& src, Tensor& dst) override {
    if (src.size() != dst.size()) throw std::invalid_argument("copy: size mismatch");
    written(dst);
    if (replaying()) return;
    check(cudaMemcpyAsync(dst.data(), src.data(), src.size() * sizeof(float), cudaMemcpyDeviceToDevice, stream_->s),
          "copy");
  }
  void matmul(const Tensor& x, int n, int in, const Tensor& w, int out, Tensor& y) override {
    if (x.size() != static_cast<size_t>(n) * in || w.size() != static_cast<size_t>(out) * in ||
        y.size() != static_cast<size_t>(n) * out)
      throw std::invalid_argument("matmul: shape mismatch");
    if (w.dtype() != DType::kBF16) written(y);
    const float one = 1.0f, zero = 0.0f;
    if (w.dtype() == DType::kBF16) {
      // x rounded to BF16 for the tensor cores (a BF16 model's activations are BF16 at every GEMM),
      // products accumulated and written in fp32. The scratch is allocated even when replaying, so the
      // arena hands out the same addresses the captured graph uses.
      // q, k and v (and gate and up) read the same normalised rows: they are converted once, and the
      // copy is reused until an operator writes to x (written()) or the pass ends.
      const uint16_t* xb = bf16_input(x, static_cast<size_t>(n) * in);
      written(y);
      if (replaying()) return;
      const HostProfile::Scope sc(profile_, "gemm enqueue");
      // One row (batch-1 decode): our GEMV (one launch, no split-K reduction; see cuda_gemv.h).
      if (gemv_on_ && cuda_gemv::gemv_applies(n, in, xb, w.raw())) {
        cuda_gemv::gemv_bf16(xb, in, static_cast<const uint16_t*>(w.raw()), out, y.data(), stream_->s);
        return;
      }
      check_blas(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w.raw(), CUDA_R_16BF, in, xb,
                              CUDA_R_16BF, in, &zero, y.data(), CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (BF16)");
      return;
    }
    if (replaying()) return;
    const HostProfile::Scope sc(profile_, "gemm enqueue");
    // Row-major y[n][out] is column-major y^T[out][n] = W[out][in] x^T, W read transposed.
    check_blas(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w.data(), in, x.data(), in, &zero,
                           y.data(), out),
               "cublasSgemm");
  }
  // One row through fused weights: a single GEMV over the concatenated matrix writes the outputs back
  // to back. Each output row's sum is the same computation as in its own GEMV, so the result is
  // identical; the small projections (k, v) no longer run on a fraction of the SMs.
  void matmul_group(const Tensor& x, int n, int in, std::span<const Projection> ps) override {
    // Only where the product then runs through our GEMV (rows of in % 8 == 0, 16-byte aligned: the BF16
    // copy of x always is), whose rows do not depend on how many there are; cuBLAS may pick another
    // kernel for the wider shape. With MINIMAKV_CUDA_GEMV=0 (an A/B of the two) cuBLAS takes the fused
    // shape, and its rounding may then differ from separate products.
    const bool exact =
        !gemv_on_ || (!ps.empty() && in % 8 == 0 && reinterpret_cast<uintptr_t>(ps[0].w->raw()) % 16 == 0);
    const size_t total = exact ? fused_group_rows(n, in, ps) : 0;
    if (total == 0) {
      Backend::matmul_group(x, n, in, ps);
      return;
    }
    const Tensor w(ps[0].w->raw(), total * in, DType::kBF16, [](void*) {});
    Tensor y(ps[0].y->data(), total, [](float*) {});
    matmul(x, n, in, w, static_cast<int>(total), y);
    for (const Projection& p : ps) written(*p.y);  // y only names the first output's address
  }
  // One row through fused gate/up weights: our GEMV with the SwiGLU as its epilogue (one launch instead
  // of two; the same bits, cuda_gemv.h). MINIMAKV_CUDA_GEMV_SWIGLU=0 keeps the two launches (an A/B).
  void matmul_swiglu(const Tensor& x, int n, int in, std::span<const Projection> gate_up, Tensor& out) override {
    const int inter = gate_up.size() == 2 ? gate_up[0].out : 0;
    // Both halves of width inter, back to back in one weight (fused_group_rows counts them).
    const bool fused_shape = swiglu_gemv_on_ && gemv_on_ && n == 1 && inter > 0 &&
                             out.size() == static_cast<size_t>(inter) &&
                             fused_group_rows(n, in, gate_up) == 2 * static_cast<size_t>(inter);
    if (fused_shape) {
      // As matmul then swiglu: x's BF16 copy (reused when the norm wrote it), then the output's.
      const uint16_t* xb = bf16_input(x, static_cast<size_t>(in));
      if (cuda_gemv::gemv_applies(n, in, xb, gate_up[0].w->raw())) {
        written(out);
        Tensor ob = alloc((out.size() + 1) / 2);
        if (!replaying())
          cuda_gemv::gemv_swiglu_bf16(xb, in, static_cast<const uint16_t*>(gate_up[0].w->raw()), inter, out.data(),
                                      reinterpret_cast<uint16_t*>(ob.raw()), stream_->s);
        hold_bf16_input(out, out.size(), std::move(ob));
        return;
      }
    }
    Backend::matmul_swiglu(x, n, in, gate_up, out);  // reuses the BF16 copy made above
  }
  Tensor fuse_weights(std::span<Tensor* const> ws) override {
    if (ws.empty()) return {};
    size_t total = 0;
    for (const Tensor* w : ws) {
      if (w->dtype() != ws[0]->dtype()) throw std::invalid_argument("fuse_weights: weights of different dtypes");
      total += w->size();
    }
    Tensor all = alloc_weight(total, ws[0]->dtype());
    size_t at = 0;
    for (Tensor* w : ws) {
      if (w->bytes())
        check(cudaMemcpyAsync(static_cast<uint8_t*>(all.raw()) + at * dtype_bytes(all.dtype()), w->raw(), w->bytes(),
                              cudaMemcpyDeviceToDevice, stream_->s),
              "fuse_weights");
      const size_t n = w->size();
      *w = all.slice(at, n);  // the old allocation is freed in stream order, after the copy
      at += n;
    }
    return all;
  }
  void rmsnorm(Tensor& x, size_t rows, int dim, const Tensor& w, float eps) override {
    if (rows * static_cast<size_t>(dim) > x.size()) throw std::invalid_argument("rmsnorm: shape mismatch");
    written(x);
    if (replaying()) return;
    cuda_ops::rmsnorm(x.data(), rows, dim, w.data(), eps, stream_->s);
  }
  void rope(Tensor& x, int heads, std::span<const SeqRows> seqs) override {
    const std::vector<uint32_t> pos = positions_of(seqs);
    if (pos.size() * static_cast<size_t>(heads) * head_dim_ > x.size())
      throw std::invalid_argument("rope: shape mismatch");
    written(x);
    const uint32_t* d = device_positions(pos);
    if (replaying()) return;
    cuda_ops::rope(x.data(), static_cast<int>(pos.size()), heads, head_dim_, d, inv_freq_.get(), stream_->s);
  }
  void norm_rope(Tensor& x, int heads, int head_dim, const Tensor& w, float eps, std::span<const SeqRows> seqs) override {
    const std::vector<uint32_t> pos = positions_of(seqs);
    if (head_dim != head_dim_ || pos.size() * static_cast<size_t>(heads) * head_dim_ > x.size() ||
        w.size() != static_cast<size_t>(head_dim))
      throw std::invalid_argument("norm_rope: shape mismatch");
    written(x);
    const uint32_t* d = device_positions(pos);
    if (replaying()) return;
    cuda_ops::norm_rope(x.data(), static_cast<int>(pos.size()), heads, head_dim_, w.data(), eps, d, inv_freq_.get(),
                        stream_->s);
  }
  void norm_rope_qk(Tensor& q, int q_heads, const Tensor& wq, Tensor& k, int kv_heads, const Tensor& wk, int head_dim,
                    float eps, std::span<const SeqRows> seqs) override {
    const std::vector<uint32_t> pos = positions_of(seqs);
    const size_t hd = static_cast<size_t>(head_dim_);
    if (head_dim != head_dim_ || pos.size() * static_cast<size_t>(q_heads) * hd > q.size() ||
        pos.size() * static_cast<size_t>(kv_heads) * hd > k.size() || wq.size() != hd || wk.size() != hd)
      throw std::invalid_argument("norm_rope_qk: shape mismatch");
    written(q);
    written(k);
    const uint32_t* d = device_positions(pos);
    if (replaying()) return;
    cuda_ops::norm_rope_qk(q.data(), q_heads, wq.data(), k.data(), kv_heads, wk.data(), static_cast<int>(pos.size()),
                           head_dim_, eps, d, inv_freq_.get(), stream_->s);
  }
  void add_rmsnorm(Tensor& x, const Tensor* y, Tensor& h, size_t rows, int dim, const Tensor& w, float eps) override {
    const size_t elems = rows * static_cast<size_t>(dim);
    if (elems > x.size() || h.size() != x.size() || (y && y->size() != x.size()) || w.size() != static_cast<size_t>(dim))
      throw std::invalid_argument("add_rmsnorm: shape mismatch");
    written(x);
    written(h);
    // With BF16 weights the norm's output feeds GEMMs: its BF16 copy is written in the same pass.
    Tensor hb = bf16_weights_ ? alloc((elems + 1) / 2) : Tensor();
    if (!replaying())
      cuda_ops::add_rmsnorm(x.data(), y ? y->data() : nullptr, h.data(), reinterpret_cast<uint16_t*>(hb.raw()), rows,
                            dim, w.data(), eps, stream_->s);
    if (bf16_weights_) hold_bf16_input(h, elems, std::move(hb));
  }
  // Positions of the pass's rows, sequence by sequence.
  static std::vector<uint32_t> positions_of(std::span<const SeqRows> seqs) {
    std::vector<uint32_t> pos;
    for (const SeqRows& s : seqs)
      for (int t = 0; t < s.n; ++t) pos.push_back(s.first + static_cast<uint32_t>(t));
    return pos;
  }
  // The positions on the device. Every RoPE call of a forward pass uses the same positions: they are
  // uploaded once per pass.
  const uint32_t* device_positions(const std::vector<uint32_t>& pos) {
    const uint32_t* d = nullptr;
    if (on_graph()) {
      if (!step_positions_written_) graph_input(step_positions_, 0, std::span<const uint32_t>(pos), positions_);
      step_positions_written_ = true;
      d = step_positions_.write(0, {});
    } else {
      if (pos != last_positions_) {
        positions_.write(pos, stream_->s);
        last_positions_ = pos;
      }
      d = positions_.reserve(pos.size());
    }
    return d;
  }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override {
    if (gate.size() != out.size() || up.size() != out.size()) throw std::invalid_argument("swiglu: size mismatch");
    written(out);
    Tensor ob = bf16_weights_ ? alloc((out.size() + 1) / 2) : Tensor();  // the down projection's input
    if (!replaying())
      cuda_ops::swiglu(gate.data(), up.data(), out.data(), reinterpret_cast<uint16_t*>(ob.raw()), out.size(), stream_->s);
    if (bf16_weights_) hold_bf16_input(out, out.size(), std::move(ob));
  }
  void add(Tensor& x, const Tensor& y) override {
    if (x.size() != y.size()) throw std::invalid_argument("add: size mismatch");
    written(x);
    if (replaying()) return;
    cuda_ops::add(x.data(), y.data(), x.size(), stream_->s);
  }
  void gather_rows(const Tensor& x, int dim, std::span<const int> rows, Tensor& out) override {
    if (out.size() != rows.size() * static_cast<size_t>(dim)) throw std::invalid_argument("gather_rows: size mismatch");
    written(out);
    std::vector<int32_t> r(rows.begin(), rows.end());
    const int32_t* d = graph_input(step_rows_, 0, std::span<const int32_t>(r), ints_);
    if (replaying()) return;
    cuda_ops::gather_rows(x.data(), dim, d, static_cast<int>(r.size()), out.data(), stream_->s);
  }

  std::unique_ptr<cache::KvStore> make_store(const cache::StoreConfig& cfg) override {
    return std::make_unique<cache::KvStore>(cfg, std::make_unique<DevicePageStorage>(cfg, stream_));
  }

  void attention(cache::ForwardStep& step, int layer, std::span<const SeqRows> seqs, const Tensor& q, const Tensor& k,
                 const Tensor& v, Tensor& out, int q_heads, std::vector<std::vector<float>>* page_scores,
                 float score_weight) override;

  AttentionStats attention_stats() const override { return paged_->stats(); }

  void begin_forward(cache::ForwardStep& step, std::span<const SeqRows> seqs, bool page_scores) override;
  void end_forward(bool completed) override;
  void set_graphs(bool on) override { graphs_on_ = on; }
  ForwardStats forward_stats() const override { return forward_stats_; }

 private:
  // The BF16 copy of a GEMM input (see matmul) is stale once its source is written.
  void written(const Tensor& t) {
    if (t.raw() == bf16_src_) bf16_src_ = nullptr;
  }
  // `copy` holds src's first `elems` values in BF16 (written by the kernel that wrote src).
  void hold_bf16_input(const Tensor& src, size_t elems, Tensor copy) {
    bf16_x_ = std::move(copy);
    bf16_src_ = src.raw();
    bf16_elems_ = elems;
  }
  // The BF16 copy of x's first `elems` values a BF16 GEMM reads: the held one when it copies x, else a
  // new one converted now. Allocated even when replaying, so the arena hands out the captured addresses.
  const uint16_t* bf16_input(const Tensor& x, size_t elems) {
    if (bf16_src_ != x.raw() || bf16_elems_ != elems) {
      hold_bf16_input(x, elems, alloc((elems + 1) / 2));
      if (!replaying()) cuda_ops::to_bf16(x.data(), static_cast<uint16_t*>(bf16_x_.raw()), elems, stream_->s);
    }
    return static_cast<const uint16_t*>(bf16_x_.raw());
  }
  void forget_bf16_input() {
    bf16_src_ = nullptr;
    bf16_x_ = Tensor();
  }
  // Weights live for the model's lifetime: plain device allocations, never the step arena.
  Tensor alloc_weight(size_t n, DType dtype) {
    void* p = nullptr;
    if (n) check(cudaMallocAsync(&p, n * dtype_bytes(dtype), stream_->s), "cudaMallocAsync (weights)");
    auto st = stream_;
    return Tensor(p, n, dtype, [st](void* q) {
      if (q) cudaFreeAsync(q, st->s);
    });
  }
  // kEager: launch as called. kRecord: eager, tensors from the arena (measuring it). kCapture: launches
  // captured into segments_, inputs through the step buffers. kReplay: host bookkeeping only, each
  // segment launched when its host work is done.
  enum class Mode { kEager, kRecord, kCapture, kReplay };
  // Ends the step's current segment (after a layer's attention): captured and launched, or replayed.
  void next_segment();
  // Starts capturing segment i and marks where it begins (segment_begun_).
  void begin_segment_capture(size_t i);
  void launch_segment(size_t i);
  bool replaying() const { return mode_ == Mode::kReplay; }
  // The pass's launches go into (or come from) graphs, its inputs through the step buffers.
  bool on_graph() const { return mode_ == Mode::kCapture || mode_ == Mode::kReplay; }
  // Everything a captured step's launches depend on besides the step buffers (covered by epoch_).
  struct StepKey {
    int rows = 0;
    std::array<const void*, codec::kNumPageFormats> pools{};
    const void* signs = nullptr;
    int tokens_per_page = 0, layers = 0;
    cache::PageFormat append_format = cache::PageFormat::kFp8;
    bool operator==(const StepKey&) const = default;
  };
  // Host values of a step: through the step buffer `in` at `at` when capturing or replaying (the
  // capture queues the copy), else through the eager scratch. Returns the device address.
  template <typename T>
  const T* graph_input(StepInput<T>& in, size_t at, std::span<const T> host, DeviceScratch<T>& eager) {
    if (!on_graph()) return eager.write(host, stream_->s);
    T* d = in.write(at, host);
    if (mode_ == Mode::kCapture) in.upload(at, host.size(), stream_->s);
    return d;
  }
  // attention() without its BF16 output copy's bookkeeping; out_bf16: where the kernels write that copy.
  void attend(cache::ForwardStep& step, int layer, std::span<const SeqRows> seqs, const Tensor& q, const Tensor& k,
              const Tensor& v, Tensor& out, uint16_t* out_bf16, int q_heads,
              std::vector<std::vector<float>>* page_scores, float score_weight);
  void collect_page_scores(std::vector<std::vector<float>>& page_scores) override {
    paged_->collect_page_scores(page_scores);
  }

  const void* bf16_src_ = nullptr;  // the fp32 tensor bf16_x_ holds a BF16 copy of, if any
  size_t bf16_elems_ = 0;
  Tensor bf16_x_;
  bool bf16_weights_ = false;  // some weight is BF16: norms and SwiGLU also write BF16 copies of their outputs
  HostProfile profile_;  // destroyed last: prints after everything else has finished
  std::shared_ptr<Stream> stream_;
  cublasHandle_t blas_ = nullptr;
  std::string name_;
  int head_dim_ = 0;
  cuda::DeviceArray<float> inv_freq_;
  DeviceScratch<int32_t> ints_;
  DeviceScratch<uint32_t> positions_;
  std::vector<uint32_t> last_positions_;  // what positions_ holds
  DeviceScratch<cuda::AppendSlot> slots_;
  std::unique_ptr<CudaPagedAttention> paged_;  // plans, workspaces, page scores, stats
  // Graphs of decode steps.
  bool graphs_on_ = true;
  bool gemv_on_ = true;  // one-row BF16 products through our GEMV (cuda_gemv.h)
  bool swiglu_gemv_on_ = true;  // and the gate/up pair with its SwiGLU as one launch (matmul_swiglu)
  int q_heads_ = 0;
  cuda::DeviceArray<uint8_t> blas_ws_;
  Mode mode_ = Mode::kEager;
  StepKey recorded_key_, graph_key_;
  uint64_t epoch_ = 0, graph_epoch_ = 0;  // bumped whenever a step buffer is reallocated
  bool graph_in_flight_ = false, step_positions_written_ = false;
  StepArena arena_;
  StepInput<int32_t> step_ids_, step_rows_;
  StepInput<uint32_t> step_positions_;
  StepInput<cuda::AppendSlot> step_slots_;  // [layer][row]
  std::vector<StepGraph> segments_;  // [layer] up to its attention, then the rest of the pass
  size_t segment_ = 0;               // the one being captured or replayed
  std::optional<Event> segment_begun_;  // recorded where the segment being captured begins
  bool graph_ready_ = false;         // segments_ hold a complete step for graph_key_ at graph_epoch_
  ForwardStats forward_stats_;
};

void CudaBackend::attention(cache::ForwardStep& step, int layer, std::span<const SeqRows> seqs, const Tensor& q,
                            const Tensor& k, const Tensor& v, Tensor& out, int q_heads,
                            std::vector<std::vector<float>>* page_scores, float score_weight) {
  if (!dynamic_cast<DevicePageStorage*>(&step.storage()))
    throw std::invalid_argument("attention: the store's pages are not in GPU memory (make it with Model::make_store)");
  written(out);
  // With BF16 weights the output feeds the o projection's GEMM: the kernels that write it write its BF16
  // copy too (allocated in every mode, so that a replayed step's arena hands out its graph's address).
  Tensor ob = bf16_weights_ ? alloc((out.size() + 1) / 2) : Tensor();
  attend(step, layer, seqs, q, k, v, out, static_cast<uint16_t*>(ob.raw()), q_heads, page_scores, score_weight);
  if (bf16_weights_) hold_bf16_input(out, out.size(), std::move(ob));
}

void CudaBackend::attend(cache::ForwardStep& step, int layer, std::span<const SeqRows> seqs, const Tensor& q,
                         const Tensor& k, const Tensor& v, Tensor& out, uint16_t* out_bf16, int q_heads,
                         std::vector<std::vector<float>>* page_scores, float score_weight) {
  auto* dev = static_cast<DevicePageStorage*>(&step.storage());
  const auto& sc = step.config();
  const auto views = dev->pool().views();

  HostProfile::Scope all(profile_, "attention");
  // 1. Quantize the chunk's K/V into its pages.
  std::optional<HostProfile::Scope> phase;
  phase.emplace(profile_, "att slots");
  std::vector<cuda::AppendSlot> slots;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (const cache::WriteSlot& w : step.write_slots(i, layer)) slots.push_back({w.page.id, w.token});
  const size_t n_rows = slots.size();
  const auto* slots_d =
      graph_input(step_slots_, static_cast<size_t>(layer) * n_rows, std::span<const cuda::AppendSlot>(slots), slots_);
  if (!replaying())
    cuda::append_tokens(views, step.append_format(), dev->geometry(), k.data(), v.data(), slots_d,
                        static_cast<int>(slots.size()), stream_->s);

  phase.reset();
  if (std::any_of(seqs.begin(), seqs.end(), [](const SeqRows& s) { return s.n > 1; })) {
    paged_->prefill(step, *dev, layer, seqs, attend_buffers(q, *dev, layer, out, out_bf16), q_heads, page_scores,
                    score_weight);
    return;
  }
  // 2. Decode.
  std::vector<cache::PagedView> views_read;  // pinned until the launch is queued (see the ordering contract)
  std::vector<size_t> pages_seen;           // per sequence: the pages its last row sees
  const cuda::DecodePlan& plan =
      paged_->decode_plan(step, layer, seqs, q_heads, page_scores != nullptr, views_read, pages_seen);
  if (on_graph()) {
    // Each layer stages into its own workspace: the graph copies every layer's plan when it runs.
    cuda::DecodeWorkspace& ws = paged_->step_workspace(layer);
    if (ws.shape().q_heads != q_heads) throw std::logic_error("attention: a captured step changed its head count");
    phase.emplace(profile_, "att stage");
    ws.stage(plan, views);
    phase.reset();  // the segment's graph launch below is timed as its own phase
    // The plan copy needs nothing the segment computes: it becomes a root of the segment's graph, run
    // beside the layer's GEMVs instead of between the K/V append and the attention kernels.
    if (mode_ == Mode::kCapture)
      ws.launch(views, attend_buffers(q, *dev, layer, out, out_bf16), stream_->s,
                cuda::DecodeWorkspace::LaunchSize::kCapacity, cuda::overlap_allowed() ? segment_begun_->e : nullptr);
    paged_->record(ws.stats());
    next_segment();  // queues the layer's launches while its pins are held
    return;
  }
  paged_->decode(views, sc, layer, plan, attend_buffers(q, *dev, layer, out, out_bf16), q_heads, pages_seen,
                 page_scores != nullptr, score_weight);
  views_read.clear();
}

void CudaBackend::begin_forward(cache::ForwardStep& step, std::span<const SeqRows> seqs, bool page_scores) {
  if (graph_in_flight_) {  // its pinned inputs are about to be rewritten
    check(cudaStreamSynchronize(stream_->s), "begin_forward");
    graph_in_flight_ = false;
  }
  forget_bf16_input();  // its arena or its source may be reused by this pass
  mode_ = Mode::kEager;
  step_positions_written_ = false;
  auto* dev = dynamic_cast<DevicePageStorage*>(&step.storage());
  const bool decode = std::all_of(seqs.begin(), seqs.end(), [](const SeqRows& s) { return s.n == 1; });
  if (!graphs_on_ || page_scores || !decode || !dev || seqs.empty()) {
    ++forward_stats_.eager;
    return;
  }
  const auto& sc = step.config();
  const auto views = dev->pool().views();
  StepKey key{static_cast<int>(seqs.size()), {}, dev->signs(0), sc.tokens_per_page, sc.layers, step.append_format()};
  for (int f = 0; f < codec::kNumPageFormats; ++f) key.pools[f] = views.base[f];
  // Size every step buffer for this step before anything is queued: a graph's launches cannot grow them.
  const size_t n = seqs.size(), layers = static_cast<size_t>(sc.layers);
  bool grew = step_ids_.ensure(n) | step_rows_.ensure(n) | step_positions_.ensure(n) | step_slots_.ensure(n * layers);
  const cuda::DecodeShape shape{q_heads_, sc.kv_heads, sc.head_dim, sc.tokens_per_page, 0.0f};
  std::vector<uint32_t> tokens;
  int entries = 0;
  for (const SeqRows& s : seqs) {
    tokens.push_back(s.first + 1);
    entries += static_cast<int>(s.first / static_cast<uint32_t>(sc.tokens_per_page)) + 1;
  }
  const int splits = cuda::decode_split_bound(tokens, shape);
  grew |= paged_->size_step_workspaces(shape, layers, static_cast<int>(n), splits, entries);
  if (grew) {
    check(cudaDeviceSynchronize(), "begin_forward");  // new buffers were cleared on the legacy stream
    ++epoch_;
  }
  arena_.reset();
  if (!(key == recorded_key_) || arena_.capacity_bytes() < arena_.peak_bytes()) {
    mode_ = Mode::kRecord;
    recorded_key_ = key;
  } else if (!graph_ready_ || !(graph_key_ == key) || graph_epoch_ != epoch_) {
    mode_ = Mode::kCapture;
    stream_->store_op_captured = false;
    graph_ready_ = false;
    segments_.clear();
    segments_.resize(layers + 1);
    segment_ = 0;
    begin_segment_capture(0);
    graph_key_ = key;
    graph_epoch_ = epoch_;
  } else {
    mode_ = Mode::kReplay;
    segment_ = 0;
  }
}

void CudaBackend::begin_segment_capture(size_t i) {
  segments_.at(i).begin_capture(stream_->s);
  check(cudaEventRecord(segment_begun_->e, stream_->s), "segment capture: begin event");
}

void CudaBackend::launch_segment(size_t i) {
  const HostProfile::Scope sc(profile_, "graph launch");
  segments_.at(i).launch(stream_->s);
  graph_in_flight_ = true;
}

void CudaBackend::next_segment() {
  if (segment_ + 1 >= segments_.size()) throw std::logic_error("attention: more layers than the captured step");
  if (mode_ == Mode::kCapture) {
    segments_[segment_].end_capture(stream_->s, true);
    launch_segment(segment_);
    begin_segment_capture(segment_ + 1);
  } else {
    launch_segment(segment_);
  }
  ++segment_;
}

void CudaBackend::end_forward(bool completed) {
  const Mode mode = std::exchange(mode_, Mode::kEager);
  if (!completed) {
    if (mode == Mode::kCapture) {
      segments_[segment_].end_capture(stream_->s, false);
      graph_ready_ = false;
    }
    if (mode != Mode::kEager) recorded_key_ = {};
    return;
  }
  if ((mode == Mode::kCapture || mode == Mode::kReplay) && segment_ + 1 != segments_.size()) {
    if (mode == Mode::kCapture) segments_[segment_].end_capture(stream_->s, false);
    graph_ready_ = false;
    throw std::logic_error("end_forward: the pass ran fewer layers than its step shape");
  }
  switch (mode) {
    case Mode::kEager:
      break;
    case Mode::kRecord:
      ++forward_stats_.recorded;
      if (arena_.peak_bytes() > arena_.capacity_bytes()) {
        check(cudaStreamSynchronize(stream_->s), "end_forward");  // the step's kernels may still use the arena
        arena_.grow_to_peak();
        ++epoch_;
      }
      break;
    case Mode::kCapture:
      segments_[segment_].end_capture(stream_->s, true);
      launch_segment(segment_);
      ++forward_stats_.captured;
      graph_ready_ = !stream_->store_op_captured;  // a captured page operation must not run again
      break;
    case Mode::kReplay:
      launch_segment(segment_);
      ++forward_stats_.replayed;
      break;
  }
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const model::ModelConfig& cfg) {
  return std::make_unique<CudaBackend>(cfg);
}

}  // namespace minimakv::backend
