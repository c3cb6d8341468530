#include "kv_stats_cmd.h"

#include <fmt/core.h>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "command.h"
#include "default_paths.h"
#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/half.h"
#include "minimakv/codec/page_layout.h"
#include "minimakv/codec/tq3.h"
#include "minimakv/engine/model.h"
#include "minimakv/eval/niah.h"

namespace minimakv::app {
namespace {

using json = nlohmann::json;

// One layer's keys or values over all KV heads; sums of squares in fp64.
struct TensorStats {
  double energy = 0;                                     // sum ||x||^2
  double seq_resid = 0;                                  // sum ||x - mean of the head's sequence||^2
  double page_resid = 0;                                 // sum ||x - mean of the head's page||^2
  double err_fp8 = 0, err_tq3 = 0, err_tq3_centred = 0;  // sum ||x - x^||^2 per codec
  size_t vectors = 0;
  void add(const TensorStats& o) {
    energy += o.energy, seq_resid += o.seq_resid, page_resid += o.page_resid;
    err_fp8 += o.err_fp8, err_tq3 += o.err_tq3, err_tq3_centred += o.err_tq3_centred, vectors += o.vectors;
  }
  json to_json() const {
    return {{"vectors", vectors},
            {"mean_sq_norm", energy / static_cast<double>(vectors)},
            {"sequence_mean_energy_share", 1.0 - seq_resid / energy},
            {"page_mean_energy_share", 1.0 - page_resid / energy},
            {"rel_mse",
             {{"fp8", err_fp8 / energy}, {"tq3", err_tq3 / energy}, {"tq3_page_centred", err_tq3_centred / energy}}},
            {"err_over_spread",
             {{"fp8", std::sqrt(err_fp8 / seq_resid)},
              {"tq3", std::sqrt(err_tq3 / seq_resid)},
              {"tq3_page_centred", std::sqrt(err_tq3_centred / seq_resid)}}}};
  }
};

double sq_dist(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return s;
}

// The vectors x[t] (t in [0, n), d floats each) of one (layer, head, tensor), pages of B tokens.
// Statistics skip page 0: the controller keeps the first page (the attention sink) exact.
TensorStats measure(const std::vector<float>& x, int n, int d, int B, const codec::Rotation& rot,
                    codec::NormCorrection corr) {
  TensorStats s;
  const auto vec = [&](int t) { return std::span<const float>(x.data() + static_cast<size_t>(t) * d, d); };
  std::vector<double> seq_mean(d, 0.0);
  for (int t = B; t < n; ++t)
    for (int i = 0; i < d; ++i) seq_mean[i] += vec(t)[i];
  std::vector<float> mu(d), y(d), centred(d), scratch(d);
  for (int i = 0; i < d; ++i) mu[i] = static_cast<float>(seq_mean[i] / (n - B));
  std::vector<uint8_t> codes(d), packed(codec::tq3_packed_bytes(d));
  for (int p0 = B; p0 < n; p0 += B) {
    const int p1 = std::min(n, p0 + B);
    // The page mean as a page-centred format would store it: one fp16 vector per (page, head).
    std::vector<float> page_mean(d, 0.0f);
    for (int i = 0; i < d; ++i) {
      double m = 0;
      for (int t = p0; t < p1; ++t) m += vec(t)[i];
      page_mean[i] = codec::half_to_float(codec::float_to_half(static_cast<float>(m / (p1 - p0))));
    }
    for (int t = p0; t < p1; ++t) {
      const auto v = vec(t);
      double e = 0;
      for (float a : v) e += static_cast<double>(a) * a;
      s.energy += e;
      s.seq_resid += sq_dist(v, mu);
      s.page_resid += sq_dist(v, page_mean);
      const float scale = codec::fp8_encode_vector(v, codes);
      codec::fp8_decode_vector(codes, scale, y);
      s.err_fp8 += sq_dist(v, y);
      uint16_t alpha = codec::tq3_encode(v, rot, scratch, packed, corr);
      codec::tq3_decode(packed, alpha, rot, y);
      s.err_tq3 += sq_dist(v, y);
      for (int i = 0; i < d; ++i) centred[i] = v[i] - page_mean[i];
      alpha = codec::tq3_encode(centred, rot, scratch, packed, corr);
      codec::tq3_decode(packed, alpha, rot, y);
      for (int i = 0; i < d; ++i) y[i] += page_mean[i];
      s.err_tq3_centred += sq_dist(v, y);
      ++s.vectors;
    }
  }
  return s;
}

void print_row(const std::string& layer, const char* tensor, const TensorStats& s) {
  fmt::print("{:>5} {:<2} {:>9.2f} {:>8.3f} {:>8.3f} {:>9.5f} {:>9.5f} {:>9.5f} {:>8.4f} {:>8.4f} {:>8.4f}\n", layer,
             tensor, s.energy / static_cast<double>(s.vectors), 1.0 - s.seq_resid / s.energy,
             1.0 - s.page_resid / s.energy, s.err_fp8 / s.energy, s.err_tq3 / s.energy, s.err_tq3_centred / s.energy,
             std::sqrt(s.err_fp8 / s.seq_resid), std::sqrt(s.err_tq3 / s.seq_resid),
             std::sqrt(s.err_tq3_centred / s.seq_resid));
}

}  // namespace

int run_kv_stats(const KvStatsOptions& opt) {
  if (opt.tokens < 2 * opt.page_size) throw std::invalid_argument("kv-stats: --tokens must cover at least two pages");
  engine::LoadOptions load;
  load.cpu_threads = opt.threads > 0 ? static_cast<unsigned>(opt.threads) : 0;
  const auto model = engine::Model::load(opt.model, backend::Device::kCpu, load);
  const auto data = eval::load_niah_data(opt.data);
  const auto ids = eval::essay_window(data, model->tokenizer(), 0, opt.tokens);

  auto store = model->make_store(model->store_config(cache::KvMode::kBf16, opt.page_size, ids.size()));
  const cache::SeqId seq = store->create_sequence();
  for (size_t i = 0; i < ids.size(); i += 512)
    model->forward(*store, seq, std::span<const int32_t>(ids).subspan(i, std::min<size_t>(512, ids.size() - i)));

  const auto& geo = store->geometry();
  const codec::PageLayout layout(codec::PageFormat::kBf16, geo);
  const int d = geo.head_dim, B = geo.tokens_per_page, n = opt.tokens;
  const cache::HostPageStorage* host = store->host_storage();
  if (!host) throw std::invalid_argument("kv-stats reads the pages in host memory: run it on the CPU backend");
  const auto pin = store->pin(seq);
  json out = {{"model", opt.model}, {"tokens", n}, {"page_size", B}, {"head_dim", d}, {"kv_heads", geo.kv_heads}};
  fmt::print("minimakv kv-stats  model={}  tokens={}  page={}  (page 0, the sink, excluded)\n", opt.model, n, B);
  fmt::print(
      "share = energy share of the sequence mean / the page mean; rel MSE = E||x-x^||^2 / E||x||^2; "
      "err/spread = sqrt(E||x-x^||^2 / E||x-mean||^2),\nthe logit error over the logit spread for isotropic "
      "queries. tq3c = TQ3 of x minus its page mean, the mean kept as fp16 (+{} bytes per page and head).\n\n",
      2 * d);
  fmt::print("{:>5} {:<2} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}\n", "layer", "", "E||x||^2", "seq sh",
             "page sh", "mse fp8", "mse tq3", "mse tq3c", "e/s fp8", "e/s tq3", "e/s tq3c");
  TensorStats all[2];
  const int layers = static_cast<int>(model->config().num_hidden_layers);
  for (int l = 0; l < layers; ++l) {
    TensorStats per[2];
    for (int h = 0; h < geo.kv_heads; ++h) {
      std::vector<float> x[2];
      for (auto& v : x) v.resize(static_cast<size_t>(n) * d);
      for (int t = 0; t < n; ++t) {
        const auto bytes = pin.bytes(pin.rows().at(static_cast<size_t>(t / B), l));
        for (int kv = 0; kv < 2; ++kv) {
          const uint8_t* row = bytes.data() + (kv == 0 ? layout.k_codes(h, t % B) : layout.v_codes(h, t % B));
          for (int i = 0; i < d; ++i) {
            uint16_t b;
            std::memcpy(&b, row + 2 * i, 2);
            x[kv][static_cast<size_t>(t) * d + i] = codec::bf16_to_float(b);
          }
        }
      }
      const auto& rot = host->rotations(l)[static_cast<size_t>(h)];
      // The production policies: unbiased alpha for keys, min-MSE for values (docs/formats.md).
      per[0].add(measure(x[0], n, d, B, rot, codec::NormCorrection::kUnbiased));
      per[1].add(measure(x[1], n, d, B, rot, codec::NormCorrection::kMinMse));
    }
    for (int kv = 0; kv < 2; ++kv) {
      print_row(std::to_string(l), kv == 0 ? "K" : "V", per[kv]);
      out["layers"][static_cast<size_t>(l)][kv == 0 ? "k" : "v"] = per[kv].to_json();
      all[kv].add(per[kv]);
    }
  }
  print_row("all", "K", all[0]);
  print_row("all", "V", all[1]);
  out["all"] = {{"k", all[0].to_json()}, {"v", all[1].to_json()}};
  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    if (!f) throw std::runtime_error("kv-stats: cannot write " + opt.json);
    f << out.dump(2) << "\n";
  }
  return 0;
}

namespace {
const Registration kCommand(
    {"kv-stats", "FP8 and TQ3 error on a model's own keys and values", 20, [](CLI::App& sub) {
       auto opt = std::make_shared<KvStatsOptions>();
       opt->model = default_model_dir();
       opt->data = default_data_dir();
       sub.add_option("--model", opt->model, "model directory (config.json, model.safetensors, tokenizer.json)");
       sub.add_option("--data", opt->data, "data directory (corpus/essay.txt)");
       sub.add_option("--tokens", opt->tokens, "tokens of essay text to run")->check(CLI::Range(128, 1 << 20));
       sub.add_option("--page-size", opt->page_size, "tokens per KV page")->check(CLI::Range(16, 4096));
       sub.add_option("--threads", opt->threads, "CPU threads (default: all)")->check(CLI::Range(0, 4096));
       sub.add_option("--json", opt->json, "write machine-readable results here");
       return std::function<int()>([=] { return run_kv_stats(*opt); });
     }});
}  // namespace

}  // namespace minimakv::app
