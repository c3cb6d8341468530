// Where page bytes live when they are not in host memory, and the operations that move them.
//
// The KvStore owns the protocol (block tables, reference counts, publish order); a PageStorage owns the
// bytes. Without one, the store keeps every page in its host pools and the CPU codec writes them. With
// one (the CUDA backend's device pools), the host pools keep only metadata, and every byte operation the
// protocol performs (copy-on-write at fork, FP8 <-> TQ3 conversion at a checkpoint) is handed to the
// storage. Page ids are shared: host PageId p of format f names the storage's page p of format f.
// Ordering contract: a storage executes its operations, and the engine's reads and writes of its pages,
// in submission order (one CUDA stream), so a page released by the protocol is never overwritten before
// every operation submitted earlier that reads it has run.
#pragma once

#include <cstdint>
#include <span>

#include "minimakv/cache/types.h"

namespace minimakv::cache {

class PageStorage {
 public:
  virtual ~PageStorage() = default;
  // Copies one whole layer-page of format f (the partial last page a fork copies on write).
  virtual void copy_page(PageFormat f, PageId src, PageId dst) = 0;
  // Converts full pages (tokens_per_page tokens) with the rotation of `layer`: FP8 -> TQ3 when dst is a
  // TQ3 page, TQ3 -> FP8 when dst is an FP8 page. Byte-identical to the CPU codec.
  struct Conversion {
    PageEntry src, dst;
    uint32_t layer;
  };
  virtual void convert(std::span<const Conversion> jobs) = 0;
};

}  // namespace minimakv::cache
