// Reading and writing whole (token, all heads) rows and whole layer-pages in their stored format.
//
// Owns: the CPU reference of the page-writing operations the cache and the GPU kernels perform:
// quantize-on-append into BF16 or FP8 pages, FP8 -> TQ3 / TQ4 conversion (rotate, normalise, quantize,
// pack) and TQ3 / TQ4 -> FP8 promotion (decode, rotate back, re-quantize). Pure functions over caller-owned spans,
// no allocation. Rotations are given per KV head of the page's layer (rotations.size() == kv_heads).
// Invariants: a function validates every size before it writes a byte (std::invalid_argument otherwise);
// TQ3 and TQ4 pages store keys and values in the rotated domain; decoding returns the original domain unless the
// name says "rotated".
#pragma once

#include <cstdint>
#include <span>

#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/page_layout.h"
#include "minimakv/codec/rotation.h"
#include "minimakv/codec/tq3.h"
#include "minimakv/codec/tq4.h"

namespace minimakv::codec {

// The norm corrections of the rotated Stale formats (TQ3 and TQ4 alike).
struct Tq3Policy {
  NormCorrection keys = NormCorrection::kUnbiased;
  NormCorrection values = NormCorrection::kMinMse;
};

// k and v hold kv_heads * head_dim floats (head-major) of one token.
void write_token(std::span<uint8_t> page, const PageLayout& layout, int token, std::span<const float> k,
                 std::span<const float> v, EncodeStats* stats = nullptr);

// Decodes one (token, head) vector of K and of V into d floats each (original domain).
void read_token_head(std::span<const uint8_t> page, const PageLayout& layout, int token, int head,
                     std::span<const Rotation> rotations, std::span<float> k_out, std::span<float> v_out);

// FP8 layer-page -> TQ3 layer-page, tokens [0, tokens) (the rest of dst is zeroed).
void convert_fp8_to_tq3(std::span<const uint8_t> src, const PageLayout& src_layout, std::span<uint8_t> dst,
                        const PageLayout& dst_layout, std::span<const Rotation> rotations, int tokens,
                        Tq3Policy policy = {}, EncodeStats* stats = nullptr);

// TQ3 layer-page -> FP8 layer-page (promotion), tokens [0, tokens).
void convert_tq3_to_fp8(std::span<const uint8_t> src, const PageLayout& src_layout, std::span<uint8_t> dst,
                        const PageLayout& dst_layout, std::span<const Rotation> rotations, int tokens,
                        EncodeStats* stats = nullptr);

// FP8 layer-page -> TQ4 layer-page and back, as the TQ3 pair.
void convert_fp8_to_tq4(std::span<const uint8_t> src, const PageLayout& src_layout, std::span<uint8_t> dst,
                        const PageLayout& dst_layout, std::span<const Rotation> rotations, int tokens,
                        Tq3Policy policy = {}, EncodeStats* stats = nullptr);
void convert_tq4_to_fp8(std::span<const uint8_t> src, const PageLayout& src_layout, std::span<uint8_t> dst,
                        const PageLayout& dst_layout, std::span<const Rotation> rotations, int tokens,
                        EncodeStats* stats = nullptr);

// The conversion pair of a rotated format (TQ3 or TQ4) by its table entry; others throw
// std::invalid_argument. For callers that convert whatever a plan names (the page storages).
void convert_fp8_to_rotated(std::span<const uint8_t> src, const PageLayout& src_layout, std::span<uint8_t> dst,
                            const PageLayout& dst_layout, std::span<const Rotation> rotations, int tokens,
                            Tq3Policy policy = {}, EncodeStats* stats = nullptr);
void convert_rotated_to_fp8(std::span<const uint8_t> src, const PageLayout& src_layout, std::span<uint8_t> dst,
                            const PageLayout& dst_layout, std::span<const Rotation> rotations, int tokens,
                            EncodeStats* stats = nullptr);

}  // namespace minimakv::codec
