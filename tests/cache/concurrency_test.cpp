// Concurrent readers against retier, promote, appends, prefix lookups, finishes and eviction. Run under
// the tsan preset for data races; in every build the pinned bytes must stay intact while pinned.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>

#include "cache/store_fixture.h"
#include "minimakv/policy/tier_controller.h"
#include "test_util.h"

namespace minimakv::cache {
namespace {

TEST(StoreConcurrency, ReadersRetierAndEvictionRace) {
  MINIMAKV_SEED_TRACE();
  auto cfg = testing::small_config(400, 400);
  KvStore st(cfg);
  std::array<std::atomic<SeqId>, 6> seqs;  // replaced by the writer while readers pick from it
  {
    auto rng = testing::rng_for_test();
    for (int i = 0; i < 6; ++i) {
      const SeqId s = st.create_sequence();
      auto r = testing::random_rows(rng, cfg, 24, i * 1000);
      st.append(s, r.ids, r.k, r.v);
      seqs[i].store(s);
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(testing::test_seed() + static_cast<uint64_t>(t));
      while (!stop.load()) {
        const SeqId s = seqs[rng() % seqs.size()].load();
        try {
          auto pin = st.pin(s);
          std::vector<uint64_t> before;
          for (const auto& row : pin.rows())
            for (const PageEntry& e : row) before.push_back(XXH3_64bits(pin.bytes(e).data(), pin.bytes(e).size()));
          size_t i = 0;
          for (size_t r = 0; r < pin.rows().size(); ++r)
            for (const PageEntry& e : pin.rows()[r])
              if (XXH3_64bits(pin.bytes(e).data(), pin.bytes(e).size()) != before[i++]) {
                // the last (partial) page may be appended to by its writer; full pages never change
                if (r + 1 != pin.rows().size()) bad.fetch_add(1);
              }
        } catch (const InvalidArgument&) {
          // finished concurrently
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  }
  std::thread lookups([&] {
    std::mt19937_64 rng(testing::test_seed() + 99);
    std::vector<int32_t> ids(8);
    while (!stop.load()) {
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((rng() % 6) * 1000 + i);
      (void)st.match_prefix(ids);
      st.evict_cached(1);
      // Leave the lock to the checkpoint thread: debug builds check every invariant on each call.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  policy::ControllerConfig cc;
  cc.recent_window = 1;
  cc.anchor_budget = 1;
  policy::TierController ctl(cc);
  std::mt19937_64 rng(testing::test_seed() + 7);
  for (int round = 0; round < 60; ++round) {
    std::vector<KvStore::Transition> plan;
    for (const auto& slot : seqs) {
      const SeqId s = slot.load();
      const auto n = st.block_table(s).size();
      for (uint32_t p = 0; p + 1 < n; ++p) plan.push_back({s, p, (rng() + round) % 2 ? Tier::kStale : Tier::kAnchor});
    }
    st.apply(plan);
    if (round % 10 == 9) {  // replace one sequence: finish races with readers
      const size_t i = rng() % seqs.size();
      st.finish(seqs[i].load());
      const SeqId s = st.create_sequence();
      auto r = testing::random_rows(rng, cfg, 12, static_cast<int32_t>(i) * 1000);
      st.append(s, r.ids, r.k, r.v);
      seqs[i].store(s);
    }
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  lookups.join();
  EXPECT_EQ(bad.load(), 0);
  st.check_invariants();
  for (const auto& slot : seqs) st.finish(slot.load());
  st.evict_cached(static_cast<size_t>(-1));
  EXPECT_EQ(st.pool(PageFormat::kFp8).used_pages() + st.pool(PageFormat::kTq3).used_pages(), 0u);
}

}  // namespace
}  // namespace minimakv::cache
