// The CPU backend: host tensors, OpenBLAS GEMMs and the Highway mixed-format attention kernels over the
// store's host pools.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include "minimakv/attention/paged_attention.h"
#include "minimakv/backend/backend.h"
#include "minimakv/backend/cpu_ops.h"
#include "bf16_gemv.h"
#include "minimakv/backend/dummy_weights.h"
#include "minimakv/codec/half.h"

namespace minimakv::backend {

namespace {

std::span<float> all(const Tensor& t) {
  return {t.data(), t.size()};
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(const model::ModelConfig& cfg, unsigned threads)
      : rope_(cfg), head_dim_(static_cast<int>(cfg.head_dim)),
        pool_(threads ? threads : std::max(1u, std::thread::hardware_concurrency())) {}

  Device device() const override { return Device::kCpu; }
  std::string describe() const override { return "cpu, " + gemm_kernels(); }

  Tensor alloc(size_t n) override {
    return Tensor(new float[n], n, [](float* p) { delete[] p; });
  }
  static Tensor alloc_bf16(size_t n) {
    return Tensor(new uint16_t[n], n, DType::kBF16, [](void* p) { delete[] static_cast<uint16_t*>(p); });
  }
  Tensor upload(std::span<const float> host) override {
    Tensor t = alloc(host.size());
    std::copy(host.begin(), host.end(), t.data());
    return t;
  }
  void to_host(const Tensor& t, std::span<float> out) override {
    if (out.size() != t.size()) throw std::invalid_argument("to_host: size mismatch");
    std::copy_n(t.data(), t.size(), out.data());
  }
  // BF16 weights stay BF16 in host memory when asked (half the RAM; matmul widens them block by block),
  // else they are widened once. The CPU computes in fp32 either way, so the products are the same.
  Tensor upload_bf16(std::span<const uint16_t> bits, DType dtype) override {
    if (dtype == DType::kBF16) {
      Tensor t = alloc_bf16(bits.size());
      std::copy(bits.begin(), bits.end(), static_cast<uint16_t*>(t.raw()));
      return t;
    }
    Tensor t = alloc(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) t.data()[i] = codec::bf16_to_float(bits[i]);
    return t;
  }
  Tensor random_weight(size_t n, uint64_t seed, float scale, DType dtype) override {
    if (dtype == DType::kBF16) {
      Tensor t = alloc_bf16(n);
      auto* b = static_cast<uint16_t*>(t.raw());
      for (size_t i = 0; i < n; ++i) b[i] = codec::float_to_bf16(dummy_weight(seed, i, scale));
      return t;
    }
    Tensor t = alloc(n);
    for (size_t i = 0; i < n; ++i) t.data()[i] = dummy_weight(seed, i, scale);
    return t;
  }

  void embed(const Tensor& table, int dim, std::span<const int32_t> ids, Tensor& out) override {
    const size_t d = static_cast<size_t>(dim);
    if (out.size() != ids.size() * d) throw std::invalid_argument("embed: output size mismatch");
    for (size_t r = 0; r < ids.size(); ++r) {
      if (ids[r] < 0 || static_cast<size_t>(ids[r] + 1) * d > table.size())
        throw std::invalid_argument("embed: token id out of range");
      if (table.dtype() == DType::kBF16) {
        const auto* row = static_cast<const uint16_t*>(table.raw()) + static_cast<size_t>(ids[r]) * d;
        for (size_t i = 0; i < d; ++i) out.data()[r * d + i] = codec::bf16_to_float(row[i]);
      } else {
        std::copy_n(table.data() + static_cast<size_t>(ids[r]) * d, d, out.data() + r * d);
      }
    }
  }
  void copy(const Tensor& src, Tensor& dst) override {
    if (src.size() != dst.size()) throw std::invalid_argument("copy: size mismatch");
    std::copy_n(src.data(), src.size(), dst.data());
  }
  void matmul(const Tensor& x, int n, int in, const Tensor& w, int out, Tensor& y) override {
    if (w.dtype() != DType::kBF16) return backend::matmul(all(x), n, in, all(w), out, all(y));
    const std::span<const uint16_t> wb(static_cast<const uint16_t*>(w.raw()), w.size());
    if (n > detail::kMaxGemvRows) return backend::matmul_bf16(all(x), n, in, wb, out, all(y));
    // A decode step's few rows: each BF16 row of W is read once for all of them, widened in registers,
    // output rows split across the backend's threads (a GEMV is bound by the bytes of W).
    if (x.size() != static_cast<size_t>(n) * in || w.size() != static_cast<size_t>(out) * in ||
        y.size() != static_cast<size_t>(n) * out)
      throw std::invalid_argument("matmul: shape mismatch");
    constexpr size_t kRowsPerTask = 64;
    const size_t tasks = (static_cast<size_t>(out) + kRowsPerTask - 1) / kRowsPerTask;
    pool_.parallel_for(tasks, [&](size_t t) {
      detail::bf16_gemv_rows(x.data(), n, in, wb.data(), t * kRowsPerTask,
                             std::min(static_cast<size_t>(out), (t + 1) * kRowsPerTask), out, y.data());
    });
  }
  // One row through fused BF16 weights: one GEMV over the concatenated matrix, one dispatch to the
  // threads where there were three (q, k, v) or two (gate, up). Each output row is the same sum as in
  // its own GEMV (the threads split output rows), so the result is identical.
  void matmul_group(const Tensor& x, int n, int in, std::span<const Projection> ps) override {
    const size_t total = fused_group_rows(n, in, ps);
    if (total == 0) return Backend::matmul_group(x, n, in, ps);
    const Tensor w(ps[0].w->raw(), total * in, DType::kBF16, [](void*) {});
    Tensor y(ps[0].y->data(), total, [](float*) {});
    matmul(x, n, in, w, static_cast<int>(total), y);
  }
  // BF16 weights only (the GEMV above); fp32 weights go through SGEMM one projection at a time.
  Tensor fuse_weights(std::span<Tensor* const> ws) override {
    if (ws.empty() || std::any_of(ws.begin(), ws.end(), [](const Tensor* w) { return w->dtype() != DType::kBF16; }))
      return {};
    size_t total = 0;
    for (const Tensor* w : ws) total += w->size();
    Tensor all = alloc_bf16(total);
    size_t at = 0;
    for (Tensor* w : ws) {
      const size_t n = w->size();
      std::copy_n(static_cast<const uint16_t*>(w->raw()), n, static_cast<uint16_t*>(all.raw()) + at);
      *w = all.slice(at, n);
      at += n;
    }
    return all;
  }
  void rmsnorm(Tensor& x, size_t rows, int dim, const Tensor& w, float eps) override {
    backend::rmsnorm(all(x).first(rows * static_cast<size_t>(dim)), dim, all(w), eps);
  }
  void rope(Tensor& x, int heads, std::span<const SeqRows> seqs) override {
    const size_t row = static_cast<size_t>(heads) * head_dim_;
    for (const SeqRows& s : seqs)
      rope_.apply(all(x).subspan(static_cast<size_t>(s.row) * row, static_cast<size_t>(s.n) * row), s.n, heads,
                  s.first);
  }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override {
    backend::swiglu(all(gate), all(up), all(out));
  }
  void add(Tensor& x, const Tensor& y) override {
    if (x.size() != y.size()) throw std::invalid_argument("add: size mismatch");
    for (size_t i = 0; i < x.size(); ++i) x.data()[i] += y.data()[i];
  }
  void gather_rows(const Tensor& x, int dim, std::span<const int> rows, Tensor& out) override {
    const size_t d = static_cast<size_t>(dim);
    for (size_t i = 0; i < rows.size(); ++i)
      std::copy_n(x.data() + static_cast<size_t>(rows[i]) * d, d, out.data() + i * d);
  }

  std::unique_ptr<cache::KvStore> make_store(const cache::StoreConfig& cfg) override {
    return std::make_unique<cache::KvStore>(cfg);
  }

  void attention(cache::ForwardStep& step, int layer, std::span<const SeqRows> seqs, const Tensor& q, const Tensor& k,
                 const Tensor& v, Tensor& out, int q_heads, std::vector<std::vector<float>>* page_scores,
                 float score_weight) override {
    auto* host = dynamic_cast<cache::HostPageStorage*>(&step.storage());
    if (!host) throw std::invalid_argument("attention: the store's pages are not in host memory");
    const auto& sc = step.config();
    const size_t qrow = static_cast<size_t>(q_heads) * sc.head_dim,
                 kvrow = static_cast<size_t>(sc.kv_heads) * sc.head_dim;
    attention::PagePartials partials;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const SeqRows& s = seqs[i];
      const auto r = static_cast<size_t>(s.row), m = static_cast<size_t>(s.n);
      host->write_tokens(step.write_slots(i, layer), all(k).subspan(r * kvrow, m * kvrow),
                         all(v).subspan(r * kvrow, m * kvrow));
      {
        const auto view = step.view(i, layer);
        const auto in = attention::layer_input(*host, view, q_heads);
        attention::attend(in, {all(q).subspan(r * qrow, m * qrow), s.n, s.first}, all(out).subspan(r * qrow, m * qrow),
                          page_scores ? &partials : nullptr, {0, &pool_});
      }
      if (page_scores) add_page_scores((*page_scores)[i], attention::page_scores(partials), score_weight);
    }
  }

 private:
  Rope rope_;
  int head_dim_;
  // Attention's and the BF16 GEMV's threads (OpenBLAS has its own). One forward pass at a time uses it.
  attention::ThreadPool pool_;
};

}  // namespace

size_t dtype_bytes(DType t) {
  return t == DType::kBF16 ? 2 : 4;
}

const char* to_string(DType t) {
  return t == DType::kBF16 ? "bf16" : "fp32";
}

size_t fused_group_rows(int n, int in, std::span<const Projection> ps) {
  if (n != 1) return 0;
  size_t total = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    const Projection& p = ps[i];
    const bool fits = p.w->dtype() == DType::kBF16 && p.w->size() == static_cast<size_t>(p.out) * in &&
                      p.y->size() == static_cast<size_t>(p.out) &&
                      (i == 0 || (p.w->raw() == static_cast<uint8_t*>(ps[i - 1].w->raw()) + ps[i - 1].w->bytes() &&
                                  p.y->data() == ps[i - 1].y->data() + ps[i - 1].out));
    if (!fits) return 0;
    total += static_cast<size_t>(p.out);
  }
  return total;
}

Tensor Tensor::slice(size_t first, size_t n) const {
  if (first > n_ || n > n_ - first) throw std::out_of_range("Tensor::slice: past the tensor's end");
  return Tensor(static_cast<uint8_t*>(raw()) + first * dtype_bytes(dtype_), n, dtype_, [](void*) {});
}

const char* to_string(Device d) {
  return d == Device::kCuda ? "cuda" : "cpu";
}

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  throw std::invalid_argument("unknown device '" + std::string(name) + "' (expected cpu or cuda)");
}

void add_page_scores(std::vector<float>& acc, std::span<const float> scores, float weight) {
  if (acc.size() < scores.size()) acc.resize(scores.size(), 0.0f);
  for (size_t p = 0; p < scores.size(); ++p) acc[p] += scores[p] * weight;
}

std::unique_ptr<Backend> make_cpu_backend(const model::ModelConfig& cfg, unsigned threads) {
  return std::make_unique<CpuBackend>(cfg, threads);
}

std::unique_ptr<Backend> make_backend(Device d, const model::ModelConfig& cfg, unsigned cpu_threads) {
  return d == Device::kCuda ? make_cuda_backend(cfg) : make_cpu_backend(cfg, cpu_threads);
}

#ifndef MINIMAKV_WITH_CUDA
std::unique_ptr<Backend> make_cuda_backend(const model::ModelConfig&) {
  throw std::runtime_error("this build of minimakv has no CUDA backend (configure with -DMINIMAKV_CUDA=ON)");
}
#endif

}  // namespace minimakv::backend
