#include "minimakv/engine/generate.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace minimakv::engine {

void validate(const GenerateOptions& opt) {
  validate(static_cast<const KvOptions&>(opt));
  validate(static_cast<const SamplingParams&>(opt));
}

namespace {

GenerateResult result_of(const RequestSummary& s) {
  GenerateResult r;
  r.tokens = s.tokens;
  r.prefill_seconds = s.prefill_seconds;
  const double total = std::chrono::duration<double>(s.finished - s.admitted).count();
  r.decode_seconds = std::max(0.0, total - s.prefill_seconds);
  r.step_seconds = s.step_seconds;
  r.accounting = s.accounting;
  r.prompt_logits = s.prompt_logits;
  return r;
}

// Runs the scheduler until every request given has ended; an error ending rethrows it.
void run_to_end(Scheduler& s) {
  while (!s.idle()) s.step();
}

Request request_of(std::span<const int32_t> prompt, const GenerateOptions& opt) {
  Request q;
  q.prompt.assign(prompt.begin(), prompt.end());
  q.sampling = opt;
  q.on_prefill_progress = opt.on_prefill_progress;
  q.keep_accounting = true;
  return q;
}

void check_ended(const RequestSummary& s) {
  if (s.reason == FinishReason::kError) throw cache::OutOfCapacity(s.error);
}

}  // namespace

GenerateResult generate(const Network& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  validate(opt);
  const KvBudget budget(model.config(), opt);
  SchedulerOptions so;
  so.kv = opt;
  so.max_running = 1;
  so.max_step_tokens = static_cast<size_t>(opt.prefill_chunk);
  so.admission = Admission::kReserve;
  Scheduler sched(model, so, budget.pools_for_tokens(prompt.size() + static_cast<size_t>(opt.max_new_tokens)));
  std::optional<GenerateResult> out;
  Request q = request_of(prompt, opt);
  q.sink = [&](const RequestOutput& o) {
    if (o.summary) {
      check_ended(*o.summary);
      out = result_of(*o.summary);
    } else if (on_token) {
      on_token(o.token);
    }
  };
  sched.add_request(std::move(q));
  run_to_end(sched);
  return std::move(*out);
}

std::vector<GenerateResult> generate_batch(const Network& model, std::span<const std::vector<int32_t>> prompts,
                                           const GenerateOptions& opt,
                                           const std::function<void(size_t, int32_t)>& on_token) {
  if (prompts.empty()) throw std::invalid_argument("generate_batch: no prompts");
  validate(opt);
  std::vector<size_t> lengths;
  for (const auto& p : prompts) {
    if (p.empty()) throw std::invalid_argument("generate_batch: empty prompt");
    lengths.push_back(p.size() + static_cast<size_t>(opt.max_new_tokens));
  }
  const KvBudget budget(model.config(), opt);
  SchedulerOptions so;
  so.kv = opt;
  so.max_running = prompts.size();
  so.max_step_tokens = std::max(static_cast<size_t>(opt.prefill_chunk), prompts.size());
  so.admission = Admission::kReserve;
  so.prefill_first = true;
  Scheduler sched(model, so, budget.pools_for_requests(lengths));
  std::vector<std::optional<GenerateResult>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request q = request_of(prompts[i], opt);
    q.sampling.seed = opt.seed + 0x9e3779b97f4a7c15ull * i;  // one stream per prompt
    q.sink = [&, i](const RequestOutput& o) {
      if (o.summary) {
        check_ended(*o.summary);
        out[i] = result_of(*o.summary);
      } else if (on_token) {
        on_token(i, o.token);
      }
    };
    sched.add_request(std::move(q));
  }
  run_to_end(sched);
  std::vector<GenerateResult> res;
  for (auto& r : out) {
    // The batch decodes together after every prompt is in: its decode time is that of its decode
    // passes, not the wait for the other prompts' prefill.
    r->decode_seconds = 0;
    for (double s : r->step_seconds) r->decode_seconds += s;
    res.push_back(std::move(*r));
  }
  return res;
}

namespace {
SchedulerOptions session_options(const GenerateOptions& opt) {
  validate(opt);
  SchedulerOptions so;
  so.kv = opt;
  so.max_running = 1;
  so.max_step_tokens = static_cast<size_t>(opt.prefill_chunk);
  so.admission = Admission::kReserve;
  return so;
}
}  // namespace

Session::Session(const Network& model, GenerateOptions opt, size_t capacity_tokens)
    : opt_(std::move(opt)),
      sched_(model, session_options(opt_), KvBudget(model.config(), opt_).pools_for_tokens(capacity_tokens)) {}

Session::Result Session::run(std::span<const int32_t> prompt, const std::function<void(int32_t)>& on_token,
                             int max_new_tokens) {
  if (prompt.empty()) throw std::invalid_argument("Session::run: empty prompt");
  GenerateOptions opt = opt_;
  if (max_new_tokens >= 0) opt.max_new_tokens = max_new_tokens;
  Result res;
  std::optional<RequestSummary> end;
  Request q = request_of(prompt, opt);
  q.sink = [&](const RequestOutput& o) {
    if (o.summary)
      end = *o.summary;
    else if (on_token)
      on_token(o.token);
  };
  sched_.add_request(std::move(q));
  run_to_end(sched_);
  check_ended(*end);
  res.gen = result_of(*end);
  res.reused_tokens = end->reused_tokens;
  return res;
}

size_t prefill_bytes_per_token(const model::ModelConfig& cfg, size_t context, int tokens_per_page, bool page_scores) {
  const size_t h = static_cast<size_t>(cfg.hidden_size), mlp = static_cast<size_t>(cfg.intermediate_size);
  const size_t qd = static_cast<size_t>(cfg.num_attention_heads * cfg.head_dim);
  const size_t kvd = static_cast<size_t>(cfg.num_key_value_heads * cfg.head_dim);
  // Residual, normed input, attention and MLP outputs; gate, up and their product; q, k, v and the
  // attention output, all fp32; BF16 copies of the GEMM inputs.
  size_t bytes = 4 * (4 * h + 3 * mlp + 2 * qd + 2 * kvd) + 2 * (h + mlp);
  // The prefill workspace: the rotated query and a partial output per key split (16K-key splits).
  bytes += 4 * qd * (2 + context / 16384);
  if (page_scores)  // page_m and page_l of every page the row sees, per query head
    bytes += 8 * static_cast<size_t>(cfg.num_attention_heads) * (context / static_cast<size_t>(tokens_per_page) + 1);
  return bytes;
}

int auto_prefill_chunk(const Model& model, size_t context, const KvOptions& kv) {
  const auto mem = model.backend().device_memory();
  if (!mem) return kv.prefill_chunk;
  return gpu_prefill_chunk(
      mem->free, prefill_bytes_per_token(model.config(), context, kv.tokens_per_page, wants_page_scores(kv)));
}

}  // namespace minimakv::engine
