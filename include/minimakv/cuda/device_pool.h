// Device-side page pools in exactly the byte layouts of docs/formats.md.
//
// Owns: one device allocation per format, holding `capacity` layer-pages of that format's PageLayout,
// page p at byte offset p * layout.bytes(). Page 0 is the null page (zeroed, never written) like the
// host pools, so a host PageId addresses the same page on both sides. Uploading a host page and decoding
// it on the GPU gives what the CPU decodes, and the reverse (tests/cuda). DeviceLayout is the compact,
// trivially copyable form of a PageLayout that kernels take by value.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "minimakv/codec/page_layout.h"
#include "minimakv/cuda/device_memory.h"

namespace minimakv::cuda {

struct DeviceLayout {
  uint64_t page_bytes = 0;
  uint32_t row = 0, meta = 0;                    // code / metadata bytes of one (token, head) vector
  uint32_t code_stride = 0, meta_stride = 0;     // per-head block strides inside a section
  uint32_t v_codes = 0, k_meta = 0, v_meta = 0;  // section offsets (K codes start at 0)
  static DeviceLayout from(const codec::PageLayout& L);
};

// Base pointers and layouts of the three pools, passed by value to kernels.
// Plain arrays (not std::array): device code indexes them.
struct PoolViews {
  uint8_t* base[codec::kNumPageFormats] = {};
  DeviceLayout layout[codec::kNumPageFormats] = {};
};

class DevicePagePool {
 public:
  // geometry is shared by the formats; capacity counts pages including the null page, the same for
  // every format or one per format (a format with capacity 0 gets no allocation).
  DevicePagePool(codec::PageGeometry geometry, size_t capacity_pages);
  DevicePagePool(codec::PageGeometry geometry, std::array<size_t, codec::kNumPageFormats> capacity_pages);

  const codec::PageLayout& layout(codec::PageFormat f) const { return layouts_[static_cast<int>(f)]; }
  size_t capacity(codec::PageFormat f = codec::PageFormat::kFp8) const { return capacity_[static_cast<int>(f)]; }
  uint8_t* page(codec::PageFormat f, uint32_t id) const;
  PoolViews views() const;

  // Synchronous copies of one whole layer-page; throw std::invalid_argument on a bad id or size.
  void upload(codec::PageFormat f, uint32_t id, std::span<const uint8_t> bytes);
  void download(codec::PageFormat f, uint32_t id, std::span<uint8_t> bytes) const;

 private:
  void check_id(codec::PageFormat f, uint32_t id, size_t bytes, const char* where) const;
  std::array<codec::PageLayout, codec::kNumPageFormats> layouts_;
  std::array<size_t, codec::kNumPageFormats> capacity_;
  std::array<DeviceArray<uint8_t>, codec::kNumPageFormats> pools_;
};

// Rotation sign tables for the TQ3 kernels: signs[layer][kv_head][head_dim] as +-1.0f, from
// codec::Rotation::for_head with the given model seed (the same signs the CPU uses).
DeviceArray<float> upload_rotation_signs(int layers, int kv_heads, int head_dim, uint64_t model_seed);

}  // namespace minimakv::cuda
