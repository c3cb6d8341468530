#include "minimakv/codec/page_codec.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "minimakv/codec/half.h"

namespace minimakv::codec {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

void check_page(size_t bytes, const PageLayout& layout, const char* where) {
  require(bytes == layout.bytes(), std::string(where) + ": page span has " + std::to_string(bytes) +
                                       " bytes, layout needs " + std::to_string(layout.bytes()));
}

void check_token(int token, const PageLayout& layout, const char* where) {
  require(token >= 0 && token < layout.geometry().tokens_per_page,
          std::string(where) + ": token " + std::to_string(token) + " outside page of " +
              std::to_string(layout.geometry().tokens_per_page));
}

void check_rotations(std::span<const Rotation> rot, const PageLayout& layout, const char* where) {
  const auto& g = layout.geometry();
  require(rot.size() == static_cast<size_t>(g.kv_heads),
          std::string(where) + ": " + std::to_string(rot.size()) + " rotations for " +
              std::to_string(g.kv_heads) + " KV heads");
  for (const auto& r : rot) {
    require(r.dim() == g.head_dim, std::string(where) + ": rotation dimension " + std::to_string(r.dim()) +
                                       " != head_dim " + std::to_string(g.head_dim));
  }
}

// Everything a page conversion validates before it writes a byte.
void check_conversion(size_t src_bytes, const PageLayout& SL, PageFormat src_format, size_t dst_bytes,
                      const PageLayout& DL, PageFormat dst_format, std::span<const Rotation> rotations, int tokens,
                      const char* where) {
  const std::string w(where);
  require(SL.format() == src_format && DL.format() == dst_format,
          w + ": source must be a " + to_string(src_format) + " layout and destination a " + to_string(dst_format) +
              " layout");
  const auto& g = SL.geometry();
  const auto& dg = DL.geometry();
  require(g.tokens_per_page == dg.tokens_per_page && g.kv_heads == dg.kv_heads && g.head_dim == dg.head_dim,
          w + ": source and destination geometries differ");
  check_page(src_bytes, SL, (w + " (source)").c_str());
  check_page(dst_bytes, DL, (w + " (destination)").c_str());
  check_rotations(rotations, SL, where);
  require(tokens >= 0 && tokens <= g.tokens_per_page, w + ": token count out of range");
}

template <typename T>
void store(uint8_t* p, T v) { std::memcpy(p, &v, sizeof v); }
template <typename T>
T load(const uint8_t* p) { T v; std::memcpy(&v, p, sizeof v); return v; }

void encode_vec(uint8_t* page, const PageLayout& L, size_t code_off, size_t meta_off, const float* x,
                EncodeStats* stats) {
  const int d = L.geometry().head_dim;
  switch (L.format()) {
    case PageFormat::kBf16:
      for (int i = 0; i < d; ++i) store<uint16_t>(page + code_off + 2 * i, float_to_bf16(x[i]));
      if (stats) stats->vectors += 1;
      break;
    case PageFormat::kFp8: {
      const float s = fp8_encode_vector({x, static_cast<size_t>(d)}, {page + code_off, static_cast<size_t>(d)},
                                        stats);
      store<float>(page + meta_off, s);
      break;
    }
    case PageFormat::kTq3:
    case PageFormat::kTq4:
      throw std::invalid_argument(std::string("write_token: ") + to_string(L.format()) +
                                  " pages are sealed; they are made by conversion from FP8");
  }
}

void decode_vec(const uint8_t* page, const PageLayout& L, size_t code_off, size_t meta_off,
                const Rotation* rot, float* out) {
  const int d = L.geometry().head_dim;
  const size_t n = static_cast<size_t>(d);
  switch (L.format()) {
    case PageFormat::kBf16:
      for (int i = 0; i < d; ++i) out[i] = bf16_to_float(load<uint16_t>(page + code_off + 2 * i));
      break;
    case PageFormat::kFp8:
      fp8_decode_vector({page + code_off, n}, load<float>(page + meta_off), {out, n});
      break;
    case PageFormat::kTq3:
      tq3_decode({page + code_off, tq3_packed_bytes(d)}, load<uint16_t>(page + meta_off), *rot, {out, n});
      break;
    case PageFormat::kTq4:
      Tq4Codec::decode({page + code_off, tq4_packed_bytes(d)}, load<uint16_t>(page + meta_off), *rot, {out, n});
      break;
  }
}

}  // namespace

void write_token(std::span<uint8_t> page, const PageLayout& L, int token, std::span<const float> k,
                 std::span<const float> v, EncodeStats* stats) {
  check_page(page.size(), L, "write_token");
  check_token(token, L, "write_token");
  const auto& g = L.geometry();
  const size_t n = static_cast<size_t>(g.kv_heads) * g.head_dim;
  require(k.size() == n && v.size() == n, "write_token: K/V rows have " + std::to_string(k.size()) + "/" +
                                              std::to_string(v.size()) + " floats, expected " +
                                              std::to_string(n));
  require(format_spec(L.format()).appendable,
          std::string("write_token: ") + to_string(L.format()) + " pages are sealed and made by conversion");
  for (int h = 0; h < g.kv_heads; ++h) {
    encode_vec(page.data(), L, L.k_codes(h, token), L.k_meta(h, token), k.data() + h * g.head_dim, stats);
    encode_vec(page.data(), L, L.v_codes(h, token), L.v_meta(h, token), v.data() + h * g.head_dim, stats);
  }
}

void read_token_head(std::span<const uint8_t> page, const PageLayout& L, int token, int head,
                     std::span<const Rotation> rotations, std::span<float> k_out, std::span<float> v_out) {
  check_page(page.size(), L, "read_token_head");
  check_token(token, L, "read_token_head");
  const auto& g = L.geometry();
  require(head >= 0 && head < g.kv_heads, "read_token_head: head " + std::to_string(head) + " out of range");
  require(k_out.size() == static_cast<size_t>(g.head_dim) && v_out.size() == k_out.size(),
          "read_token_head: output spans must hold head_dim floats");
  const Rotation* rot = nullptr;
  if (format_spec(L.format()).rotated) {
    check_rotations(rotations, L, "read_token_head");
    rot = &rotations[head];
  }
  decode_vec(page.data(), L, L.k_codes(head, token), L.k_meta(head, token), rot, k_out.data());
  decode_vec(page.data(), L, L.v_codes(head, token), L.v_meta(head, token), rot, v_out.data());
}

namespace {

template <class Book, PageFormat F>
void fp8_to_rotated(std::span<const uint8_t> src, const PageLayout& SL, std::span<uint8_t> dst, const PageLayout& DL,
                    std::span<const Rotation> rotations, int tokens, Tq3Policy policy, EncodeStats* stats,
                    const char* where) {
  check_conversion(src.size(), SL, PageFormat::kFp8, dst.size(), DL, F, rotations, tokens, where);
  const auto& g = SL.geometry();
  std::fill(dst.begin(), dst.end(), uint8_t{0});
  const size_t d = static_cast<size_t>(g.head_dim);
  float buf[kMaxHeadDim];
  for (int h = 0; h < g.kv_heads; ++h) {
    for (int t = 0; t < tokens; ++t) {
      for (int kv = 0; kv < 2; ++kv) {
        const size_t so = kv ? SL.v_codes(h, t) : SL.k_codes(h, t);
        const size_t sm = kv ? SL.v_meta(h, t) : SL.k_meta(h, t);
        fp8_decode_vector({src.data() + so, d}, load<float>(src.data() + sm), {buf, d});
        rotations[h].forward({buf, d});
        const size_t dof = kv ? DL.v_codes(h, t) : DL.k_codes(h, t);
        const size_t dm = kv ? DL.v_meta(h, t) : DL.k_meta(h, t);
        const uint16_t a = RotatedCodec<Book>::encode_rotated(
            {buf, d}, {dst.data() + dof, Book::packed_bytes(g.head_dim)}, kv ? policy.values : policy.keys, stats);
        store<uint16_t>(dst.data() + dm, a);
      }
    }
  }
}

void rotated_to_fp8(std::span<const uint8_t> src, const PageLayout& SL, std::span<uint8_t> dst, const PageLayout& DL,
                    std::span<const Rotation> rotations, int tokens, EncodeStats* stats, PageFormat from,
                    const char* where) {
  check_conversion(src.size(), SL, from, dst.size(), DL, PageFormat::kFp8, rotations, tokens, where);
  const auto& g = SL.geometry();
  std::fill(dst.begin(), dst.end(), uint8_t{0});
  const size_t d = static_cast<size_t>(g.head_dim);
  float buf[kMaxHeadDim];
  for (int h = 0; h < g.kv_heads; ++h) {
    for (int t = 0; t < tokens; ++t) {
      for (int kv = 0; kv < 2; ++kv) {
        decode_vec(src.data(), SL, kv ? SL.v_codes(h, t) : SL.k_codes(h, t),
                   kv ? SL.v_meta(h, t) : SL.k_meta(h, t), &rotations[h], buf);
        const float s = fp8_encode_vector({buf, d}, {dst.data() + (kv ? DL.v_codes(h, t) : DL.k_codes(h, t)), d},
                                          stats);
        store<float>(dst.data() + (kv ? DL.v_meta(h, t) : DL.k_meta(h, t)), s);
      }
    }
  }
}

}  // namespace

void convert_fp8_to_tq3(std::span<const uint8_t> src, const PageLayout& SL, std::span<uint8_t> dst,
                        const PageLayout& DL, std::span<const Rotation> rotations, int tokens, Tq3Policy policy,
                        EncodeStats* stats) {
  fp8_to_rotated<Tq3Book, PageFormat::kTq3>(src, SL, dst, DL, rotations, tokens, policy, stats, "convert_fp8_to_tq3");
}

void convert_tq3_to_fp8(std::span<const uint8_t> src, const PageLayout& SL, std::span<uint8_t> dst,
                        const PageLayout& DL, std::span<const Rotation> rotations, int tokens, EncodeStats* stats) {
  rotated_to_fp8(src, SL, dst, DL, rotations, tokens, stats, PageFormat::kTq3, "convert_tq3_to_fp8");
}

void convert_fp8_to_tq4(std::span<const uint8_t> src, const PageLayout& SL, std::span<uint8_t> dst,
                        const PageLayout& DL, std::span<const Rotation> rotations, int tokens, Tq3Policy policy,
                        EncodeStats* stats) {
  fp8_to_rotated<Tq4Book, PageFormat::kTq4>(src, SL, dst, DL, rotations, tokens, policy, stats, "convert_fp8_to_tq4");
}

void convert_tq4_to_fp8(std::span<const uint8_t> src, const PageLayout& SL, std::span<uint8_t> dst,
                        const PageLayout& DL, std::span<const Rotation> rotations, int tokens, EncodeStats* stats) {
  rotated_to_fp8(src, SL, dst, DL, rotations, tokens, stats, PageFormat::kTq4, "convert_tq4_to_fp8");
}

void convert_fp8_to_rotated(std::span<const uint8_t> src, const PageLayout& SL, std::span<uint8_t> dst,
                            const PageLayout& DL, std::span<const Rotation> rotations, int tokens, Tq3Policy policy,
                            EncodeStats* stats) {
  switch (DL.format()) {
    case PageFormat::kTq3:
      return convert_fp8_to_tq3(src, SL, dst, DL, rotations, tokens, policy, stats);
    case PageFormat::kTq4:
      return convert_fp8_to_tq4(src, SL, dst, DL, rotations, tokens, policy, stats);
    default:
      throw std::invalid_argument(std::string("convert_fp8_to_rotated: ") + to_string(DL.format()) +
                                  " is not a rotated format");
  }
}

void convert_rotated_to_fp8(std::span<const uint8_t> src, const PageLayout& SL, std::span<uint8_t> dst,
                            const PageLayout& DL, std::span<const Rotation> rotations, int tokens, EncodeStats* stats) {
  switch (SL.format()) {
    case PageFormat::kTq3:
      return convert_tq3_to_fp8(src, SL, dst, DL, rotations, tokens, stats);
    case PageFormat::kTq4:
      return convert_tq4_to_fp8(src, SL, dst, DL, rotations, tokens, stats);
    default:
      throw std::invalid_argument(std::string("convert_rotated_to_fp8: ") + to_string(SL.format()) +
                                  " is not a rotated format");
  }
}

}  // namespace minimakv::codec
