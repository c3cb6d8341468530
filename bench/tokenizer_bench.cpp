// Encoding speed of the shipped byte-level BPE tokenizer on prose of growing length: bytes per second
// must stay flat as the text grows (long prompts are encoded in one call).
#include <benchmark/benchmark.h>

#include <string>

#include "minimakv/model/tokenizer.h"

namespace {

const minimakv::model::Tokenizer& shipped() {
  static const auto t =
      minimakv::model::Tokenizer::load(std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m/tokenizer.json");
  return t;
}

std::string prose(size_t bytes) {
  const std::string line =
      "The grass is green, the sky is blue; 42 ships left the harbour at 7:15, and nobody's sure why.\n";
  std::string s;
  while (s.size() < bytes) s += line;
  s.resize(bytes);
  return s;
}

void BM_Encode(benchmark::State& st) {
  const std::string text = prose(static_cast<size_t>(st.range(0)));
  const auto& tok = shipped();
  size_t tokens = 0;
  for (auto _ : st) {
    auto ids = tok.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * st.range(0));
  st.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_Encode)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

}  // namespace
