// `minimakv replay`: runs a request trace in real time against the engine's scheduler and reports what
// a user of a serving system sees (queue time, time to first token, inter-token latency, end-to-end
// latency, preemptions) with p50/p90/p99 summaries, throughput, the peak number of running requests,
// the KV capacity report of the envelope, and the loop's own cost per step. `minimakv make-trace`
// writes traces (Poisson arrivals, length ranges, a seed).
#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "command.h"
#include "default_paths.h"
#include "engine_flags.h"
#include "load_options.h"
#include "minimakv/engine/capacity.h"
#include "minimakv/engine/model.h"
#include "minimakv/engine/scheduler.h"
#include "trace.h"

namespace minimakv::app {

namespace {

using engine::Clock;

struct ReplayOptions {
  EngineFlags engine;  // --reference-tokens 0: the trace's longest request
  std::string trace, data;
  bool json = false;
  double time_scale = 1.0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

nlohmann::json summary_of(const std::vector<double>& v) {
  return {{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)},
          {"mean", v.empty() ? 0.0 : [&] { double s = 0; for (double x : v) s += x; return s / static_cast<double>(v.size()); }()},
          {"count", v.size()}};
}

// The trace's prompts as token ids: texts encoded, cuts taken cyclically from their source's tokens.
std::vector<std::vector<int32_t>> prompts_of(const std::vector<TraceEntry>& trace, const model::Tokenizer& tok,
                                             const std::string& data_dir) {
  std::unordered_map<std::string, std::vector<int32_t>> sources;
  std::vector<std::vector<int32_t>> out;
  for (const auto& e : trace) {
    if (e.prompt) {
      out.push_back(tok.encode(*e.prompt));
      if (out.back().empty()) throw std::invalid_argument("replay: a prompt encodes to no tokens");
      continue;
    }
    const std::string path = e.source.empty() ? data_dir + "/corpus/essay.txt" : e.source;
    auto it = sources.find(path);
    if (it == sources.end()) {
      std::ifstream f(path, std::ios::binary);
      if (!f) throw std::invalid_argument("replay: cannot read the prompt source " + path);
      std::stringstream ss;
      ss << f.rdbuf();
      it = sources.emplace(path, tok.encode(ss.str())).first;
      if (it->second.empty()) throw std::invalid_argument("replay: " + path + " encodes to no tokens");
    }
    const auto& src = it->second;
    std::vector<int32_t> ids(e.prompt_tokens);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = src[(e.offset + i) % src.size()];
    out.push_back(std::move(ids));
  }
  return out;
}

int run_replay(ReplayOptions o) {
  o.engine.check("replay");
  const auto trace = read_trace(o.trace);
  std::vector<std::vector<int32_t>> prompts;
  auto setup = o.engine.load([&](const engine::Model& m) {
    prompts = prompts_of(trace, m.tokenizer(), o.data);
    size_t longest = 0;
    for (size_t i = 0; i < trace.size(); ++i)
      longest = std::max(longest, prompts[i].size() + static_cast<size_t>(trace[i].output_tokens));
    return longest;
  });
  if (prompts.empty()) prompts = prompts_of(trace, setup.model->tokenizer(), o.data);
  const auto& model = setup.model;
  const size_t envelope = setup.envelope, ref = setup.reference_tokens;
  const auto& so = setup.scheduler;
  const auto& pools = setup.pools;
  const auto& cap = setup.capacity;
  engine::Scheduler sched(*model, so, pools);
  nlohmann::json capacity;
  capacity["kv_memory_bytes"] = envelope;
  capacity["reference_tokens"] = ref;
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const auto pf = static_cast<codec::PageFormat>(f);
    const auto& p = sched.store().pool(pf);
    capacity["pools"][codec::to_string(pf)] = {
        {"pages", p.capacity()}, {"page_bytes", p.page_bytes()}, {"bytes", p.capacity() * p.page_bytes()}};
  }
  for (const auto& r : cap)
    capacity["modes"][cache::to_string(r.mode)] = {
        {"bytes_per_token", r.bytes_per_token}, {"tokens_held", r.tokens_held}, {"max_requests", r.max_requests}};
  if (!o.json) {
    fmt::print(stderr, "{} requests, kv {} ({} admission), device {}, envelope {} bytes, pools:", trace.size(),
               o.engine.kv, o.engine.admission, model->backend().describe(), envelope);
    for (auto& [name, p] : capacity["pools"].items())
      if (p["pages"].get<size_t>()) fmt::print(stderr, " {} {} pages", name, p["pages"].get<size_t>());
    fmt::print(stderr, "\ncapacity at {} tokens per request:", ref);
    for (const auto& r : cap) fmt::print(stderr, " {} {} requests", cache::to_string(r.mode), r.max_requests);
    fmt::print(stderr, "\n");
  }

  // ---- the run, in real time
  std::vector<engine::RequestSummary> ends(trace.size());
  std::vector<Clock::time_point> arrivals(trace.size());
  std::vector<double> overhead_us, step_ms;
  size_t next = 0, done = 0;
  const auto t0 = engine::Clock::now();
  auto due = [&](size_t i) {
    return t0 + std::chrono::duration_cast<engine::Clock::duration>(
                    std::chrono::duration<double>(trace[i].arrival * o.time_scale));
  };
  while (done < trace.size()) {
    const auto now = engine::Clock::now();
    while (next < trace.size() && due(next) <= now) {
      engine::Request q;
      q.prompt = prompts[next];
      q.sampling.max_new_tokens = trace[next].output_tokens;
      q.sampling.stop_ids = {-1};  // a trace fixes each output's length
      const size_t i = next;
      q.sink = [&, i](const engine::RequestOutput& out) {
        if (!out.summary) return;
        ends[i] = *out.summary;
        ++done;
      };
      arrivals[i] = due(i);
      sched.add_request(std::move(q));
      ++next;
    }
    if (sched.idle()) {
      if (next < trace.size()) std::this_thread::sleep_until(due(next));
      continue;
    }
    const auto st = sched.step();
    if (st.decode_rows + st.prompt_tokens == 0) continue;
    step_ms.push_back(st.total_seconds * 1e3);
    overhead_us.push_back((st.total_seconds - st.forward_seconds - st.checkpoint_seconds - st.sample_seconds) * 1e6);
  }
  const double makespan = std::chrono::duration<double>(engine::Clock::now() - t0).count();

  // ---- report
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  std::vector<double> queue, ttft, itl, e2e;
  size_t out_tokens = 0, in_tokens = 0, preemptions = 0, finished = 0;
  nlohmann::json reqs = nlohmann::json::array();
  for (size_t i = 0; i < trace.size(); ++i) {
    const auto& s = ends[i];
    nlohmann::json r;
    r["index"] = i;
    r["prompt_tokens"] = s.prompt_tokens;
    r["output_tokens"] = s.tokens.size();
    r["finish_reason"] = engine::to_string(s.reason);
    r["arrival_s"] = secs(t0, arrivals[i]);
    r["queue_s"] = secs(arrivals[i], s.admitted);
    r["e2e_s"] = secs(arrivals[i], s.finished);
    r["preemptions"] = s.preemptions;
    r["reused_tokens"] = s.reused_tokens;
    queue.push_back(r["queue_s"]);
    e2e.push_back(r["e2e_s"]);
    if (!s.token_times.empty()) {
      r["ttft_s"] = secs(arrivals[i], s.first_token);
      ttft.push_back(r["ttft_s"]);
      double sum = 0;
      for (size_t k = 1; k < s.token_times.size(); ++k) {
        itl.push_back(secs(s.token_times[k - 1], s.token_times[k]));
        sum += itl.back();
      }
      r["itl_mean_s"] = s.token_times.size() > 1 ? sum / static_cast<double>(s.token_times.size() - 1) : 0.0;
    }
    if (s.reason == engine::FinishReason::kError) r["error"] = s.error;
    finished += s.reason == engine::FinishReason::kLength || s.reason == engine::FinishReason::kStop;
    out_tokens += s.tokens.size();
    in_tokens += s.prompt_tokens;
    preemptions += s.preemptions;
    reqs.push_back(r);
  }
  const auto c = sched.counters();
  nlohmann::json sum;
  sum["requests"] = trace.size();
  sum["finished"] = finished;
  sum["prompt_tokens"] = in_tokens;
  sum["output_tokens"] = out_tokens;
  sum["makespan_s"] = makespan;
  sum["output_tokens_per_s"] = static_cast<double>(out_tokens) / makespan;
  sum["peak_running"] = c.peak_running;
  sum["preemptions"] = preemptions;
  sum["prefix_hit_tokens"] = c.prefix_hit_tokens;
  sum["steps"] = c.steps;
  sum["queue_s"] = summary_of(queue);
  sum["ttft_s"] = summary_of(ttft);
  sum["itl_s"] = summary_of(itl);
  sum["e2e_s"] = summary_of(e2e);
  sum["step_ms"] = summary_of(step_ms);
  sum["loop_overhead_us"] = summary_of(overhead_us);
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.engine.model;
    j["device"] = model->backend().describe();
    j["kv"] = o.engine.kv;
    j["admission"] = o.engine.admission;
    j["max_step_tokens"] = o.engine.max_step_tokens;
    j["max_running"] = o.engine.max_running;
    j["capacity"] = capacity;
    j["summary"] = sum;
    j["requests"] = reqs;
    fmt::print("{}\n", j.dump(1));
    return finished == trace.size() ? 0 : 1;
  }
  fmt::print("{} of {} requests finished in {:.2f} s: {} prompt tokens, {} output tokens ({:.1f} tok/s)\n", finished,
             trace.size(), makespan, in_tokens, out_tokens, static_cast<double>(out_tokens) / makespan);
  fmt::print("peak running {}, preemptions {}, prefix-cache hits {} tokens, {} steps\n", c.peak_running, preemptions,
             c.prefix_hit_tokens, c.steps);
  fmt::print("{:<22} {:>10} {:>10} {:>10}\n", "", "p50", "p90", "p99");
  auto row = [&](const char* name, const std::vector<double>& v, double scale) {
    fmt::print("{:<22} {:>10.2f} {:>10.2f} {:>10.2f}\n", name, percentile(v, 50) * scale, percentile(v, 90) * scale,
               percentile(v, 99) * scale);
  };
  row("queue (ms)", queue, 1e3);
  row("TTFT (ms)", ttft, 1e3);
  row("inter-token (ms)", itl, 1e3);
  row("end-to-end (ms)", e2e, 1e3);
  row("step (ms)", step_ms, 1.0);
  row("loop overhead (us)", overhead_us, 1.0);
  return finished == trace.size() ? 0 : 1;
}

const Registration kReplay(
    {"replay", "run a request trace in real time through the scheduler; latency, throughput, peak concurrency", 62,
     [](CLI::App& sub) {
       auto o = std::make_shared<ReplayOptions>();
       o->data = default_data_dir();
       o->engine.kv_memory = "256MiB";
       sub.add_option("--trace", o->trace, "JSONL trace (minimakv make-trace writes one)")->required();
       sub.add_option("--data", o->data, "folder holding corpus/essay.txt (the default prompt source)");
       o->engine.add_to(sub,
                        "KV memory envelope: bytes, with a unit (256MiB, 40GiB), or a share of the GPU memory free "
                        "after loading (90%)",
                        "request length the minima pools are split for (default: the trace's longest)");
       sub.add_option("--time-scale", o->time_scale, "multiply arrival times (0: everything arrives at once)")
           ->check(finite())
           ->check(CLI::Range(0.0, 1e6));
       sub.add_flag("--json", o->json, "machine-readable output, every request included");
       return std::function<int()>([=] { return run_replay(*o); });
     }});

const Registration kMakeTrace(
    {"make-trace", "write a request trace: Poisson arrivals, prompt and output length ranges, a seed", 63,
     [](CLI::App& sub) {
       auto s = std::make_shared<TraceShape>();
       auto out = std::make_shared<std::string>();
       auto prompt = std::make_shared<std::vector<size_t>>();
       auto output = std::make_shared<std::vector<int>>();
       sub.add_option("--requests", s->requests, "number of requests")->check(CLI::Range(size_t{1}, size_t{1} << 20));
       sub.add_option("--rate", s->rate, "arrivals per second (Poisson); 0: all at once")
           ->check(finite())
           ->check(CLI::Range(0.0, 1e6));
       sub.add_option("--prompt-tokens", *prompt, "prompt length, or MIN MAX (uniform)")
           ->expected(1, 2)
           ->check(CLI::Range(size_t{1}, size_t{1} << 24));
       sub.add_option("--output-tokens", *output, "output length, or MIN MAX (uniform)")
           ->expected(1, 2)
           ->check(CLI::Range(0, 1 << 20));
       sub.add_option("--seed", s->seed, "random seed");
       sub.add_option("--source", s->source, "text file the prompts are cut from (default: the essay corpus)");
       sub.add_option("--out", *out, "write here instead of stdout");
       return std::function<int()>([=] {
         if (!prompt->empty()) s->prompt_min = prompt->front(), s->prompt_max = prompt->back();
         if (!output->empty()) s->output_min = output->front(), s->output_max = output->back();
         const std::string text = to_jsonl(make_trace(*s));
         if (out->empty()) {
           fmt::print("{}", text);
         } else {
           std::ofstream f(*out);
           if (!(f << text)) throw std::invalid_argument("make-trace: cannot write " + *out);
         }
         return 0;
       });
     }});

}  // namespace

}  // namespace minimakv::app
