#include "minimakv/attention/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "minimakv/cache/kv_store.h"
#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/half.h"
#include "minimakv/codec/tq3.h"
#include "page_kernels.h"

namespace minimakv::attention {

namespace {

using codec::PageFormat;
constexpr int kMaxGroup = 8;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void axpy(float w, const float* x, float* y, int d) {
  for (int i = 0; i < d; ++i) y[i] += w * x[i];
}

// Rows of a split: the (query, head) pairs it computes, row r = j * G + g for query j of the block and
// head g of the GQA group. Every row reads the same K/V rows, so a tile decoded once serves them all:
// a decode step has one query (G rows), a chunked-prefill block up to kMaxRows / G queries.
constexpr int kMaxRows = kMaxGroup;

struct SplitOut {
  float m[kMaxRows];
  float l[kMaxRows];
  std::vector<float> o;  // [rows][d], normalised
};

// Queries n0 .. n0 + nq - 1 (query j attends to positions <= first_limit + j), KV head h, pages [p0, p1):
// the split's (m, l, O) per row. m_page / l_page point at query n0's [page][q_head] partials.
void run_split(const LayerInput& in, const float* q_block, int nq, uint32_t first_limit, int h, size_t p0, size_t p1,
               float scale, SplitOut& res, float* m_page, float* l_page) {
  const int d = in.head_dim, G = in.q_heads / in.kv_heads, R = nq * G;
  const size_t query_stride = in.pages.size() * static_cast<size_t>(in.q_heads);  // partials of one query
  alignas(64) float q[kMaxRows][codec::kMaxHeadDim];
  alignas(64) float qr[kMaxRows][codec::kMaxHeadDim];
  alignas(64) float acc[kMaxRows][codec::kMaxHeadDim];
  alignas(64) float accr[kMaxRows][codec::kMaxHeadDim];
  bool any_rotated = false;
  for (size_t p = p0; p < p1; ++p) any_rotated |= codec::format_spec(in.pages[p].format).rotated;
  for (int r = 0; r < R; ++r) {
    const float* src = q_block + static_cast<size_t>(r / G) * in.q_heads * d + static_cast<size_t>(h * G + r % G) * d;
    for (int i = 0; i < d; ++i) q[r][i] = src[i] * scale;
    if (any_rotated) {
      std::memcpy(qr[r], q[r], sizeof(float) * d);
      in.rotations[h].forward({qr[r], static_cast<size_t>(d)});  // once per split, not per key
    }
    std::fill(acc[r], acc[r] + d, 0.0f);
    std::fill(accr[r], accr[r] + d, 0.0f);
    res.m[r] = kNegInf;
    res.l[r] = 0.0f;
  }
  // Tokens of a page that row r sees: its query's causal limit cuts the page.
  const auto visible = [&](const PageView& pv, int r) -> uint32_t {
    const uint32_t limit = first_limit + static_cast<uint32_t>(r / G);
    return pv.first_position > limit ? 0 : std::min<uint32_t>(pv.tokens, limit - pv.first_position + 1);
  };
  thread_local std::vector<float> s;
  for (size_t p = p0; p < p1; ++p) {
    const PageView& pv = in.pages[p];
    const codec::PageLayout& L = *in.layouts[static_cast<int>(pv.format)];
    const uint32_t nt = visible(pv, R - 1);  // the block's last query sees the most
    s.resize(static_cast<size_t>(R) * std::max<uint32_t>(nt, 1));
    const bool rotated = codec::format_spec(pv.format).rotated;
    if (nt > 0) {
      // Each K row is decoded once for every row of the split.
      detail::page_logits(pv.format, pv.data + L.k_codes(h, 0), L.row_bytes(), pv.data + L.k_meta(h, 0), nt,
                          rotated ? qr[0] : q[0], codec::kMaxHeadDim, R, d, s.data());
    }
    for (int r = 0; r < R; ++r) {
      float* sr = s.data() + static_cast<size_t>(r) * nt;
      const uint32_t n_r = visible(pv, r);
      const size_t partial = static_cast<size_t>(r / G) * query_stride + p * in.q_heads + h * G + r % G;
      if (n_r == 0) {  // fully masked for this row: no mass, and no weight in the accumulation
        std::fill(sr, sr + nt, 0.0f);
        if (m_page) {
          m_page[partial] = kNegInf;
          l_page[partial] = 0.0f;
        }
        continue;
      }
      const float mp = detail::max_of(sr, n_r);
      const float m_new = std::max(res.m[r], mp);
      const float c_old = res.m[r] == kNegInf ? 0.0f : std::exp(res.m[r] - m_new);
      if (c_old != 1.0f) {
        for (int i = 0; i < d; ++i) {
          acc[r][i] *= c_old;
          accr[r][i] *= c_old;
        }
      }
      const float c_page = std::exp(mp - m_new);
      // The page's own l_p; the weights left in sr are relative to the running max.
      const float lp = detail::exp_sub_sum(sr, n_r, mp, c_page);
      std::fill(sr + n_r, sr + nt, 0.0f);  // tokens after this row's query
      res.l[r] = res.l[r] * c_old + lp * c_page;
      res.m[r] = m_new;
      if (m_page) {
        m_page[partial] = mp;
        l_page[partial] = lp;
      }
    }
    const uint8_t* v_codes = pv.data + L.v_codes(h, 0);
    const uint8_t* v_meta = pv.data + L.v_meta(h, 0);
    float* out = rotated ? accr[0] : acc[0];
    if (visible(pv, 0) == nt) {
      if (nt > 0)
        detail::page_accumulate(pv.format, v_codes, L.row_bytes(), v_meta, nt, s.data(), R, d, out, codec::kMaxHeadDim);
    } else {
      // The page a block's queries end in: each row reads only the V rows its query may see (a zero
      // weight would still let a non-finite future value through as NaN).
      for (int r = 0; r < R; ++r) {
        const uint32_t n_r = visible(pv, r);
        if (n_r > 0)
          detail::page_accumulate(pv.format, v_codes, L.row_bytes(), v_meta, n_r,
                                  s.data() + static_cast<size_t>(r) * nt, 1, d,
                                  out + static_cast<size_t>(r) * codec::kMaxHeadDim, codec::kMaxHeadDim);
      }
    }
  }
  res.o.assign(static_cast<size_t>(R) * d, 0.0f);
  for (int r = 0; r < R; ++r) {
    if (any_rotated) {
      in.rotations[h].inverse({accr[r], static_cast<size_t>(d)});  // one inverse rotation per output
      for (int i = 0; i < d; ++i) acc[r][i] += accr[r][i];
    }
    const float inv = res.l[r] > 0.0f ? 1.0f / res.l[r] : 0.0f;
    for (int i = 0; i < d; ++i) res.o[static_cast<size_t>(r) * d + i] = acc[r][i] * inv;
  }
}

void validate(const LayerInput& in, const QueryBlock& qb, size_t out_size) {
  auto fail = [](const std::string& m) { throw std::invalid_argument("attend: " + m); };
  codec::require_supported_head_dim(in.head_dim, "attend");
  if (in.kv_heads < 1 || in.q_heads < in.kv_heads || in.q_heads % in.kv_heads != 0 ||
      in.q_heads / in.kv_heads > kMaxGroup)
    fail("q_heads must be a multiple of kv_heads with a GQA ratio of 1..8");
  if (qb.n < 1) fail("a query block needs at least one query");
  const size_t need = static_cast<size_t>(qb.n) * in.q_heads * in.head_dim;
  if (qb.q.size() != need || out_size != need) fail("query/output spans must hold n * q_heads * head_dim floats");
  for (const PageView& pv : in.pages) {
    const auto* L = in.layouts[static_cast<int>(pv.format)];
    if (!L || !pv.data) fail("a page's format has no layout or the page has no data");
    if (L->geometry().head_dim != in.head_dim || L->geometry().kv_heads != in.kv_heads) fail("layout geometry");
    if (pv.tokens > static_cast<uint32_t>(L->geometry().tokens_per_page)) fail("page holds more tokens than it can");
    if (codec::format_spec(pv.format).rotated && in.rotations.size() != static_cast<size_t>(in.kv_heads))
      fail("rotated (TQ3) pages need one rotation per KV head");
  }
}

}  // namespace

void attend(const LayerInput& in, const QueryBlock& qb, std::span<float> out, PagePartials* partials,
            const AttendOptions& opt) {
  validate(in, qb, out.size());
  const int d = in.head_dim, G = in.q_heads / in.kv_heads;
  const float scale = in.softmax_scale > 0.0f ? in.softmax_scale : 1.0f / std::sqrt(static_cast<float>(d));
  const size_t P = in.pages.size();
  // Consecutive queries of a prefill chunk share each decoded K/V tile: up to kMaxRows (query, head) rows.
  const int block = std::max(1, kMaxRows / G);
  const size_t blocks = static_cast<size_t>((qb.n + block - 1) / block);
  size_t B = 16;
  for (const PageView& pv : in.pages)
    B = static_cast<size_t>(in.layouts[static_cast<int>(pv.format)]->geometry().tokens_per_page);
  size_t pps = opt.pages_per_split > 0 ? static_cast<size_t>(opt.pages_per_split) : (128 + B - 1) / B;
  if (opt.pages_per_split <= 0 && opt.pool) {
    const size_t want = std::max<size_t>(1, 2 * opt.pool->size() / (blocks * in.kv_heads));
    pps = std::max(pps, (P + want - 1) / want);
  }
  if (opt.pages_per_split <= 0 && !opt.pool) pps = std::max<size_t>(pps, P);  // one split per head
  pps = std::max<size_t>(pps, 1);
  const size_t splits = P == 0 ? 1 : (P + pps - 1) / pps;
  if (partials) {
    partials->pages = static_cast<int>(P);
    partials->q_heads = in.q_heads;
    partials->queries = qb.n;
    partials->m_page.assign(static_cast<size_t>(qb.n) * P * in.q_heads, kNegInf);
    partials->l_page.assign(static_cast<size_t>(qb.n) * P * in.q_heads, 0.0f);
    partials->m.assign(static_cast<size_t>(qb.n) * in.q_heads, kNegInf);
    partials->l.assign(static_cast<size_t>(qb.n) * in.q_heads, 0.0f);
  }
  std::vector<SplitOut> parts(blocks * in.kv_heads * splits);
  auto task = [&](size_t i) {
    const size_t sp = i % splits, h = (i / splits) % static_cast<size_t>(in.kv_heads), b = i / (splits * in.kv_heads);
    const size_t p0 = sp * pps, p1 = std::min(P, p0 + pps);
    const int n0 = static_cast<int>(b) * block, nq = std::min(block, qb.n - n0);
    float* mp = partials ? partials->m_page.data() + static_cast<size_t>(n0) * P * in.q_heads : nullptr;
    float* lp = partials ? partials->l_page.data() + static_cast<size_t>(n0) * P * in.q_heads : nullptr;
    run_split(in, qb.q.data() + static_cast<size_t>(n0) * in.q_heads * d, nq,
              qb.first_position + static_cast<uint32_t>(n0), static_cast<int>(h), p0, p1, scale, parts[i], mp, lp);
  };
  if (opt.pool && parts.size() > 1)
    opt.pool->parallel_for(parts.size(), task);
  else
    for (size_t i = 0; i < parts.size(); ++i) task(i);
  // Merge the splits of each (query, KV head) under one softmax.
  for (int n = 0; n < qb.n; ++n) {
    const size_t b = static_cast<size_t>(n / block);
    for (int h = 0; h < in.kv_heads; ++h) {
      const SplitOut* sp = &parts[(b * in.kv_heads + h) * splits];
      for (int g = 0; g < G; ++g) {
        const int r = (n % block) * G + g;
        float m = kNegInf;
        for (size_t j = 0; j < splits; ++j) m = std::max(m, sp[j].m[r]);
        float l = 0.0f;
        float* o = out.data() + (static_cast<size_t>(n) * in.q_heads + h * G + g) * d;
        std::fill(o, o + d, 0.0f);
        for (size_t j = 0; j < splits; ++j) {
          if (sp[j].l[r] <= 0.0f) continue;
          const float w = std::exp(sp[j].m[r] - m) * sp[j].l[r];
          l += w;
          axpy(w, sp[j].o.data() + static_cast<size_t>(r) * d, o, d);
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int i = 0; i < d; ++i) o[i] *= inv;
        if (partials) {
          partials->m[static_cast<size_t>(n) * in.q_heads + h * G + g] = m;
          partials->l[static_cast<size_t>(n) * in.q_heads + h * G + g] = l;
        }
      }
    }
  }
}

LayerInput layer_input(const cache::HostPageStorage& storage, const cache::PagedView& view, int q_heads) {
  LayerInput in;
  const auto& g = storage.layout(codec::PageFormat::kFp8).geometry();
  in.q_heads = q_heads;
  in.kv_heads = g.kv_heads;
  in.head_dim = g.head_dim;
  in.rotations = storage.rotations(view.layer());
  for (const codec::PageFormatSpec& f : codec::all_page_formats())
    in.layouts[codec::format_index(f.format)] = &storage.layout(f.format);
  for (size_t i = 0; i < view.pages(); ++i) {
    const cache::PageEntry e = view.page(i);
    in.pages.push_back({e.format, storage.bytes(e).data(), view.fill(i), static_cast<uint32_t>(i * g.tokens_per_page)});
  }
  return in;
}

std::vector<float> page_scores(const PagePartials& p, std::span<const int> heads) {
  std::vector<int> hs(heads.begin(), heads.end());
  if (hs.empty())
    for (int h = 0; h < p.q_heads; ++h) hs.push_back(h);
  std::vector<double> r(static_cast<size_t>(p.pages), 0.0);
  std::vector<double> q(static_cast<size_t>(p.pages));
  for (int n = 0; n < p.queries; ++n) {
    for (int h : hs) {
      const float m = p.m[static_cast<size_t>(n) * p.q_heads + h], l = p.l[static_cast<size_t>(n) * p.q_heads + h];
      double total = 0.0;
      for (int pg = 0; pg < p.pages; ++pg) {
        const size_t i = (static_cast<size_t>(n) * p.pages + pg) * p.q_heads + h;
        q[pg] =
            (l > 0.0f && p.l_page[i] > 0.0f) ? std::exp(static_cast<double>(p.m_page[i]) - m) * p.l_page[i] / l : 0.0;
        total += q[pg];
      }
      for (int pg = 0; pg < p.pages; ++pg) r[pg] += total > 0.0 ? q[pg] / total : 0.0;  // page-addressable mass
    }
  }
  std::vector<float> out(r.size());
  const double norm = static_cast<double>(hs.size()) * p.queries;
  for (size_t i = 0; i < r.size(); ++i) out[i] = static_cast<float>(r[i] / norm);
  return out;
}

}  // namespace minimakv::attention
