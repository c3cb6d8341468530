#include "minimakv/codec/page_layout.h"

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "minimakv/codec/rotation.h"

namespace minimakv::codec {

const char* to_string(PageFormat f) {
  const auto i = static_cast<size_t>(f);
  return i < kPageFormats.size() ? kPageFormats[i].name : "?";
}

PageFormat parse_page_format(std::string_view name) {
  std::string choices;
  for (const PageFormatSpec& s : all_page_formats()) {
    if (name == s.name) return s.format;
    choices += (choices.empty() ? "" : ", ") + std::string(s.name);
  }
  throw std::invalid_argument("unknown page format '" + std::string(name) + "' (choose " + choices + ")");
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
  if (static_cast<size_t>(format) >= kPageFormats.size()) throw std::invalid_argument("PageLayout: unknown page format");
  row_ = format_row_bytes(format, geo.head_dim);
  meta_ = static_cast<size_t>(format_spec(format).meta_bytes);
  const size_t B = static_cast<size_t>(geo.tokens_per_page);
  const size_t H = static_cast<size_t>(geo.kv_heads);
  code_stride_ = align_up(B * row_, kPageAlignment);
  meta_stride_ = meta_ == 0 ? 0 : align_up(B * meta_, kPageAlignment);
  v_codes_off_ = H * code_stride_;
  k_meta_off_ = 2 * H * code_stride_;
  v_meta_off_ = k_meta_off_ + H * meta_stride_;
  total_ = v_meta_off_ + H * meta_stride_;
}

namespace {
template <size_t... I>
std::array<PageLayout, kNumPageFormats> layouts_of(PageGeometry geo, std::index_sequence<I...>) {
  return {PageLayout(kPageFormats[I].format, geo)...};
}
}  // namespace

std::array<PageLayout, kNumPageFormats> page_layouts(PageGeometry geo) {
  return layouts_of(geo, std::make_index_sequence<kNumPageFormats>{});
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
