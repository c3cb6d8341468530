// Byte layout and exact accounting of one page of one attention layer, for each physical format.
//
// Owns: the normative offsets of docs/formats.md. Every reader and writer (CPU kernels, GPU kernels, the
// cache's accounting) derives offsets from PageLayout; nothing else computes them.
// Layout of one layer-page (B tokens, H KV heads, head_dim d), sections in this order:
//   K codes  [H][B][row]   V codes [H][B][row]   K meta [H][B]   V meta [H][B]
// Each head's block inside a section starts on a 16-byte boundary (GPU 16-byte loads). Head-major
// blocks make the tokens of one head contiguous, which is what a decode kernel reads. Row and metadata
// bytes per vector come from the format table (page_format.h): BF16 2d bytes and no meta, FP8 d bytes
// (E4M3) and an fp32 scale, TQ3 3d/8 bytes (packed codes) and an fp16 alpha.
// Invariant: bytes() == codes + metadata + padding, exactly.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "minimakv/codec/page_format.h"

namespace minimakv::codec {

inline constexpr size_t kPageAlignment = 16;
inline constexpr int kMaxTokensPerPage = 4096;
inline constexpr int kMaxKvHeads = 64;

struct PageGeometry {
  int tokens_per_page = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

struct ByteBreakdown {
  size_t codes = 0;     // K and V payload
  size_t metadata = 0;  // scales / norm corrections
  size_t padding = 0;   // alignment
  size_t total() const { return codes + metadata + padding; }
};

class PageLayout {
 public:
  // Throws std::invalid_argument for an unsupported head_dim, tokens_per_page outside [1, 4096] or
  // kv_heads outside [1, 64].
  PageLayout(PageFormat format, PageGeometry geo);

  PageFormat format() const { return format_; }
  const PageGeometry& geometry() const { return geo_; }

  size_t row_bytes() const { return row_; }          // code bytes of one (token, head) vector
  size_t meta_bytes() const { return meta_; }        // metadata bytes of one (token, head) vector
  size_t code_head_stride() const { return code_stride_; }
  size_t meta_head_stride() const { return meta_stride_; }
  size_t bytes() const { return total_; }            // one layer-page

  // Offsets from the start of the layer-page.
  size_t k_codes(int head, int token) const { return head * code_stride_ + token * row_; }
  size_t v_codes(int head, int token) const { return v_codes_off_ + head * code_stride_ + token * row_; }
  size_t k_meta(int head, int token) const { return k_meta_off_ + head * meta_stride_ + token * meta_; }
  size_t v_meta(int head, int token) const { return v_meta_off_ + head * meta_stride_ + token * meta_; }

  ByteBreakdown breakdown() const;
  // Bits per stored scalar (K and V together) including metadata and padding.
  double bits_per_scalar() const;
  std::string describe() const;

 private:
  PageFormat format_;
  PageGeometry geo_;
  size_t row_ = 0, meta_ = 0, code_stride_ = 0, meta_stride_ = 0;
  size_t v_codes_off_ = 0, k_meta_off_ = 0, v_meta_off_ = 0, total_ = 0;
};

constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// One layout per format of the table, indexed by format.
std::array<PageLayout, kNumPageFormats> page_layouts(PageGeometry geo);

}  // namespace minimakv::codec
