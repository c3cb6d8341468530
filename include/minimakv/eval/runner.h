// The evaluation runs: RULER-NIAH accuracy per arm on identical examples, KL divergence of next-token
// distributions against the dense control, and KV memory per live token from the cache's accounting.
//
// Owns: the named arms (KV mode plus controller settings), and the rule for when compression happens:
// every arm prefills the prompt in chunks with a retier checkpoint after each chunk, so in minima arms
// the context is already in its tiers (FP8 / TQ3) when later chunks and the question read it. The
// "-reuse" arm caches the document in one request and asks the question in a second request that hits
// the (compressed) cached prefix. Every number is computed from the runs; nothing is assumed.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/engine/generate.h"
#include "minimakv/eval/niah.h"

namespace minimakv::eval {

struct ArmSpec {
  std::string name;
  engine::GenerateOptions opt;
  bool prefix_reuse = false;
  std::string describe() const;  // mode, page size, chunk, controller knobs
};

// Arms: bf16 (dense control), fp8, minima (4 Recent pages + 1 sink page, the rest TQ3), minima-scored
// (plus 4 Anchor pages chosen by attention scores), minima-aggr (1 Recent page + 1 sink, no anchors),
// minima-reuse (minima, the document served from the prefix cache). A minima arm's name may carry
// modifiers: minima@recent=8, minima@sinks=2, minima-scored@anchors=8, minima@protect=0+7 (layers kept in
// FP8), minima@tq4=0+6 (layers whose Stale pages are TQ4; without it, the model's KV profile decides;
// minima@tq4=none: TQ3 everywhere), combined as minima@recent=8@protect=0. Throws std::invalid_argument on an unknown
// name or modifier, a malformed value, or modifiers on bf16 or fp8.
ArmSpec make_arm(std::string_view name, int page_size, int prefill_chunk);
std::vector<std::string> known_arms();

struct KvUse {
  size_t recent = 0, anchor = 0, stale = 0, block_tables = 0, live_tokens = 0;
  double bytes_per_token = 0;  // (request-held pages + block tables) / live tokens
  bool reconciled = false;
  static KvUse from(const cache::Accounting& a);
};

struct NiahRecord {
  std::string task, arm;
  int length = 0, index = 0;
  double score = 0;
  std::string output;
  size_t prompt_tokens = 0, reused_tokens = 0, generated = 0;
  double prefill_s = 0, decode_s = 0;
  KvUse kv;
};

struct NiahConfig {
  std::vector<std::string> tasks;  // empty: all eight
  std::vector<int> lengths{4096};
  int examples = 8;
  int first_example = 0;  // examples first_example .. first_example + examples - 1 (shards of one protocol)
  uint64_t seed = 1;
  std::vector<std::string> arms{"bf16", "fp8", "minima"};
  int page_size = 64, prefill_chunk = 512, gen_budget = 64;
};

std::vector<NiahRecord> run_niah(const engine::Model& model, const NiahData& data, const NiahConfig& cfg,
                                 const std::function<void(const NiahRecord&)>& progress = {});

struct KlRecord {
  std::string arm;
  int length = 0, windows = 0;
  size_t positions = 0;
  double mean = 0, p99 = 0;          // KL(P_arm || P_bf16) in nats
  double mean_rev = 0, p99_rev = 0;  // KL(P_bf16 || P_arm)
  // Perplexity of the windows' own next tokens at the scored positions (the last, with no next token,
  // left out): the arm's and bf16's. exp(mean negative log-likelihood).
  double ppl = 0, ppl_bf16 = 0;
};

// Windows of held-out essay text of `length` tokens; the last `score_tokens` positions of each are
// scored (their context is compressed in minima arms). bf16 is the reference; its own record (KL 0)
// comes first at each length and carries the model's held-out perplexity.
std::vector<KlRecord> run_kl(const engine::Model& model, const NiahData& data, const std::vector<int>& lengths,
                             int windows, int score_tokens, const std::vector<std::string>& arms, int page_size,
                             int prefill_chunk, uint64_t seed);

struct MemoryRecord {
  std::string arm;
  size_t tokens = 0;
  KvUse kv;
};

// Bytes of a sequence of `tokens` live tokens under each arm, from the store's own accounting: the
// tokens are appended chunk by chunk with the arm's checkpoints (K/V content does not change sizes).
std::vector<MemoryRecord> project_memory(const engine::Model& model, const std::vector<std::string>& arms,
                                         const std::vector<size_t>& tokens, int page_size, int prefill_chunk);

}  // namespace minimakv::eval
