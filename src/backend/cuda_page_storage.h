// Page bytes of a KvStore in device memory: the cache::PageStorage the CUDA backend gives its stores.
//
// Owns: one device pool per page format (exactly the layouts of docs/formats.md), the rotation signs
// of every (layer, KV head) for the TQ3 conversions, and the conversion job lists. Invariant: every
// operation is queued on the backend's stream, in the order the store issues it (the ordering contract
// of cache/page_storage.h).
#pragma once

#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_stream.h"
#include "minimakv/cache/kv_store.h"
#include "minimakv/cache/page_storage.h"
#include "minimakv/codec/page_layout.h"
#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/page_writes.h"

namespace minimakv::backend {

// Device pool capacities for a store's: one more page per non-empty pool (PageId 0, the null page).
inline std::array<size_t, codec::kNumPageFormats> with_null_pages(std::array<size_t, codec::kNumPageFormats> pages) {
  for (size_t& p : pages) p = p ? p + 1 : 0;
  return pages;
}

// Page bytes of one store in device memory (one pool per format), plus the rotation signs its TQ3
// conversions use.
class DevicePageStorage final : public cache::PageStorage {
 public:
  DevicePageStorage(const cache::StoreConfig& cfg, std::shared_ptr<Stream> stream)
      : geo_{cfg.tokens_per_page, cfg.kv_heads, cfg.head_dim},
        pool_(geo_, with_null_pages(cfg.pages)),
        signs_(cuda::upload_rotation_signs(cfg.layers, cfg.kv_heads, cfg.head_dim, cfg.rotation_seed)),
        policy_(cfg.tq3_policy),
        stream_(std::move(stream)) {
    // The pools were zeroed on the legacy default stream, which does not order against our
    // non-blocking stream: finish that before any kernel of ours writes a page.
    cuda::check(cudaDeviceSynchronize(), "DevicePageStorage");
  }
  ~DevicePageStorage() override { cudaStreamSynchronize(stream_->s); }

  void copy_page(cache::PageFormat f, cache::PageId src, cache::PageId dst) override {
    stream_->note_store_op();
    cuda::check(cudaMemcpyAsync(pool_.page(f, dst), pool_.page(f, src), pool_.layout(f).bytes(),
                                cudaMemcpyDeviceToDevice, stream_->s),
                "copy_page");
  }

  void convert(std::span<const Conversion> jobs) override {
    stream_->note_store_op();
    // Jobs by (rotated format, direction): TQ3 and TQ4, to and from FP8.
    std::array<std::vector<cuda::ConvertJob>, 4> batch;  // tq3 down, tq3 up, tq4 down, tq4 up
    for (const Conversion& c : jobs) {
      const bool down = codec::format_spec(c.dst.format).rotated;
      const cache::PageFormat rotated = down ? c.dst.format : c.src.format;
      if ((rotated != cache::PageFormat::kTq3 && rotated != cache::PageFormat::kTq4) ||
          (down ? c.src.format : c.dst.format) != cache::PageFormat::kFp8)
        throw std::invalid_argument(std::string("DevicePageStorage: no CUDA conversion between ") +
                                    codec::to_string(c.src.format) + " and " + codec::to_string(c.dst.format));
      batch[(rotated == cache::PageFormat::kTq4 ? 2 : 0) + (down ? 0 : 1)].push_back(
          {c.src.id, c.dst.id, static_cast<uint32_t>(geo_.tokens_per_page), c.layer});
    }
    const auto views = pool_.views();
    for (int b = 0; b < 4; ++b) {
      if (batch[b].empty()) continue;
      const auto* d = jobs_[b].write(batch[b], stream_->s);
      const int n = static_cast<int>(batch[b].size());
      switch (b) {
        case 0:
          cuda::convert_fp8_to_tq3(views, geo_, signs_.get(), d, n, policy_, stream_->s);
          break;
        case 1:
          cuda::convert_tq3_to_fp8(views, geo_, signs_.get(), d, n, stream_->s);
          break;
        case 2:
          cuda::convert_fp8_to_tq4(views, geo_, signs_.get(), d, n, policy_, stream_->s);
          break;
        default:
          cuda::convert_tq4_to_fp8(views, geo_, signs_.get(), d, n, stream_->s);
          break;
      }
    }
  }

  const cuda::DevicePagePool& pool() const { return pool_; }
  const codec::PageGeometry& geometry() const { return geo_; }
  const float* signs(int layer) const {
    return signs_.get() + static_cast<size_t>(layer) * geo_.kv_heads * geo_.head_dim;
  }

 private:
  codec::PageGeometry geo_;
  cuda::DevicePagePool pool_;
  cuda::DeviceArray<float> signs_;
  codec::Tq3Policy policy_;
  std::shared_ptr<Stream> stream_;
  std::array<DeviceScratch<cuda::ConvertJob>, 4> jobs_;  // one per batch of convert(), in flight together
};

}  // namespace minimakv::backend
