// Identifiers, tiers, reference kinds and errors shared by the paged KV store.
//
// Owns: the vocabulary of cache/: a physical page is a *layer-page* (one attention layer's K and V for
// tokens_per_page tokens, in one format) identified by (format, PageId); PageId 0 of every pool is the
// reserved null page and is never handed out. A logical page of a sequence maps to one layer-page per
// layer. Errors are exceptions derived from CacheError; every operation that throws leaves the store as
// it was before the call.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "minimakv/codec/page_layout.h"

namespace minimakv::cache {

using codec::PageFormat;
using PageId = uint32_t;
using SeqId = uint64_t;
inline constexpr PageId kNullPage = 0;

// Fidelity tier of a logical page. Recent and Anchor pages are FP8, Stale pages TQ3 (or, per layer,
// TQ4; protected layers stay FP8).
enum class Tier : uint8_t { kRecent = 0, kAnchor = 1, kStale = 2 };
inline constexpr int kNumTiers = 3;
const char* to_string(Tier t);

// Why a physical page is still alive. A page returns to its free list only when all four are zero.
enum class RefKind : uint8_t { kRequest = 0, kCache = 1, kReader = 2, kConversion = 3 };
inline constexpr int kNumRefKinds = 4;
const char* to_string(RefKind k);

// How a sequence stores its KV: dense control (BF16), every page FP8, or the Minima tiers.
enum class KvMode : uint8_t { kBf16 = 0, kFp8 = 1, kMinima = 2 };
const char* to_string(KvMode m);
// "bf16", "fp8" or "minima"; anything else throws std::invalid_argument naming the choices. The one
// place a mode's name is read.
KvMode parse_kv_mode(std::string_view name);
// Whether the mode stores any page Stale (TQ3): only then do retier checkpoints and attention page
// scores change anything, so callers run them only for such modes. The one place that rule lives.
constexpr bool retiers(KvMode m) { return m == KvMode::kMinima; }
// The format a page is appended in under the mode (also the format of every page of a mode that never
// retiers, and of Recent/Anchor pages and protected layers under Minima).
constexpr PageFormat append_format(KvMode m) { return m == KvMode::kBf16 ? PageFormat::kBf16 : PageFormat::kFp8; }
// The Stale format of a layer that no option names.
inline constexpr PageFormat kDefaultStaleFormat = PageFormat::kTq3;
// The format a layer-page of `tier` is stored in: the one rule that maps tiers to formats, read by the
// store, the KV budget and the backends. Under a mode that retiers, Stale pages take their layer's Stale
// format (`layer_stale`: TQ3 by default, TQ4 for layers chosen for precision, the append format for
// protected layers; StoreConfig::stale_formats); everything else stays in the append format.
constexpr PageFormat storage_format(KvMode m, Tier tier, PageFormat layer_stale = kDefaultStaleFormat) {
  return retiers(m) && tier == Tier::kStale ? layer_stale : append_format(m);
}

struct PageEntry {
  PageFormat format = PageFormat::kFp8;
  PageId id = kNullPage;
  bool operator==(const PageEntry&) const = default;
};

struct CacheError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// No free page (after evicting everything evictable) in the pool an operation needs.
struct OutOfCapacity : CacheError {
  using CacheError::CacheError;
};
// Unknown or finished sequence, page index out of range, wrong shapes.
struct InvalidArgument : CacheError {
  using CacheError::CacheError;
};

}  // namespace minimakv::cache
