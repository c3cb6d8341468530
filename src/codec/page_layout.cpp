#include "minimakv/codec/page_layout.h"

#include <stdexcept>

#include "minimakv/codec/rotation.h"

namespace minimakv::codec {

const char* to_string(PageFormat f) {
  switch (f) {
    case PageFormat::kBf16: return "bf16";
    case PageFormat::kFp8: return "fp8";
    case PageFormat::kTq3: return "tq3";
  }
  return "?";
}

PageLayout::PageLayout(PageFormat format, PageGeometry geo) : format_(format), geo_(geo) {
  require_supported_head_dim(geo.head_dim, "PageLayout");
  if (geo.tokens_per_page < 1 || geo.tokens_per_page > kMaxTokensPerPage) {
    throw std::invalid_argument("PageLayout: tokens_per_page " + std::to_string(geo.tokens_per_page) +
                                " outside [1, " + std::to_string(kMaxTokensPerPage) + "]");
  }
  if (geo.kv_heads < 1 || geo.kv_heads > kMaxKvHeads) {
    throw std::invalid_argument("PageLayout: kv_heads " + std::to_string(geo.kv_heads) + " outside [1, " +
                                std::to_string(kMaxKvHeads) + "]");
  }
  const size_t d = static_cast<size_t>(geo.head_dim);
  switch (format) {
    case PageFormat::kBf16: row_ = 2 * d; meta_ = 0; break;
    case PageFormat::kFp8: row_ = d; meta_ = 4; break;
    case PageFormat::kTq3: row_ = 3 * d / 8; meta_ = 2; break;
    default: throw std::invalid_argument("PageLayout: unknown page format");
  }
  const size_t B = static_cast<size_t>(geo.tokens_per_page);
  const size_t H = static_cast<size_t>(geo.kv_heads);
  code_stride_ = align_up(B * row_, kPageAlignment);
  meta_stride_ = meta_ == 0 ? 0 : align_up(B * meta_, kPageAlignment);
  v_codes_off_ = H * code_stride_;
  k_meta_off_ = 2 * H * code_stride_;
  v_meta_off_ = k_meta_off_ + H * meta_stride_;
  total_ = v_meta_off_ + H * meta_stride_;
}

ByteBreakdown PageLayout::breakdown() const {
  const size_t vectors = static_cast<size_t>(geo_.tokens_per_page) * geo_.kv_heads * 2;
  ByteBreakdown b;
  b.codes = vectors * row_;
  b.metadata = vectors * meta_;
  b.padding = total_ - b.codes - b.metadata;
  return b;
}

double PageLayout::bits_per_scalar() const {
  const double scalars = 2.0 * geo_.tokens_per_page * geo_.kv_heads * geo_.head_dim;
  return 8.0 * static_cast<double>(total_) / scalars;
}

std::string PageLayout::describe() const {
  return std::string(to_string(format_)) + " page B=" + std::to_string(geo_.tokens_per_page) +
         " H=" + std::to_string(geo_.kv_heads) + " d=" + std::to_string(geo_.head_dim) + ": " +
         std::to_string(total_) + " bytes";
}

}  // namespace minimakv::codec
