// Encoding speed of the shipped byte-level BPE tokenizer on prose of growing length, and on runs without
// a space (each one pre-tokenizer piece, where a quadratic BPE would stall): bytes per second must stay
// flat as the text grows. scripts/bench/tokenizer-speed.py compares the same inputs with `tokenizers`.
#include <benchmark/benchmark.h>

#include <random>
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

// One word of `bytes` bytes: 0 random letters, 1 one letter repeated, 2 digits, 3 one CJK character
// repeated, 4 random valid UTF-8 from several scripts.
std::string word(int kind, size_t bytes) {
  std::mt19937_64 rng(7);
  std::string s;
  while (s.size() < bytes) {
    switch (kind) {
      case 0: s += static_cast<char>('a' + rng() % 26); break;
      case 1: s += 'a'; break;
      case 2: s += static_cast<char>('0' + rng() % 10); break;
      case 3: s += "\xe6\x96\x87"; break;  // U+6587
      default: {
        const auto cp = static_cast<uint32_t>(rng() % 2 ? 0x21 + rng() % 94 : 0x4E00 + rng() % 0x5000);
        if (cp < 0x80) s += static_cast<char>(cp);
        else {
          s += static_cast<char>(0xE0 | (cp >> 12));
          s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
          s += static_cast<char>(0x80 | (cp & 0x3F));
        }
      }
    }
  }
  return s;
}

void BM_EncodeLongWord(benchmark::State& st) {
  const std::string text = word(static_cast<int>(st.range(0)), static_cast<size_t>(st.range(1)));
  const auto& tok = shipped();
  for (auto _ : st) benchmark::DoNotOptimize(tok.encode(text).data());
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(text.size()));
  static const char* names[] = {"letters", "one_letter", "digits", "one_cjk", "utf8"};
  st.SetLabel(names[st.range(0)]);
}
BENCHMARK(BM_EncodeLongWord)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {64 << 10, 1 << 20}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
