// Randomized model-based simulation of the KvStore (used by the test suite and `minimakv stress`).
//
// Owns: a reference model of what the store must hold, independent of its pools and refcounts: live
// sequences with their token ids and tiers, and the rule that K/V of a token is a pure function of its
// token prefix (so equal prefixes legitimately share pages). A page's expected bytes are derived from
// its tokens alone: the FP8 (or BF16) encoding of its K/V, or a conversion (FP8 -> TQ3, TQ3 -> FP8) of
// a content already seen for the same tokens; the stored bytes of every live row must equal one such
// content, bit for bit, in the regions the layout defines (codes and metadata of written tokens).
// Random operations: create, create from a cached prefix, append, fork, finish, tier plans, controller
// checkpoints, pins held across operations, evictions, quota (pressure) changes, and invalid calls that
// must throw and leave everything unchanged. After every operation the store's own invariants are
// checked and the reference model is compared with the store. Diagnostics for a failure:
// MINIMAKV_STRESS_DEBUG=1 explains a byte mismatch; MINIMAKV_STRESS_TRACE_HASH=<hex> prints every change
// of the rows bound to one prefix hash.
#pragma once

#include <cstdint>
#include <string>

#include "minimakv/cache/kv_store.h"

namespace minimakv::sim {
using cache::Accounting;
using cache::KvMode;

struct StressOptions {
  uint64_t ops = 100000;
  uint64_t seed = 1;
  KvMode mode = KvMode::kMinima;
  size_t fp8_pages = 96;
  size_t tq3_pages = 96;
  size_t full_check_every = 512;  // full byte sweep of every live sequence
};

struct StressResult {
  uint64_t ops = 0;
  uint64_t invariant_checks = 0;
  uint64_t page_byte_checks = 0;
  uint64_t expected_errors = 0;  // invalid calls that threw as they must
  uint64_t capacity_errors = 0;  // OutOfCapacity, state verified unchanged
  uint64_t conversions = 0, promotions = 0, rebinds = 0, prefix_hits = 0, evictions = 0;
  size_t peak_used_bytes = 0;
  size_t leaked_pages = 0;       // pages still in use after finishing everything and evicting the cache
  bool reconciled = true;        // accounting reconciled after every operation
  std::string failure;           // empty when every check passed
  Accounting final_accounting;   // before the final teardown
  bool ok() const { return failure.empty() && leaked_pages == 0 && reconciled; }
};

StressResult run_stress(const StressOptions& opt);

}  // namespace minimakv::sim
