#include "minimakv/cache/host_page_storage.h"

#include <algorithm>
#include <string>
#include <utility>

#include "minimakv/cache/kv_store.h"

namespace minimakv::cache {

namespace {
// One layout per row of the format table, in table (= enum) order.
template <size_t... I>
std::array<codec::PageLayout, sizeof...(I)> layouts_for(codec::PageGeometry g, std::index_sequence<I...>) {
  return {codec::PageLayout(codec::kPageFormats[I].format, g)...};
}
}  // namespace

HostPageStorage::HostPageStorage(const StoreConfig& cfg)
    : geo_{cfg.tokens_per_page, cfg.kv_heads, cfg.head_dim},
      policy_(cfg.tq3_policy),
      layouts_(layouts_for(geo_, std::make_index_sequence<codec::kNumPageFormats>{})) {
  for (const codec::PageFormatSpec& f : codec::all_page_formats()) {
    const int i = codec::format_index(f.format);
    capacity_[i] = cfg.pages_of(f.format);
    bytes_[i].assign((capacity_[i] + 1) * layouts_[i].bytes(), uint8_t{0});
  }
  rotations_.resize(static_cast<size_t>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l)
    for (int h = 0; h < cfg.kv_heads; ++h)
      rotations_[l].push_back(codec::Rotation::for_head(cfg.head_dim, static_cast<uint32_t>(l),
                                                        static_cast<uint32_t>(h), cfg.rotation_seed));
}

size_t HostPageStorage::offset(PageEntry e, const char* where) const {
  const int f = codec::format_index(e.format);
  if (e.id == kNullPage || e.id > capacity_[f])
    throw InvalidArgument(std::string(where) + ": invalid " + codec::to_string(e.format) + " page id " +
                          std::to_string(e.id));
  return e.id * layouts_[f].bytes();
}

std::span<uint8_t> HostPageStorage::page(PageEntry e, const char* where) {
  return {bytes_[codec::format_index(e.format)].data() + offset(e, where), layout(e.format).bytes()};
}

std::span<const uint8_t> HostPageStorage::bytes(PageEntry e) const {
  return {bytes_[codec::format_index(e.format)].data() + offset(e, "HostPageStorage::bytes"), layout(e.format).bytes()};
}

std::span<uint8_t> HostPageStorage::mutable_bytes(PageEntry e) {
  return page(e, "HostPageStorage::mutable_bytes");
}

std::span<const codec::Rotation> HostPageStorage::rotations(int layer) const {
  if (layer < 0 || static_cast<size_t>(layer) >= rotations_.size())
    throw InvalidArgument("rotations: layer " + std::to_string(layer) + " out of range");
  return rotations_[static_cast<size_t>(layer)];
}

void HostPageStorage::write_tokens(std::span<const WriteSlot> slots, std::span<const float> k,
                                   std::span<const float> v) {
  const size_t row = static_cast<size_t>(geo_.kv_heads) * geo_.head_dim;
  if (k.size() != slots.size() * row || v.size() != k.size()) {
    throw InvalidArgument("write_tokens: " + std::to_string(slots.size()) + " tokens need " +
                          std::to_string(slots.size() * row) + " floats of K and of V, got " +
                          std::to_string(k.size()) + " and " + std::to_string(v.size()));
  }
  for (size_t t = 0; t < slots.size(); ++t)
    codec::write_token(page(slots[t].page, "write_tokens"), layout(slots[t].page.format),
                       static_cast<int>(slots[t].token), k.subspan(t * row, row), v.subspan(t * row, row));
}

void HostPageStorage::copy_page(PageFormat f, PageId src, PageId dst) {
  const auto from = page({f, src}, "copy_page");
  std::copy(from.begin(), from.end(), page({f, dst}, "copy_page").begin());
}

void HostPageStorage::convert(std::span<const Conversion> jobs) {
  for (const Conversion& j : jobs) {
    const auto src = page(j.src, "convert"), dst = page(j.dst, "convert");
    const auto rot = rotations(static_cast<int>(j.layer));
    if (codec::format_spec(j.dst.format).rotated)
      codec::convert_fp8_to_rotated(src, layout(j.src.format), dst, layout(j.dst.format), rot, geo_.tokens_per_page,
                                    policy_);
    else
      codec::convert_rotated_to_fp8(src, layout(j.src.format), dst, layout(j.dst.format), rot, geo_.tokens_per_page);
  }
}

}  // namespace minimakv::cache
