// Page bytes in host memory: the PageStorage of every store that is not given another one.
//
// Owns: one byte array per page format, sized for the store's capacity plus the null page 0 (zeroed at
// construction, as pages are when first handed out), and the rotation of every (layer, KV head) that
// TQ3 pages are stored under. Writes go through the CPU codec (quantize on append, conversions).
// Invariant: it checks ids and sizes but not ownership; the store's protocol decides which pages may be
// written (only the unsealed pages an append's write slots name, or a conversion's private destination).
// Thread safety: distinct pages may be read and written concurrently; the protocol guarantees that no
// page is written while it can be read.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "minimakv/cache/page_storage.h"
#include "minimakv/codec/page_codec.h"
#include "minimakv/codec/page_format.h"

namespace minimakv::cache {

struct StoreConfig;

class HostPageStorage final : public PageStorage {
 public:
  explicit HostPageStorage(const StoreConfig& cfg);

  const codec::PageLayout& layout(PageFormat f) const { return layouts_[codec::format_index(f)]; }
  std::span<const uint8_t> bytes(PageEntry e) const;
  std::span<uint8_t> mutable_bytes(PageEntry e);
  // The rotations of layer l's KV heads (TQ3 pages store K and V rotated by them).
  std::span<const codec::Rotation> rotations(int layer) const;
  // Quantizes tokens into their slots: k and v hold slots.size() rows of kv_heads * head_dim floats.
  void write_tokens(std::span<const WriteSlot> slots, std::span<const float> k, std::span<const float> v);

  void copy_page(PageFormat f, PageId src, PageId dst) override;
  void convert(std::span<const Conversion> jobs) override;

 private:
  size_t offset(PageEntry e, const char* where) const;  // of the page in its format's array; checks the id
  std::span<uint8_t> page(PageEntry e, const char* where);
  codec::PageGeometry geo_;
  codec::Tq3Policy policy_;
  std::array<codec::PageLayout, codec::kNumPageFormats> layouts_;
  std::array<size_t, codec::kNumPageFormats> capacity_{};
  std::array<std::vector<uint8_t>, codec::kNumPageFormats> bytes_;          // page p at p * layout.bytes()
  std::vector<std::vector<codec::Rotation>> rotations_;                     // [layer][kv head]
};

}  // namespace minimakv::cache
