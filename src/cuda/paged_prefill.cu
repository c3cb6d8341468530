#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "attention_device.cuh"
#include "require.h"
#include "minimakv/codec/rotation.h"
#include "minimakv/cuda/paged_prefill.h"

namespace minimakv::cuda {

namespace {

using namespace detail;

constexpr int kRows = kPrefillTileRows;  // mma rows per CTA: 4 warps x 16
constexpr int kKeys = 64;  // keys per tile
constexpr int kThreads = 128;

struct PrefillParams : AttendParams {
  const uint8_t* plan;
  uint32_t off_seq, off_split, off_work, off_tiles, off_entry;
  int n_seqs, n_works, rows;
  double* row_total;  // [rows][q_heads], for the page scores
  int tile_tokens, tokens_per_page;
};

// The sequence a row belongs to (rows are consecutive, sequences in order).
__device__ inline int seq_of_row(const PrefillSeqRec* seqs, int n_seqs, int row) {
  int s = 0;
  while (s + 1 < n_seqs && seqs[s + 1].row_begin <= row) ++s;
  return s;
}

template <int D>
struct PrefillSmem {
  static constexpr int kQStride = D + 8;  // halves; odd multiples of 16 bytes: no bank conflicts in mma loads
  static constexpr int kVStride = kKeys + 8;
  static constexpr size_t kQ = 0;  // the query as two fp16 terms, hi + lo (see prefill_split)
  static constexpr size_t kQLo = kQ + sizeof(__half) * kRows * kQStride;
  static constexpr size_t kK = kQLo + sizeof(__half) * kRows * kQStride;
  static constexpr size_t kVt = kK + sizeof(__half) * kKeys * kQStride;
  static constexpr size_t kKScale = kVt + sizeof(__half) * D * kVStride;
  static constexpr size_t kVScale = kKScale + sizeof(float) * kKeys;
  static constexpr size_t kPos = kVScale + sizeof(float) * kKeys;
  static constexpr size_t kEntry = kPos + sizeof(int) * kKeys;
  static constexpr size_t kRowPtr = (kEntry + sizeof(int) * kKeys + 15) / 16 * 16;
  static constexpr size_t kLevels = kRowPtr + sizeof(uint64_t) * kKeys;
  static constexpr size_t kBytes = kLevels + sizeof(float) * 8;
};

// Eight consecutive elements of one K or V row, decoded to fp16 (before the row's scale).
template <codec::PageFormat F>
__device__ inline void decode8(const uint8_t* row, int c, const float* levels, __half (&x)[8]) {
  if constexpr (F == codec::PageFormat::kBf16) {
    const uint4 w = *reinterpret_cast<const uint4*>(row + 2 * c);
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __float2half_rn(__uint_as_float(ws[i] << 16));
      x[2 * i + 1] = __float2half_rn(__uint_as_float(ws[i] & 0xffff0000u));
    }
  } else if constexpr (F == codec::PageFormat::kFp8) {
    const uint2 w = *reinterpret_cast<const uint2*>(row + c);
    const uint32_t ws[2] = {w.x, w.y};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>((ws[i / 2] >> (16 * (i % 2))) & 0xffffu);
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      x[2 * i] = __half(__half_raw{h.x});
      x[2 * i + 1] = __half(__half_raw{h.y});
    }
  } else {
    // Eight 3-bit codes = three bytes, code j at bits [3j, 3j + 3) (little-endian bit order).
    const uint8_t* p = row + 3 * c / 8;
    const uint32_t w =
        static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16);
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = __float2half_rn(levels[(w >> (3 * j)) & 7u]);
  }
}

// One CTA: query tile x key split of format F, one KV head. Each warp owns 16 mma rows (row r = token
// r / G of the tile, query head r % G of the group).
template <codec::PageFormat F, int D>
__device__ void prefill_split(const PrefillParams& p, int w, int h, uint8_t* smem) {
  using SM = PrefillSmem<D>;
  constexpr int QS = SM::kQStride, VS = SM::kVStride;
  __half* qs = reinterpret_cast<__half*>(smem + SM::kQ);
  __half* qlo = reinterpret_cast<__half*>(smem + SM::kQLo);
  __half* ks = reinterpret_cast<__half*>(smem + SM::kK);
  __half* vt = reinterpret_cast<__half*>(smem + SM::kVt);
  float* kscale = reinterpret_cast<float*>(smem + SM::kKScale);
  float* vscale = reinterpret_cast<float*>(smem + SM::kVScale);
  int* kpos = reinterpret_cast<int*>(smem + SM::kPos);
  int* kent = reinterpret_cast<int*>(smem + SM::kEntry);
  uint64_t* krow = reinterpret_cast<uint64_t*>(smem + SM::kRowPtr);
  float* levels = reinterpret_cast<float*>(smem + SM::kLevels);

  const auto* seqs = reinterpret_cast<const PrefillSeqRec*>(p.plan + p.off_seq);
  const auto* splits = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split);
  const auto* works = reinterpret_cast<const PrefillWorkRec*>(p.plan + p.off_work);
  const auto* entries = reinterpret_cast<const PlanEntry*>(p.plan + p.off_entry);
  const PrefillWorkRec wk = works[w];
  const PlanSplit sp = splits[wk.split];
  const PrefillSeqRec sq = seqs[sp.seq];
  const int G = p.group, TQ = p.tile_tokens, B = p.tokens_per_page;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  if (threadIdx.x < 8) levels[threadIdx.x] = codec::tq3_level(static_cast<int>(threadIdx.x));

  // The query tile, pre-scaled so that logits come out in base 2, as hi + lo fp16 terms: two MMAs per
  // K fragment give the logits to about fp32 accuracy (K codes are exact in fp16), so page scores and
  // the softmax do not inherit fp16 rounding.
  const float* qsrc = kRotatedFormat<F> ? p.q_rot : p.q;
  const float qscale = p.scale * kLog2e;
  const int tile_rows = min(TQ, sq.n - wk.tile_token);
  for (int i = threadIdx.x; i < kRows * (D / 2); i += kThreads) {
    const int r = i / (D / 2), d2 = 2 * (i % (D / 2)), tok = r / G;
    float a = 0.0f, b = 0.0f;
    if (tok < tile_rows) {
      const size_t o =
          (static_cast<size_t>(sq.row_begin + wk.tile_token + tok) * p.q_heads + static_cast<size_t>(h) * G + r % G) *
              D +
          d2;
      a = qsrc[o] * qscale;
      b = qsrc[o + 1] * qscale;
    }
    const __half2 hi = __floats2half2_rn(a, b);
    *reinterpret_cast<__half2*>(qs + r * QS + d2) = hi;
    *reinterpret_cast<uint32_t*>(qlo + r * QS + d2) =
        pack_half2(a - __half2float(__low2half(hi)), b - __half2float(__high2half(hi)));
  }
  int qpos[2], qtok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + g + 8 * i;
    qtok[i] = r / G < tile_rows ? wk.tile_token + r / G : -1;
    qpos[i] = qtok[i] >= 0 ? sq.first + qtok[i] : -1;  // -1 masks every key of a padding row
  }
  const int max_pos = sq.first + wk.tile_token + tile_rows - 1;

  const DeviceLayout L = p.pools.layout[codec::format_index(F)];
  const uint8_t* base = p.pools.base[codec::format_index(F)];
  const int n_entries = sp.entry_end - sp.entry_begin;
  const int span = sp.tok_end - sp.tok_begin;
  // Key slots: an entry of >= kKeys tokens takes whole tiles; smaller entries pack several per tile.
  const int slot = span >= kKeys ? (span + kKeys - 1) / kKeys * kKeys : span;
  const int n_tiles = (n_entries * slot + kKeys - 1) / kKeys;
  const bool want_pages = p.page_m != nullptr;

  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.0f, 0.0f};
  float o[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  int cur_e = -1;
  float pm[2] = {0.0f, 0.0f}, pl[2] = {0.0f, 0.0f};
  auto flush = [&](int e) {
    if (t4 != 0) return;
    const PlanEntry en = entries[e];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (qtok[i] < 0) continue;
      const int r = warp * 16 + g + 8 * i;
      const size_t idx = static_cast<size_t>(sq.stats_offset) +
                         (static_cast<size_t>(qtok[i]) * sq.pages + en.logical) * p.q_heads +
                         static_cast<size_t>(h) * G + r % G;
      p.page_m[idx] = pl[i] > 0.0f ? pm[i] * kLn2 : -INFINITY;
      p.page_l[idx] = pl[i];
    }
  };

  for (int tile = 0; tile < n_tiles; ++tile) {
    __syncthreads();  // the previous tile is consumed (and the query tile is written, first time round)
    if (threadIdx.x < kKeys) {
      const int j = threadIdx.x, idx = tile * kKeys + j;
      const int e = sp.entry_begin + idx / slot, tok = sp.tok_begin + idx % slot;
      int pos = INT_MAX;
      float kss = 0.0f, vss = 0.0f;
      uint64_t rowoff = 0;
      if (e < sp.entry_end) {
        const PlanEntry en = entries[e];
        if (idx % slot < span && tok < static_cast<int>(en.tokens)) {
          pos = static_cast<int>(en.logical) * B + tok;
          const uint8_t* page = base + static_cast<size_t>(en.page_id) * L.page_bytes;
          rowoff = static_cast<size_t>(en.page_id) * L.page_bytes + static_cast<size_t>(h) * L.code_stride +
                   static_cast<size_t>(tok) * L.row + 1;  // +1: 0 marks an invalid key
          kss = load_meta<F>(page + L.k_meta + static_cast<size_t>(h) * L.meta_stride +
                             static_cast<size_t>(tok) * L.meta);
          vss = load_meta<F>(page + L.v_meta + static_cast<size_t>(h) * L.meta_stride +
                             static_cast<size_t>(tok) * L.meta);
        }
      }
      kpos[j] = pos;
      kent[j] = min(e, sp.entry_end - 1);
      kscale[j] = kss;
      vscale[j] = vss;
      krow[j] = rowoff;
    }
    __syncthreads();
    if (kpos[0] > max_pos) {
      // Keys come in increasing position order: once a tile's valid keys all lie past the tile's last
      // query, so does every later tile. A tile of padding only is skipped.
      bool any_seen = false, any_past = false;
      for (int j = 0; j < kKeys; ++j) {
        any_seen |= kpos[j] <= max_pos;
        any_past |= kpos[j] != INT_MAX && kpos[j] > max_pos;
      }
      if (!any_seen) {
        if (any_past) break;
        continue;
      }
    }
    // Decode the K tile row-major and the V tile transposed (Vt[d][key]) into shared memory.
    for (int i = threadIdx.x; i < kKeys * (D / 8); i += kThreads) {
      const int j = i / (D / 8), c = 8 * (i % (D / 8));
      __align__(16) __half kx[8];
      __half vx[8];
      const uint64_t ro = krow[j];
      if (ro != 0) {
        const uint8_t* kr = base + (ro - 1);
        decode8<F>(kr, c, levels, kx);
        decode8<F>(kr + L.v_codes, c, levels, vx);
        // V rows carry their scale (values in fp16's normal range); K scales apply to the fp32 logits.
        const float vsc = vscale[j];
#pragma unroll
        for (int e = 0; e < 8; ++e) vx[e] = __float2half_rn(__half2float(vx[e]) * vsc);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kx[e] = vx[e] = __float2half_rn(0.0f);
      }
      *reinterpret_cast<uint4*>(ks + j * QS + c) = *reinterpret_cast<const uint4*>(kx);
#pragma unroll
      for (int e = 0; e < 8; ++e) vt[(c + e) * VS + j] = vx[e];
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows and the 64 keys (base-2 logits after the key scales).
    float s[kKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const __half* qw = (part == 0 ? qs : qlo) + (warp * 16 + g) * QS + 2 * t4;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a[4] = {*reinterpret_cast<const uint32_t*>(qw + kk * 16),
                               *reinterpret_cast<const uint32_t*>(qw + 8 * QS + kk * 16),
                               *reinterpret_cast<const uint32_t*>(qw + kk * 16 + 8),
                               *reinterpret_cast<const uint32_t*>(qw + 8 * QS + kk * 16 + 8)};
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
          const __half* kb = ks + (nt * 8 + g) * QS + kk * 16 + 2 * t4;
          mma16816(s[nt], a, *reinterpret_cast<const uint32_t*>(kb), *reinterpret_cast<const uint32_t*>(kb + 8));
        }
      }
    }
    float mref[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int j = nt * 8 + 2 * t4 + c;
          float& x = s[nt][2 * i + c];
          x = kpos[j] <= qpos[i] ? x * kscale[j] : -INFINITY;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(m[i], mx);
      mref[i] = mn == -INFINITY ? 0.0f : mn;
      const float corr = exp2f(m[i] - mref[i]);
      m[i] = mn;
      lsum[i] *= corr;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        o[nt][2 * i] *= corr;
        o[nt][2 * i + 1] *= corr;
      }
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = s[nt][2 * i + c];
          x = exp2f(x - mref[i]);
          lsum[i] += x;
        }
    }
    if (want_pages) {
      const int e_lo = kent[0], e_hi = kent[kKeys - 1];
      for (int e = e_lo; e <= e_hi; ++e) {
        float part[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            if (kent[nt * 8 + 2 * t4 + c] == e) {
              part[0] += s[nt][c];
              part[1] += s[nt][2 + c];
            }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          part[i] += __shfl_xor_sync(0xffffffffu, part[i], 1);
          part[i] += __shfl_xor_sync(0xffffffffu, part[i], 2);
        }
        if (e != cur_e) {
          if (cur_e >= 0) flush(cur_e);
          cur_e = e;
          pm[0] = pm[1] = 0.0f;
          pl[0] = pl[1] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float c1, c2;
          merge_ml(pm[i], pl[i], mref[i], part[i], c1, c2);
        }
      }
    }
    // O += P V, with P in [0, 1] as the fp16 A operand straight from the S fragments.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t a[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]), pack_half2(s[2 * kk][2], s[2 * kk][3]),
                             pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        const __half* vb = vt + (nt * 8 + g) * VS + kk * 16 + 2 * t4;
        mma16816(o[nt], a, *reinterpret_cast<const uint32_t*>(vb), *reinterpret_cast<const uint32_t*>(vb + 8));
      }
    }
  }
  if (want_pages && cur_e >= 0) flush(cur_e);

    // Normalised partials of this (work, KV head): rows of the quad share (m, l) after the sum.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = lsum[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = warp * 16 + g + 8 * i;
    const size_t pr = (static_cast<size_t>(w) * p.kv_heads + h) * kRows + r;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(p.part_o + pr * D + nt * 8 + 2 * t4) =
          make_float2(o[nt][2 * i] * inv, o[nt][2 * i + 1] * inv);
    if (t4 == 0) {
      p.part_m[pr] = l > 0.0f ? m[i] * kLn2 : -INFINITY;
      p.part_l[pr] = l;
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) prefill_split_kernel(PrefillParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int w = blockIdx.x, h = blockIdx.y;
  if (w >= p.n_works) return;
  const auto* splits = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split);
  const auto* works = reinterpret_cast<const PrefillWorkRec*>(p.plan + p.off_work);
  switch (splits[works[w].split].format) {
    case codec::format_index(codec::PageFormat::kBf16):
      prefill_split<codec::PageFormat::kBf16, D>(p, w, h, smem);
      break;
    case codec::format_index(codec::PageFormat::kFp8):
      prefill_split<codec::PageFormat::kFp8, D>(p, w, h, smem);
      break;
    default:
      prefill_split<codec::PageFormat::kTq3, D>(p, w, h, smem);
      break;
  }
}

// q_rot[row][hq] = R_{kv head} q[row][hq]: signs, FWHT, 1/sqrt(D).
template <int D>
__global__ void prefill_rotate_kernel(PrefillParams p) {
  const int row = blockIdx.x, hq = blockIdx.y;
  __shared__ float x[D];
  const size_t o = (static_cast<size_t>(row) * p.q_heads + hq) * D;
  rotate_query<D>(p.q + o, p.signs + hq / p.group * D, x, p.q_rot + o);
}

// One block per (row, query head): every partial of the row's query tile under one softmax, one
// inverse rotation for the TQ3 share.
template <int D>
__global__ void prefill_merge_kernel(PrefillParams p) {
  const int row = blockIdx.x, hq = blockIdx.y;
  __shared__ float x[D];
  const auto* seqs = reinterpret_cast<const PrefillSeqRec*>(p.plan + p.off_seq);
  const auto* splits = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split);
  const auto* works = reinterpret_cast<const PrefillWorkRec*>(p.plan + p.off_work);
  const auto* tiles = reinterpret_cast<const int32_t*>(p.plan + p.off_tiles);
  const PrefillSeqRec sq = seqs[seq_of_row(seqs, p.n_seqs, row)];
  const int t = row - sq.row_begin, G = p.group, h = hq / G, i = threadIdx.x;
  const int tile = sq.tile_begin + t / p.tile_tokens, r = (t % p.tile_tokens) * G + hq % G;
  const int w0 = tiles[tile], w1 = tiles[tile + 1];
  float mm = -INFINITY;
  for (int w = w0; w < w1; ++w) {
    const size_t pr = (static_cast<size_t>(w) * p.kv_heads + h) * kRows + r;
    if (p.part_l[pr] > 0.0f) mm = fmaxf(mm, p.part_m[pr]);
  }
  float ll = 0.0f, plain = 0.0f, rot = 0.0f;
  for (int w = w0; w < w1; ++w) {
    const size_t pr = (static_cast<size_t>(w) * p.kv_heads + h) * kRows + r;
    const float ls = p.part_l[pr];
    if (!(ls > 0.0f)) continue;
    const float wt = ls * expf(p.part_m[pr] - mm);
    ll += wt;
    const float v = wt * p.part_o[pr * D + i];
    if (splits[works[w].split].format == static_cast<int>(codec::PageFormat::kTq3))
      rot += v;
    else
      plain += v;
  }
  const size_t rh = static_cast<size_t>(row) * p.q_heads + hq;
  write_merged<D>(plain, rot, mm, ll, p.signs + h * D, x, p.out + rh * D, p.m ? p.m + rh : nullptr,
                  p.l ? p.l + rh : nullptr);
}

// row_total[row][hq] = sum over the pages the row's position reaches of exp(m_p - m) l_p / l.
__global__ void prefill_row_total_kernel(PrefillParams p) {
  const int row = blockIdx.x, hq = threadIdx.x;
  if (hq >= p.q_heads) return;
  const auto* seqs = reinterpret_cast<const PrefillSeqRec*>(p.plan + p.off_seq);
  const PrefillSeqRec sq = seqs[seq_of_row(seqs, p.n_seqs, row)];
  const int t = row - sq.row_begin, reach = (sq.first + t) / p.tokens_per_page + 1;
  const size_t mi = static_cast<size_t>(row) * p.q_heads + hq;
  double total = 0.0;
  for (int pg = 0; pg < reach; ++pg) {
    const size_t i = static_cast<size_t>(sq.stats_offset) + (static_cast<size_t>(t) * sq.pages + pg) * p.q_heads + hq;
    total += page_share(p.page_m[i], p.page_l[i], p.m[mi], p.l[mi]);
  }
  p.row_total[mi] = total;
}

// One block per (page, sequence): r_p = mean over rows and heads of share / row total.
__global__ void prefill_page_score_kernel(PrefillParams p) {
  const int pg = blockIdx.x, s = blockIdx.y;
  __shared__ double scratch[32];
  const PrefillSeqRec sq = reinterpret_cast<const PrefillSeqRec*>(p.plan + p.off_seq)[s];
  if (pg >= sq.pages) return;
  double sum = 0.0;
  const int items = sq.n * p.q_heads;
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int t = i / p.q_heads, hq = i % p.q_heads;
    if (pg > (sq.first + t) / p.tokens_per_page) continue;
    const size_t mi = static_cast<size_t>(sq.row_begin + t) * p.q_heads + hq;
    const size_t at = static_cast<size_t>(sq.stats_offset) + (static_cast<size_t>(t) * sq.pages + pg) * p.q_heads + hq;
    const double total = p.row_total[mi];
    if (total > 0.0) sum += page_share(p.page_m[at], p.page_l[at], p.m[mi], p.l[mi]) / total;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) p.score_acc[sq.score_offset + pg] += p.score_weight * static_cast<float>(sum / items);
}

template <int D>
void launch_prefill(const PrefillParams& p, int max_pages, cudaStream_t st) {
  constexpr size_t bytes = PrefillSmem<D>::kBytes;
  static const bool configured = [] {
    check(cudaFuncSetAttribute(prefill_split_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "prefill: shared memory attribute");
    return true;
  }();
  (void)configured;
  prefill_rotate_kernel<D><<<dim3(p.rows, p.q_heads), D, 0, st>>>(p);
  prefill_split_kernel<D><<<dim3(p.n_works, p.kv_heads), kThreads, bytes, st>>>(p);
  prefill_merge_kernel<D><<<dim3(p.rows, p.q_heads), D, 0, st>>>(p);
  if (p.score_acc) {
    prefill_row_total_kernel<<<p.rows, (p.q_heads + 31) / 32 * 32, 0, st>>>(p);
    prefill_page_score_kernel<<<dim3(max_pages, p.n_seqs), 256, 0, st>>>(p);
  }
}

size_t align16(size_t n) {
  return (n + 15) / 16 * 16;
}

struct BlobLayout {
  size_t seq, split, work, tiles, entry, bytes;
  explicit BlobLayout(const PrefillPlan& plan) {
    seq = 0;
    split = align16(seq + sizeof(PrefillSeqRec) * plan.seqs.size());
    work = align16(split + sizeof(PlanSplit) * plan.splits.size());
    tiles = align16(work + sizeof(PrefillWorkRec) * plan.works.size());
    entry = align16(tiles + sizeof(int32_t) * plan.tile_work_begin.size());
    bytes = align16(entry + sizeof(PlanEntry) * plan.entries.size());
  }
};

}  // namespace

PrefillWorkspace::PrefillWorkspace(const DecodeShape& shape) : shape_(shape) {
  codec::require_supported_head_dim(shape.head_dim, "PrefillWorkspace");
  require(shape.kv_heads > 0 && shape.q_heads % shape.kv_heads == 0 && shape.q_heads / shape.kv_heads <= 8,
          "PrefillWorkspace: unsupported head counts");
  check(cudaEventCreateWithFlags(&staged_copied_, cudaEventDisableTiming), "PrefillWorkspace: event");
}

PrefillWorkspace::~PrefillWorkspace() {
  if (staged_copied_) cudaEventDestroy(staged_copied_);
}

DecodeStats PrefillWorkspace::run(const PrefillPlan& plan, const PoolViews& pools, const PrefillBuffers& io,
                                  cudaStream_t stream) {
  require(io.q && io.signs && io.out, "PrefillWorkspace::run: q, signs and out are required");
  require((io.page_m == nullptr) == (io.page_l == nullptr), "PrefillWorkspace::run: page_m and page_l go together");
  require(!io.score_acc || (io.page_m && io.m && io.l), "PrefillWorkspace::run: page scores need m, l, page_m, page_l");
  require(plan.tile_tokens == kRows / (shape_.q_heads / shape_.kv_heads) && plan.rows > 0 && !plan.works.empty(),
          "PrefillWorkspace::run: the plan was made for another shape, or is empty");
  DecodeStats st;
  std::array<bool, codec::kNumPageFormats> seen{};
  for (const auto& sp : plan.splits) {
    require(pools.base[sp.format] != nullptr, "PrefillWorkspace::run: no pool for a format the plan reads");
    seen[sp.format] = true;
  }
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    if (seen[f]) st.bytes_read[f] = plan.key_reads[f] * 2ull * (pools.layout[f].row + pools.layout[f].meta);
  const bool tq3 = seen[2], exact = seen[0] || seen[1];
  st.route = tq3 && exact ? "mixed" : tq3 ? "tq3-only" : seen[1] && !seen[0] ? "fp8-only" : "dense";
  st.splits = static_cast<int>(plan.splits.size());
  st.entries = static_cast<int>(plan.entries.size());

  const BlobLayout bl(plan);
  const size_t qh = static_cast<size_t>(shape_.q_heads), D = static_cast<size_t>(shape_.head_dim);
  // Growing frees buffers the previous call's kernels may still read: wait for the device first.
  const bool grow_blob = bl.bytes > blob_cap_, grow_rows = static_cast<size_t>(plan.rows) > rows_cap_,
             grow_works = plan.works.size() > works_cap_;
  if (grow_blob || grow_rows || grow_works) check(cudaStreamSynchronize(stream), "PrefillWorkspace: grow");
  if (grow_blob) {
    blob_cap_ = std::max(bl.bytes, 2 * blob_cap_);
    staging_ = PinnedArray<uint8_t>(blob_cap_);
    plan_ = DeviceArray<uint8_t>(blob_cap_);
  }
  if (grow_rows) {
    rows_cap_ = std::max<size_t>(plan.rows, 2 * rows_cap_);
    q_rot_ = DeviceArray<float>(rows_cap_ * qh * D);
    row_total_ = DeviceArray<double>(rows_cap_ * qh);
  }
  if (grow_works) {
    works_cap_ = std::max(plan.works.size(), 2 * works_cap_);
    const size_t parts = works_cap_ * static_cast<size_t>(shape_.kv_heads) * kRows;
    part_o_ = DeviceArray<float>(parts * D);
    part_m_ = DeviceArray<float>(parts);
    part_l_ = DeviceArray<float>(parts);
  }
  // The pinned staging buffer may still be the source of the previous call's asynchronous copy.
  check(cudaEventSynchronize(staged_copied_), "PrefillWorkspace: staging");
  uint8_t* blob = staging_.get();
  std::memcpy(blob + bl.seq, plan.seqs.data(), sizeof(PrefillSeqRec) * plan.seqs.size());
  std::memcpy(blob + bl.split, plan.splits.data(), sizeof(PlanSplit) * plan.splits.size());
  std::memcpy(blob + bl.work, plan.works.data(), sizeof(PrefillWorkRec) * plan.works.size());
  std::memcpy(blob + bl.tiles, plan.tile_work_begin.data(), sizeof(int32_t) * plan.tile_work_begin.size());
  if (!plan.entries.empty()) std::memcpy(blob + bl.entry, plan.entries.data(), sizeof(PlanEntry) * plan.entries.size());
  check(cudaMemcpyAsync(plan_.get(), blob, bl.bytes, cudaMemcpyHostToDevice, stream), "PrefillWorkspace: plan copy");
  check(cudaEventRecord(staged_copied_, stream), "PrefillWorkspace: event");

  PrefillParams p{};
  p.plan = plan_.get();
  p.off_seq = static_cast<uint32_t>(bl.seq);
  p.off_split = static_cast<uint32_t>(bl.split);
  p.off_work = static_cast<uint32_t>(bl.work);
  p.off_tiles = static_cast<uint32_t>(bl.tiles);
  p.off_entry = static_cast<uint32_t>(bl.entry);
  p.n_seqs = static_cast<int>(plan.seqs.size());
  p.n_works = static_cast<int>(plan.works.size());
  p.rows = plan.rows;
  set_attend_params(p, pools, shape_, io, q_rot_.get(), part_o_.get(), part_m_.get(), part_l_.get());
  p.row_total = row_total_.get();
  p.tile_tokens = plan.tile_tokens;
  p.tokens_per_page = shape_.tokens_per_page;
  int max_pages = 0;
  for (const auto& sq : plan.seqs) max_pages = std::max(max_pages, sq.pages);
  switch (shape_.head_dim) {
    case 64:
      launch_prefill<64>(p, max_pages, stream);
      break;
    case 128:
      launch_prefill<128>(p, max_pages, stream);
      break;
    default:
      launch_prefill<256>(p, max_pages, stream);
      break;
  }
  check(cudaGetLastError(), "PrefillWorkspace::run");
  return st;
}

}  // namespace minimakv::cuda
