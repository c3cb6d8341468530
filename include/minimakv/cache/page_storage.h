// Where page bytes live, and the byte operations of the ownership protocol.
//
// The KvStore owns the protocol (block tables, reference counts, pins, publish order) and never touches a
// page byte; a PageStorage owns the bytes. Two implementations: cache::HostPageStorage (host memory, the
// CPU codec; the default of every store) and the CUDA backend's device pools. The store hands the
// storage every byte operation the protocol itself performs (copy-on-write at fork, FP8 <-> TQ3
// conversion at a checkpoint); appended tokens are written by whoever computed them (the backend) at the
// write slots an append hands out, into the same storage. Page ids are shared: PageId p of format f in
// the store's metadata names the storage's page p of format f.
// Ordering contract: a storage executes its operations, and the engine's reads and writes of its pages,
// in submission order (host: at once; device: one CUDA stream), so a page released by the protocol is
// never overwritten before every operation submitted earlier that reads it has run.
#pragma once

#include <cstdint>
#include <span>

#include "minimakv/cache/types.h"

namespace minimakv::cache {

// Where one appended token of one layer goes: its layer-page and its slot (token index) there.
struct WriteSlot {
  PageEntry page;
  uint32_t token = 0;
};

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
