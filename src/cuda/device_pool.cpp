#include "minimakv/cuda/device_pool.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "minimakv/codec/rotation.h"

namespace minimakv::cuda {

DeviceLayout DeviceLayout::from(const codec::PageLayout& L) {
  DeviceLayout d;
  d.page_bytes = L.bytes();
  d.row = static_cast<uint32_t>(L.row_bytes());
  d.meta = static_cast<uint32_t>(L.meta_bytes());
  d.code_stride = static_cast<uint32_t>(L.code_head_stride());
  d.meta_stride = static_cast<uint32_t>(L.meta_head_stride());
  d.v_codes = static_cast<uint32_t>(L.v_codes(0, 0));
  d.k_meta = static_cast<uint32_t>(L.k_meta(0, 0));
  d.v_meta = static_cast<uint32_t>(L.v_meta(0, 0));
  return d;
}

namespace {
std::array<size_t, codec::kNumPageFormats> every_format(size_t pages) {
  std::array<size_t, codec::kNumPageFormats> a;
  a.fill(pages);
  return a;
}
}  // namespace

DevicePagePool::DevicePagePool(codec::PageGeometry g, size_t capacity_pages)
    : DevicePagePool(g, every_format(capacity_pages)) {}

DevicePagePool::DevicePagePool(codec::PageGeometry g, std::array<size_t, codec::kNumPageFormats> capacity_pages)
    : layouts_(codec::page_layouts(g)),
      capacity_(capacity_pages) {
  size_t usable = 0;
  for (size_t c : capacity_pages) usable += c > 1 ? c : 0;
  if (usable == 0) throw std::invalid_argument("DevicePagePool: capacity must hold the null page and one more");
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    if (capacity_pages[f] == 0) continue;
    pools_[f] = DeviceArray<uint8_t>(capacity_pages[f] * layouts_[f].bytes());
    check(cudaMemset(pools_[f].get(), 0, pools_[f].bytes()), "DevicePagePool: cudaMemset");
  }
}

uint8_t* DevicePagePool::page(codec::PageFormat f, uint32_t id) const {
  const int i = static_cast<int>(f);
  return pools_[i].get() + static_cast<size_t>(id) * layouts_[i].bytes();
}

PoolViews DevicePagePool::views() const {
  PoolViews v;
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    v.base[f] = pools_[f].get();
    v.layout[f] = DeviceLayout::from(layouts_[f]);
  }
  return v;
}

void DevicePagePool::check_id(codec::PageFormat f, uint32_t id, size_t bytes, const char* where) const {
  const size_t cap = capacity(f);
  if (id == 0 || id >= cap)
    throw std::invalid_argument(std::string(where) + ": page id " + std::to_string(id) + " outside [1, " +
                                std::to_string(cap) + ")");
  if (bytes != layout(f).bytes())
    throw std::invalid_argument(std::string(where) + ": " + std::to_string(bytes) + " bytes, a " + codec::to_string(f) +
                                " page has " + std::to_string(layout(f).bytes()));
}

void DevicePagePool::upload(codec::PageFormat f, uint32_t id, std::span<const uint8_t> bytes) {
  check_id(f, id, bytes.size(), "DevicePagePool::upload");
  check(cudaMemcpy(page(f, id), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "DevicePagePool::upload");
}

void DevicePagePool::download(codec::PageFormat f, uint32_t id, std::span<uint8_t> bytes) const {
  check_id(f, id, bytes.size(), "DevicePagePool::download");
  check(cudaMemcpy(bytes.data(), page(f, id), bytes.size(), cudaMemcpyDeviceToHost), "DevicePagePool::download");
}

DeviceArray<float> upload_rotation_signs(int layers, int kv_heads, int head_dim, uint64_t model_seed) {
  codec::require_supported_head_dim(head_dim, "upload_rotation_signs");
  if (layers <= 0 || kv_heads <= 0)
    throw std::invalid_argument("upload_rotation_signs: layers and heads must be positive");
  std::vector<float> signs(static_cast<size_t>(layers) * kv_heads * head_dim);
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < kv_heads; ++h) {
      const auto r =
          codec::Rotation::for_head(head_dim, static_cast<uint32_t>(l), static_cast<uint32_t>(h), model_seed);
      const auto s = r.signs();
      std::copy(s.begin(), s.end(), signs.begin() + (static_cast<size_t>(l) * kv_heads + h) * head_dim);
    }
  DeviceArray<float> d(signs.size());
  check(cudaMemcpy(d.get(), signs.data(), d.bytes(), cudaMemcpyHostToDevice), "upload_rotation_signs");
  return d;
}

}  // namespace minimakv::cuda
