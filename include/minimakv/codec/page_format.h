// The table of physical page formats: what each stores per scalar and per vector, and which code paths
// read it.
//
// Owns: PageFormat and kPageFormats, the one place a format's properties live. Every module asks this
// table (row and metadata bytes, whether codes live in the rotated domain, whether a page can be
// appended to in place, which decode path reads it) instead of comparing against a format by name;
// PageLayout derives its offsets from it, the CUDA kernels are templated on PageFormat and read their
// constants from it at compile time. Invariant: kPageFormats[f].format == f for every f, in enum order
// (checked at compile time below), so a format indexes arrays sized kNumPageFormats.
// Adding a format: docs/adding-a-format.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "minimakv/codec/portable.h"

namespace minimakv::codec {

enum class PageFormat : uint8_t { kBf16 = 0, kFp8 = 1, kTq3 = 2, kTq4 = 3 };
inline constexpr int kNumPageFormats = 4;

// What one row of the table says. Sizes are per (token, head) vector of head_dim scalars.
struct PageFormatSpec {
  PageFormat format;
  const char* name;       // as the CLI, the JSON reports and the metrics spell it
  int code_bits;          // bits per stored scalar of the code section (row bytes = code_bits * d / 8)
  int meta_bytes;         // per-vector metadata (FP8: fp32 scale; TQ3, TQ4: fp16 norm correction alpha)
  bool exact;             // decodes to exactly the BF16 values written (the dense control)
  bool rotated;           // codes live in the rotated domain: queries are rotated in, outputs rotated back
  bool appendable;        // tokens are written in place at append; otherwise made whole by conversion
};

inline constexpr std::array<PageFormatSpec, kNumPageFormats> kPageFormats = {{
    {PageFormat::kBf16, "bf16", 16, 0, true, false, true},
    {PageFormat::kFp8, "fp8", 8, 4, false, false, true},
    {PageFormat::kTq3, "tq3", 3, 2, false, true, false},
    {PageFormat::kTq4, "tq4", 4, 2, false, true, false},
}};

constexpr bool table_in_enum_order() {
  for (int f = 0; f < kNumPageFormats; ++f)
    if (static_cast<int>(kPageFormats[f].format) != f) return false;
  return true;
}
static_assert(table_in_enum_order(), "kPageFormats must list the formats in enum order");

MINIMAKV_HD constexpr int format_index(PageFormat f) { return static_cast<int>(f); }
constexpr const PageFormatSpec& format_spec(PageFormat f) { return kPageFormats[static_cast<size_t>(f)]; }
// Code bytes of one vector of head_dim scalars (head_dim a multiple of 8).
constexpr size_t format_row_bytes(PageFormat f, int head_dim) {
  return static_cast<size_t>(format_spec(f).code_bits) * static_cast<size_t>(head_dim) / 8;
}

// Bit f set when format f is rotated: a scalar, so device code may test a runtime format index.
constexpr uint32_t rotated_format_mask() {
  uint32_t m = 0;
  for (const PageFormatSpec& s : kPageFormats) m |= s.rotated ? 1u << static_cast<int>(s.format) : 0u;
  return m;
}
inline constexpr uint32_t kRotatedFormats = rotated_format_mask();

// The formats in table order, for range-for loops.
constexpr const std::array<PageFormatSpec, kNumPageFormats>& all_page_formats() { return kPageFormats; }

const char* to_string(PageFormat f);
// "bf16" | "fp8" | "tq3" | "tq4"; anything else throws std::invalid_argument naming the choices.
PageFormat parse_page_format(std::string_view name);

}  // namespace minimakv::codec
