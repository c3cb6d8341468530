#include "cuda_paged_attention.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>

namespace minimakv::backend {

namespace {

using cuda::check;

// Whether two shapes give the same workspace layout (the softmax scale is not part of it).
bool same_geometry(const cuda::DecodeShape& a, const cuda::DecodeShape& b) {
  return a.q_heads == b.q_heads && a.kv_heads == b.kv_heads && a.head_dim == b.head_dim &&
         a.tokens_per_page == b.tokens_per_page;
}

// Whether `ws` exists for this shape and holds a plan of these sizes.
bool holds(const std::unique_ptr<cuda::DecodeWorkspace>& ws, const cuda::DecodeShape& shape, int batch, int splits,
           int entries) {
  return ws && same_geometry(ws->shape(), shape) && batch <= ws->max_batch() && splits <= ws->max_splits() &&
         entries <= ws->max_entries();
}

}  // namespace

CudaPagedAttention::CudaPagedAttention(std::shared_ptr<Stream> stream, HostProfile& profile)
    : stream_(std::move(stream)), profile_(profile) {
  for (auto& e : plan_consumed_) {
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(e, stream_->s), "cudaEventRecord");
  }
}

CudaPagedAttention::~CudaPagedAttention() {
  cudaStreamSynchronize(stream_->s);
  for (auto& e : plan_consumed_) cudaEventDestroy(e);
}

void CudaPagedAttention::request_page_scores(cuda::AttentionBuffers& io, size_t merged_rows, size_t partials, int layer,
                                             const std::vector<size_t>& pages, float weight) {
  io.m = merged_m_.reserve(merged_rows);
  io.l = merged_l_.reserve(merged_rows);
  io.page_m = page_m_.reserve(partials);
  io.page_l = page_l_.reserve(partials);
  size_t total = 0;
  for (size_t n : pages) total += n;
  if (layer == 0) {  // a forward pass starts: zero the sums
    score_pages_ = pages;
    check(cudaMemsetAsync(score_acc_.reserve(total), 0, total * sizeof(float), stream_->s), "score sums");
  } else if (pages != score_pages_) {
    throw std::logic_error("attention: page scores of one forward pass must cover the same pages in every layer");
  }
  io.score_acc = score_acc_.reserve(total);
  io.score_weight = weight;
}

void CudaPagedAttention::collect_page_scores(std::vector<std::vector<float>>& page_scores) {
  if (score_pages_.size() != page_scores.size())
    throw std::logic_error("collect_page_scores: no page scores of this forward pass on the device");
  size_t total = 0;
  for (size_t n : score_pages_) total += n;
  std::vector<float> sums(total);
  check(cudaMemcpyAsync(sums.data(), score_acc_.reserve(total), total * sizeof(float), cudaMemcpyDeviceToHost,
                        stream_->s),
        "score sums");
  check(cudaStreamSynchronize(stream_->s), "score sums");
  size_t at = 0;
  for (size_t i = 0; i < score_pages_.size(); ++i) {
    add_page_scores(page_scores[i], std::span<const float>(sums).subspan(at, score_pages_[i]), 1.0f);
    at += score_pages_[i];
  }
  score_pages_.clear();
}

void CudaPagedAttention::record(const cuda::DecodeStats& st) {
  ++stats_.calls;
  ++stats_.routes[st.route];
  for (int f = 0; f < codec::kNumPageFormats; ++f) stats_.bytes_read[f] += st.bytes_read[f];
  stats_.dense_shadow_bytes += st.dense_shadow_bytes;
  stats_.fallbacks += st.fallbacks;
}

void CudaPagedAttention::prefill(const cache::ForwardStep& step, const DevicePageStorage& dev, int layer,
                                 std::span<const SeqRows> seqs, cuda::AttentionBuffers io, int q_heads,
                                 std::vector<std::vector<float>>* page_scores, float score_weight) {
  const auto& sc = step.config();
  const uint32_t B = static_cast<uint32_t>(sc.tokens_per_page);
  std::optional<HostProfile::Scope> phase;
  phase.emplace(profile_, "att prefill plan");
  std::vector<cache::PagedView> views;  // pinned until the launch is queued (see the ordering contract)
  std::vector<cuda::PrefillSeq> ps;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqRows& s = seqs[i];
    views.push_back(step.view(i, layer));
    const cache::PagedView& view = views.back();
    const uint32_t last = s.first + static_cast<uint32_t>(s.n) - 1;
    cuda::PrefillSeq p{s.row, s.n, s.first, {}};
    for (uint32_t pg = 0; pg <= last / B; ++pg) {
      const cache::PageEntry e = view.page(pg);
      p.pages.push_back({e.format, e.id, pg == last / B ? last % B + 1 : B});
    }
    ps.push_back(std::move(p));
  }
  const cuda::DecodeShape shape{q_heads, sc.kv_heads, sc.head_dim, sc.tokens_per_page, 0.0f};
  if (!prefill_ws_ || !same_geometry(prefill_shape_, shape)) {
    check(cudaStreamSynchronize(stream_->s), "prefill workspace");  // the old one may still be read
    // MINIMAKV_CUDA_PREFILL=mma|wgmma|tma picks the prefill kernel (A/B runs, docs/benchmarks.md).
    const char* k = std::getenv("MINIMAKV_CUDA_PREFILL");
    prefill_ws_ = std::make_unique<cuda::PrefillWorkspace>(
        shape, k ? cuda::prefill_kernel_from_string(k) : cuda::PrefillKernel::kAuto);
    prefill_shape_ = shape;
  }
  const auto plan = cuda::make_prefill_plan(ps, shape, prefill_ws_->tiling());
  phase.reset();
  phase.emplace(profile_, "att prefill launch");
  const size_t qh = static_cast<size_t>(q_heads), rows = static_cast<size_t>(plan.rows);
  if (page_scores) {
    std::vector<size_t> pages;
    for (const auto& rec : plan.seqs) pages.push_back(static_cast<size_t>(rec.pages));
    request_page_scores(io, rows * qh, static_cast<size_t>(plan.stats_size), layer, pages, score_weight);
  }
  record(prefill_ws_->run(plan, dev.pool().views(), io, stream_->s));
}

cuda::DecodeWorkspace& CudaPagedAttention::workspace(int turn, const cuda::DecodeShape& shape,
                                                     const cuda::DecodePlan& plan) {
  auto& ws = ws_[turn];
  const int splits = static_cast<int>(plan.splits.size()), entries = static_cast<int>(plan.entries.size());
  if (holds(ws, shape, plan.batch, splits, entries)) return *ws;
  const bool same_shape = ws && same_geometry(ws->shape(), shape);
  // The old workspace may still be read by queued kernels.
  check(cudaStreamSynchronize(stream_->s), "workspace resize");
  auto grow = [&](int need, int have) { return std::max({need, same_shape ? have * 2 : 0, 64}); };
  ws = std::make_unique<cuda::DecodeWorkspace>(shape, grow(plan.batch, ws ? ws->max_batch() : 0),
                                               grow(splits, ws ? ws->max_splits() : 0),
                                               grow(entries, ws ? ws->max_entries() : 0));
  check(cudaDeviceSynchronize(), "workspace init");  // its buffers were cleared on the legacy stream
  return *ws;
}

const cuda::DecodePlan& CudaPagedAttention::decode_plan(const cache::ForwardStep& step, int layer,
                                                        std::span<const SeqRows> seqs, int q_heads, bool page_scores,
                                                        std::vector<cache::PagedView>& views,
                                                        std::vector<size_t>& pages_seen) {
  // One plan item per sequence's row, over the pages its position may see. The layers of one forward
  // pass share the plan's structure (rows, token counts, formats unless a layer is protected), so a
  // plan is built once and later layers only patch in their page ids.
  const auto& sc = step.config();
  const int B = sc.tokens_per_page;
  std::optional<HostProfile::Scope> phase;
  phase.emplace(profile_, "att pin");
  PlanKey key{{}, {}, page_scores, q_heads, sc.kv_heads, sc.head_dim, B};
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqRows& s = seqs[i];
    views.push_back(step.view(i, layer));
    key.rows.push_back({s.seq, s.first, s.n});
    pages_seen.push_back((s.first + static_cast<size_t>(s.n) - 1) / B + 1);
    for (size_t p = 0; p < pages_seen.back(); ++p) key.formats.push_back(views.back().page(p).format);
  }
  phase.reset();
  phase.emplace(profile_, "att plan");
  if (!(key == plan_key_)) {
    // One plan item per sequence (item i is seqs[i]): its row sees the pages up to its position.
    std::vector<std::vector<cuda::PageRef>> items;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const size_t pos = seqs[i].first, npages = pos / B + 1;
      std::vector<cuda::PageRef> refs(npages);
      for (size_t p = 0; p < npages; ++p) {
        const cache::PageEntry e = views[i].page(p);
        refs[p] = {e.format, e.id, p + 1 == npages ? static_cast<uint32_t>(pos % B + 1) : static_cast<uint32_t>(B)};
      }
      items.push_back(std::move(refs));
    }
    const cuda::DecodeShape shape{q_heads, sc.kv_heads, sc.head_dim, B, 0.0f};
    plan_ = cuda::make_decode_plan(items, shape, 0, page_scores);
    plan_key_ = std::move(key);
  } else {
    for (auto& e : plan_.entries) e.page_id = views[e.seq].page(e.logical).id;
  }
  return plan_;
}

void CudaPagedAttention::decode(const cuda::PoolViews& views, const cache::StoreConfig& sc, int layer,
                                const cuda::DecodePlan& plan, cuda::AttentionBuffers io, int q_heads,
                                const std::vector<size_t>& pages_seen, bool page_scores, float score_weight) {
  const cuda::DecodeShape shape{q_heads, sc.kv_heads, sc.head_dim, sc.tokens_per_page, 0.0f};
  std::optional<HostProfile::Scope> phase;
  phase.emplace(profile_, "att wait");
  turn_ ^= 1;
  // stage() rewrites the pinned plan buffer, which the launch before last copied from asynchronously.
  check(cudaEventSynchronize(plan_consumed_[turn_]), "cudaEventSynchronize");
  cuda::DecodeWorkspace& ws = workspace(turn_, shape, plan);
  phase.reset();
  phase.emplace(profile_, "att stage");
  ws.stage(plan, views);
  phase.reset();
  phase.emplace(profile_, "att launch");
  const size_t qh = static_cast<size_t>(q_heads);
  if (page_scores) request_page_scores(io, plan.batch * qh, plan.entries.size() * qh, layer, pages_seen, score_weight);
  ws.launch(views, io, stream_->s, cuda::DecodeWorkspace::LaunchSize::kStaged);
  check(cudaEventRecord(plan_consumed_[turn_], stream_->s), "cudaEventRecord");
  phase.reset();
  record(ws.stats());
}

bool CudaPagedAttention::size_step_workspaces(const cuda::DecodeShape& shape, size_t layers, int rows, int splits,
                                              int entries) {
  bool grew = false;
  if (layer_ws_.size() != layers) layer_ws_.resize(layers);
  for (auto& ws : layer_ws_) {
    if (holds(ws, shape, rows, splits, entries)) continue;
    // Room for the sequences to grow by a quarter before the next capture.
    check(cudaStreamSynchronize(stream_->s), "size_step_workspaces");  // the old one may still be read
    ws = std::make_unique<cuda::DecodeWorkspace>(shape, rows, splits + splits / 4 + 8, entries + entries / 4 + 8);
    grew = true;
  }
  return grew;
}

}  // namespace minimakv::backend
