#include "minimakv/engine/capacity.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <string>

#include "minimakv/engine/model.h"
#include "minimakv/policy/tier_controller.h"

namespace minimakv::engine {

cache::Accounting hold_one_request(const model::ModelConfig& cfg, const GenerateOptions& opt, size_t tokens) {
  const size_t kv = static_cast<size_t>(cfg.num_key_value_heads) * static_cast<size_t>(cfg.head_dim);
  const size_t chunk = static_cast<size_t>(opt.prefill_chunk);
  const auto sc = store_config_for(cfg, opt, tokens);
  cache::KvStore store(sc);
  policy::TierController ctl(opt.controller);
  const auto seq = store.create_sequence();
  const std::vector<cache::SeqId> seqs{seq};
  const std::vector<float> zeros(chunk * kv, 0.0f);
  for (size_t p = 0; p < tokens; p += chunk) {
    const size_t m = std::min(chunk, tokens - p);
    std::vector<int32_t> ids(m);
    for (size_t i = 0; i < m; ++i) ids[i] = static_cast<int32_t>((p + i) % static_cast<size_t>(cfg.vocab_size));
    const cache::KvStore::AppendChunk append{seq, ids};
    cache::ForwardStep step = store.begin_step(std::span<const cache::KvStore::AppendChunk>(&append, 1));
    const std::span<const float> z(zeros.data(), m * kv);
    for (int l = 0; l < static_cast<int>(cfg.num_hidden_layers); ++l)
      store.host_storage()->write_tokens(step.write_slots(0, l), z, z);
    step.commit();
    if (cache::retiers(opt.mode)) ctl.checkpoint(store, seqs);
  }
  return store.accounting();
}

std::vector<CapacityRow> measure_capacity(const model::ModelConfig& cfg, std::span<const cache::KvMode> modes,
                                          size_t request_tokens, size_t envelope_bytes, const GenerateOptions& opt) {
  validate(opt);
  if (request_tokens == 0) throw std::invalid_argument("capacity: the request length must be positive");
  std::vector<CapacityRow> rows;
  for (const cache::KvMode mode : modes) {
    GenerateOptions o = opt;
    o.mode = mode;
    const auto a = hold_one_request(cfg, o, request_tokens);
    CapacityRow r;
    r.mode = mode;
    r.request_tokens = request_tokens;
    r.reconciled = a.reconciled;
    r.block_table_bytes = a.block_table_bytes;
    r.request_bytes = a.block_table_bytes;
    for (size_t f = 0; f < codec::kNumPageFormats; ++f) {
      // pages the request holds; copies only the prefix cache keeps are evictable, not counted
      r.request_bytes_by_format[f] = a.formats[f].request_pages * a.formats[f].page_bytes;
      r.request_bytes += r.request_bytes_by_format[f];
    }
    r.bytes_per_token = static_cast<double>(r.request_bytes) / static_cast<double>(request_tokens);
    r.max_requests = envelope_bytes / r.request_bytes;
    r.tokens_held = static_cast<size_t>(std::floor(static_cast<double>(envelope_bytes) / r.bytes_per_token));
    for (size_t f = 0; f < codec::kNumPageFormats; ++f) r.pool_bytes[f] = r.max_requests * r.request_bytes_by_format[f];
    rows.push_back(r);
  }
  return rows;
}

size_t parse_bytes(std::string_view text) {
  const std::string s(text);
  auto bad = [&] {
    return std::invalid_argument("'" + s + "' is not a byte count (e.g. 1000000, 64MiB, 40GiB, 1.5GB)");
  };
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit = s.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  double scale = 1;
  if (!unit.empty()) {
    const bool binary = unit.size() == 2 && (unit[1] == 'i' || unit[1] == 'I');
    if (unit.size() != 1 && !binary) throw bad();
    const std::string letters = "KMGT";
    const auto at = letters.find(static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
    if (at == std::string::npos) throw bad();
    scale = std::pow(binary ? 1024.0 : 1000.0, static_cast<double>(at + 1));
  }
  const double bytes = v * scale;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 1e18) throw bad();
  return static_cast<size_t>(bytes);
}

}  // namespace minimakv::engine
