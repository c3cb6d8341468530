// Tier controller: decides which logical pages are Recent, Anchor or Stale. Policy only: it reads a
// sequence's page metadata and attention scores and emits a plan; the KvStore executes it.
//
// Owns: per-(sequence, logical page) EWMA attention scores a_p = beta * a_p + (1 - beta) * r_p and the
// budgets. At a checkpoint, for each sequence: the last `recent_window` pages (the partial one included)
// are Recent; sink pages (the first `sink_pages`) and pages overlapping caller-pinned token spans are
// Anchors; the remaining full pages compete for `anchor_budget` further Anchor slots by score (scoring
// on; ties and scoring off fall back to no extra anchors); everything else is Stale.
// Under FP8 pressure (free FP8 layer-pages below what the plan needs) budgets shrink, anchors first,
// then the recent window down to one page. The controller never drops a page: Stale is still a page.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "minimakv/cache/kv_store.h"

namespace minimakv::policy {

struct ControllerConfig {
  uint32_t recent_window = 4;   // W pages
  uint32_t anchor_budget = 4;   // A pages chosen by score (sinks and pins come on top)
  uint32_t sink_pages = 1;
  float ewma_beta = 0.9f;
  bool scoring = false;
  float min_anchor_score = 0.0f;  // a page must score above this to earn a scored anchor slot
};

struct PlanStats {
  size_t demote = 0, promote = 0, retag = 0;
  uint32_t recent_window = 0, anchor_budget = 0;  // budgets after pressure shrinking
};

class TierController {
 public:
  explicit TierController(ControllerConfig cfg) : cfg_(cfg) {}
  const ControllerConfig& config() const { return cfg_; }

  // Caller-pinned token span [begin, end) of a sequence (e.g. a system prompt): its pages are Anchors.
  void pin_span(cache::SeqId seq, size_t begin, size_t end);
  // Page scores r_p of one step for a sequence (index = logical page), folded into the EWMA.
  void observe(cache::SeqId seq, std::span<const float> page_scores);
  float score(cache::SeqId seq, uint32_t page) const;
  void forget(cache::SeqId seq);

  // The plan for these sequences at this checkpoint.
  std::vector<cache::KvStore::Transition> plan(const cache::KvStore& store, std::span<const cache::SeqId> seqs,
                                               PlanStats* stats = nullptr) const;
  // plan() + store.apply(); retries with smaller budgets when FP8 capacity is short.
  cache::KvStore::ApplyResult checkpoint(cache::KvStore& store, std::span<const cache::SeqId> seqs,
                                         PlanStats* stats = nullptr);

 private:
  std::vector<cache::KvStore::Transition> plan_with(const cache::KvStore& store, std::span<const cache::SeqId> seqs,
                                                    uint32_t window, uint32_t anchors, size_t* fp8_needed) const;
  ControllerConfig cfg_;
  std::unordered_map<cache::SeqId, std::vector<float>> scores_;
  std::unordered_map<cache::SeqId, std::vector<std::pair<size_t, size_t>>> pins_;
};

}  // namespace minimakv::policy
