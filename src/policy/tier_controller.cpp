#include "minimakv/policy/tier_controller.h"

#include <algorithm>
#include <numeric>

namespace minimakv::policy {

using cache::KvStore;
using cache::Tier;

void TierController::pin_span(cache::SeqId seq, size_t begin, size_t end) {
  if (end > begin) pins_[seq].emplace_back(begin, end);
}

void TierController::observe(cache::SeqId seq, std::span<const float> page_scores) {
  auto& a = scores_[seq];
  if (a.size() < page_scores.size()) a.resize(page_scores.size(), 0.0f);
  for (size_t p = 0; p < page_scores.size(); ++p) a[p] = cfg_.ewma_beta * a[p] + (1.0f - cfg_.ewma_beta) * page_scores[p];
}

float TierController::score(cache::SeqId seq, uint32_t page) const {
  auto it = scores_.find(seq);
  return (it == scores_.end() || page >= it->second.size()) ? 0.0f : it->second[page];
}

void TierController::forget(cache::SeqId seq) {
  scores_.erase(seq);
  pins_.erase(seq);
}

std::vector<KvStore::Transition> TierController::plan_with(const KvStore& store, std::span<const cache::SeqId> seqs,
                                                           uint32_t window, uint32_t anchors,
                                                           size_t* fp8_needed) const {
  std::vector<KvStore::Transition> out;
  const size_t B = static_cast<size_t>(store.geometry().tokens_per_page);
  size_t unprotected = 0;
  for (int l = 0; l < store.config().layers; ++l) unprotected += store.is_protected(l) ? 0 : 1;
  size_t need = 0;
  for (cache::SeqId seq : seqs) {
    const auto table = store.block_table(seq);
    const size_t n = table.size();
    std::vector<Tier> target(n, Tier::kStale);
    for (size_t p = 0; p < n; ++p) {
      if (p + window >= n || !table[p].sealed) target[p] = Tier::kRecent;
      else if (p < cfg_.sink_pages) target[p] = Tier::kAnchor;
    }
    if (auto it = pins_.find(seq); it != pins_.end()) {
      for (auto [b, e] : it->second)
        for (size_t p = b / B; p < n && p * B < e; ++p)
          if (target[p] == Tier::kStale) target[p] = Tier::kAnchor;
    }
    if (cfg_.scoring && anchors > 0) {
      std::vector<uint32_t> cand;
      for (size_t p = 0; p < n; ++p)
        if (target[p] == Tier::kStale && score(seq, static_cast<uint32_t>(p)) > cfg_.min_anchor_score)
          cand.push_back(static_cast<uint32_t>(p));
      std::stable_sort(cand.begin(), cand.end(),
                       [&](uint32_t a, uint32_t b) { return score(seq, a) > score(seq, b); });
      for (size_t i = 0; i < cand.size() && i < anchors; ++i) target[cand[i]] = Tier::kAnchor;
    }
    for (size_t p = 0; p < n; ++p) {
      if (target[p] == table[p].tier) continue;
      if (!cache::retiers(store.config().mode) && target[p] == Tier::kStale) continue;
      if (table[p].tier == Tier::kStale) need += unprotected;  // promotion writes FP8 pages
      out.push_back({seq, static_cast<uint32_t>(p), target[p]});
    }
  }
  if (fp8_needed) *fp8_needed = need;
  return out;
}

std::vector<KvStore::Transition> TierController::plan(const KvStore& store, std::span<const cache::SeqId> seqs,
                                                      PlanStats* stats) const {
  // Shrink budgets while the promotions of the plan would not fit in the free pages of the append
  // format (FP8), which promoted pages return to.
  uint32_t window = std::max<uint32_t>(1, cfg_.recent_window), anchors = cfg_.anchor_budget;
  const size_t free_fp8 = store.pool(store.append_format()).free_pages();
  size_t need = 0;
  auto p = plan_with(store, seqs, window, anchors, &need);
  while (need > free_fp8 && (anchors > 0 || window > 1)) {
    if (anchors > 0) anchors /= 2;
    else window = std::max<uint32_t>(1, window / 2);
    p = plan_with(store, seqs, window, anchors, &need);
  }
  if (stats) {
    *stats = {};
    stats->recent_window = window;
    stats->anchor_budget = anchors;
    for (const auto& t : p) {
      // counts by kind, from the store's current tiers
      const auto tier = store.block_table(t.seq)[t.page].tier;
      if (t.target == Tier::kStale) ++stats->demote;
      else if (tier == Tier::kStale) ++stats->promote;
      else ++stats->retag;
    }
  }
  return p;
}

KvStore::ApplyResult TierController::checkpoint(KvStore& store, std::span<const cache::SeqId> seqs, PlanStats* stats) {
  const auto p = plan(store, seqs, stats);
  return store.apply(p);
}

}  // namespace minimakv::policy
