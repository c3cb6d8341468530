// The CUDA backend's paged attention: what one layer's attention needs besides the operators and the
// step graphs — decode plans and the workspaces they are staged into, the prefill workspace, the page
// scores of a forward pass summed on the device, and the attention statistics.
//
// Owns: the last decode plan and its key (later layers of a pass only patch in their page ids), two
// eager decode workspaces used in turn (the host plans layer l + 1 while layer l's plan is still being
// copied; an event per workspace marks when its staged plan was consumed), one decode workspace per
// layer for captured steps (launched at capacity, so one graph fits any later plan within it), the
// prefill workspace, the device sums of page scores and the statistics. Invariants: every launch is
// queued on the backend's one stream; a workspace is replaced only after that stream has drained, so
// no queued kernel reads a freed buffer; the page scores of one forward pass cover the same pages in
// every layer (layer 0 starts the sums at zero).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "cuda_page_storage.h"
#include "cuda_stream.h"
#include "minimakv/backend/backend.h"
#include "minimakv/cuda/attention_buffers.h"
#include "minimakv/cuda/paged_decode.h"
#include "minimakv/cuda/paged_prefill.h"

namespace minimakv::backend {

class CudaPagedAttention {
 public:
  CudaPagedAttention(std::shared_ptr<Stream> stream, HostProfile& profile);
  ~CudaPagedAttention();
  CudaPagedAttention(const CudaPagedAttention&) = delete;
  CudaPagedAttention& operator=(const CudaPagedAttention&) = delete;

  // A chunk of rows of some sequences (prefill): plan, workspace and launch. io holds the query, signs
  // and output (and the output's BF16 copy, if wanted); page scores are added as attention() promises.
  void prefill(const cache::ForwardStep& step, const DevicePageStorage& dev, int layer, std::span<const SeqRows> seqs,
               cuda::AttentionBuffers io, int q_heads, std::vector<std::vector<float>>* page_scores,
               float score_weight);
  // The decode plan of one layer: one item per sequence's row over the pages its position may see. Takes
  // every sequence's paged view (into `views`, which the caller holds until the launch is queued) and
  // records the pages each row sees (pages_seen).
  const cuda::DecodePlan& decode_plan(const cache::ForwardStep& step, int layer, std::span<const SeqRows> seqs,
                                      int q_heads, bool page_scores, std::vector<cache::PagedView>& views,
                                      std::vector<size_t>& pages_seen);
  // Stages and launches an eager decode of `plan` (sized by the staged plan) through the workspace
  // whose turn it is; with page_scores, adds the layer's page scores (pages_seen from decode_plan).
  void decode(const cuda::PoolViews& views, const cache::StoreConfig& sc, int layer, const cuda::DecodePlan& plan,
              cuda::AttentionBuffers io, int q_heads, const std::vector<size_t>& pages_seen, bool page_scores,
              float score_weight);
  // Captured steps: makes every layer's workspace hold a plan of `rows` items, `splits` splits and
  // `entries` entries (with room to grow); true when one was made anew (graphs naming the old are stale).
  bool size_step_workspaces(const cuda::DecodeShape& shape, size_t layers, int rows, int splits, int entries);
  cuda::DecodeWorkspace& step_workspace(int layer) { return *layer_ws_.at(static_cast<size_t>(layer)); }

  // Adds the forward pass's page scores, summed on the device, to page_scores (one vector per sequence).
  void collect_page_scores(std::vector<std::vector<float>>& page_scores);
  void record(const cuda::DecodeStats& st);
  const AttentionStats& stats() const { return stats_; }

 private:
  // Points io's merged (m, l), per-page partials and page-score sum at device buffers: merged_rows
  // query rows, `partials` (m_p, l_p) floats, the pages of each sequence. Layer 0 starts a forward
  // pass's sums at zero; later layers must cover the same pages.
  void request_page_scores(cuda::AttentionBuffers& io, size_t merged_rows, size_t partials, int layer,
                           const std::vector<size_t>& pages, float weight);
  cuda::DecodeWorkspace& workspace(int turn, const cuda::DecodeShape& shape, const cuda::DecodePlan& plan);

  std::shared_ptr<Stream> stream_;
  HostProfile& profile_;
  DeviceScratch<float> merged_m_, merged_l_, page_m_, page_l_;
  std::array<std::unique_ptr<cuda::DecodeWorkspace>, 2> ws_;
  std::array<cudaEvent_t, 2> plan_consumed_{};
  int turn_ = 0;
  std::vector<std::unique_ptr<cuda::DecodeWorkspace>> layer_ws_;
  std::unique_ptr<cuda::PrefillWorkspace> prefill_ws_;
  cuda::DecodeShape prefill_shape_;
  AttentionStats stats_;
  // The last plan built, and what it was built for.
  struct PlanKey {
    struct Rows {
      cache::SeqId seq;
      uint32_t first;
      int n;
      bool operator==(const Rows&) const = default;
    };
    std::vector<Rows> rows;
    std::vector<cache::PageFormat> formats;  // of every page the rows see, sequence by sequence
    bool granular = false;
    int q_heads = 0, kv_heads = 0, head_dim = 0, tokens_per_page = 0;
    bool operator==(const PlanKey&) const = default;
  };
  PlanKey plan_key_;
  cuda::DecodePlan plan_;
  // Page scores of the forward pass in flight, summed over its layers on the device: score_pages_[i]
  // pages of sequence i, sequence after sequence.
  DeviceScratch<float> score_acc_;
  std::vector<size_t> score_pages_;
};

}  // namespace minimakv::backend
