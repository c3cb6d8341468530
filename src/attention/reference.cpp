#include "minimakv/attention/reference.h"

#include <cmath>
#include <limits>

#include "minimakv/codec/page_codec.h"

namespace minimakv::attention {

namespace {
std::vector<double> softmax_attend(const std::vector<std::vector<double>>& K, const std::vector<std::vector<double>>& V,
                                   const float* q, int d, double scale, std::vector<double>* probs) {
  std::vector<double> s(K.size());
  double m = -std::numeric_limits<double>::infinity();
  for (size_t t = 0; t < K.size(); ++t) {
    double a = 0;
    for (int i = 0; i < d; ++i) a += static_cast<double>(q[i]) * K[t][i];
    s[t] = a * scale;
    m = std::max(m, s[t]);
  }
  double z = 0;
  for (double& x : s) z += (x = std::exp(x - m));
  std::vector<double> o(d, 0.0);
  for (size_t t = 0; t < K.size(); ++t)
    for (int i = 0; i < d; ++i) o[i] += s[t] / z * V[t][i];
  if (probs) {
    probs->resize(s.size());
    for (size_t t = 0; t < s.size(); ++t) (*probs)[t] = s[t] / z;
  }
  return o;
}
}  // namespace

ReferenceResult attend_reference(const LayerInput& in, const QueryBlock& qb) {
  const int d = in.head_dim, G = in.q_heads / in.kv_heads;
  const double scale = in.softmax_scale > 0 ? in.softmax_scale : 1.0 / std::sqrt(static_cast<double>(d));
  ReferenceResult r;
  r.out.assign(static_cast<size_t>(qb.n) * in.q_heads * d, 0.0);
  r.page_mass.assign(static_cast<size_t>(qb.n) * in.pages.size() * in.q_heads, 0.0);
  std::vector<float> k(d), v(d);
  for (int h = 0; h < in.kv_heads; ++h) {
    // Dequantize every row of this head once (original domain), remembering its page and position.
    std::vector<std::vector<double>> K, V;
    std::vector<size_t> page_of;
    std::vector<uint32_t> pos;
    for (size_t p = 0; p < in.pages.size(); ++p) {
      const PageView& pv = in.pages[p];
      const auto& L = *in.layouts[static_cast<int>(pv.format)];
      const std::span<const uint8_t> bytes(pv.data, L.bytes());
      for (uint32_t t = 0; t < pv.tokens; ++t) {
        codec::read_token_head(bytes, L, static_cast<int>(t), h, in.rotations, k, v);
        K.emplace_back(k.begin(), k.end());
        V.emplace_back(v.begin(), v.end());
        page_of.push_back(p);
        pos.push_back(pv.first_position + t);
      }
    }
    for (int n = 0; n < qb.n; ++n) {
      const uint32_t limit = qb.first_position + static_cast<uint32_t>(n);
      std::vector<std::vector<double>> Kv, Vv;
      std::vector<size_t> pg;
      for (size_t t = 0; t < K.size(); ++t)
        if (pos[t] <= limit) {
          Kv.push_back(K[t]);
          Vv.push_back(V[t]);
          pg.push_back(page_of[t]);
        }
      for (int g = 0; g < G; ++g) {
        const int qh = h * G + g;
        std::vector<double> probs;
        const auto o = softmax_attend(Kv, Vv, qb.q.data() + (static_cast<size_t>(n) * in.q_heads + qh) * d, d, scale, &probs);
        std::copy(o.begin(), o.end(), r.out.begin() + (static_cast<std::ptrdiff_t>(n) * in.q_heads + qh) * d);
        for (size_t t = 0; t < probs.size(); ++t)
          r.page_mass[(static_cast<size_t>(n) * in.pages.size() + pg[t]) * in.q_heads + qh] += probs[t];
      }
    }
  }
  return r;
}

std::vector<double> attend_dense_reference(std::span<const float> k, std::span<const float> v, int tokens, int kv_heads,
                                           int q_heads, int d, const QueryBlock& qb) {
  const int G = q_heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(static_cast<size_t>(qb.n) * q_heads * d);
  for (int n = 0; n < qb.n; ++n) {
    const int visible = std::min<int>(tokens, static_cast<int>(qb.first_position) + n + 1);
    for (int h = 0; h < kv_heads; ++h) {
      std::vector<std::vector<double>> K(visible), V(visible);
      for (int t = 0; t < visible; ++t) {
        const size_t off = (static_cast<size_t>(t) * kv_heads + h) * d;
        K[t].assign(k.begin() + static_cast<std::ptrdiff_t>(off), k.begin() + static_cast<std::ptrdiff_t>(off + d));
        V[t].assign(v.begin() + static_cast<std::ptrdiff_t>(off), v.begin() + static_cast<std::ptrdiff_t>(off + d));
      }
      for (int g = 0; g < G; ++g) {
        const int qh = h * G + g;
        const auto o = softmax_attend(K, V, qb.q.data() + (static_cast<size_t>(n) * q_heads + qh) * d, d, scale, nullptr);
        std::copy(o.begin(), o.end(), out.begin() + (static_cast<std::ptrdiff_t>(n) * q_heads + qh) * d);
      }
    }
  }
  return out;
}

}  // namespace minimakv::attention
