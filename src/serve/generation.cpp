#include "generation.h"

#include <ctime>
#include <stdexcept>

namespace minimakv::serve {

size_t ServeContext::max_prompt_tokens() const {
  const size_t ctx_limit = static_cast<size_t>(cfg.max_position_embeddings) - 1;
  return opt.max_prompt_tokens ? std::min(opt.max_prompt_tokens, ctx_limit) : ctx_limit;
}

struct Generation::Choice {
  Choice(const model::Tokenizer& tok, const GenerationParams& g)
      : text(tok, g.stop, g.include_stop_str_in_output, g.skip_special_tokens) {}
  size_t index = 0, prompt = 0;
  engine::SamplingParams sampling;
  std::shared_ptr<RequestStream> stream;
  TextStream text;
  std::string full;            // the whole text (non-streaming)
  std::vector<TokenInfo> lps;  // log-probabilities not yet sent (streaming) or all (non-streaming)
  size_t tokens = 0;           // generated tokens the client is charged for
  std::optional<std::string> finish;
  std::string error;
};

Generation::Generation(ServeContext& ctx, const CompletionRequest& r)
    : ctx_(ctx), chat_(false), gen_(r.gen), id_(new_id("cmpl-")) {
  for (const auto& p : r.prompts) {
    if (const auto* text = std::get_if<std::string>(&p)) {
      add_prompt(tokenize(*text), r.echo ? *text : "");
    } else {
      const auto& ids = std::get<std::vector<int32_t>>(p);
      if (ids.size() > ctx_.max_prompt_tokens())
        throw ApiError(400, "invalid_request_error",
                       "the prompt is " + std::to_string(ids.size()) + " tokens, more than the limit of " +
                           std::to_string(ctx_.max_prompt_tokens()),
                       "prompt");
      for (int32_t t : ids)
        if (t >= static_cast<int32_t>(ctx_.cfg.vocab_size))
          throw ApiError(400, "invalid_request_error", "token id " + std::to_string(t) + " is outside the vocabulary",
                         "prompt");
      add_prompt(ids, r.echo ? sanitize_utf8(ctx_.tok.decode(ids)) : "");
    }
  }
}

Generation::Generation(ServeContext& ctx, const ChatRequest& r)
    : ctx_(ctx), chat_(true), gen_(r.gen), id_(new_id("chatcmpl-")) {
  if (!ctx_.chat)
    throw ApiError(400, "invalid_request_error",
                   "this model has no chat template (none in its tokenizer_config.json); start the server with "
                   "--chat-template FILE "
                   "or use /v1/completions",
                   "messages");
  const std::string prompt = ctx_.chat->render(r.messages, r.tools, r.add_generation_prompt, r.template_kwargs);
  add_prompt(tokenize(prompt), "");
}

Generation::~Generation() {
  cancel();
}

std::vector<int32_t> Generation::tokenize(const std::string& text) const {
  const size_t limit = ctx_.max_prompt_tokens();
  auto ids = ctx_.tok.encode_bounded(text, limit);
  if (!ids)
    throw ApiError(400, "invalid_request_error",
                   "the prompt is longer than " + std::to_string(limit) + " tokens, the limit of this server",
                   chat_ ? "messages" : "prompt");
  if (ids->empty())
    throw ApiError(400, "invalid_request_error", "the prompt encodes to no tokens", chat_ ? "messages" : "prompt");
  return std::move(*ids);
}

void Generation::add_prompt(std::vector<int32_t> ids, std::string echo_text) {
  const size_t p = prompts_.size();
  const size_t context = static_cast<size_t>(ctx_.cfg.max_position_embeddings);
  const int max_new = gen_.max_tokens ? *gen_.max_tokens
                      : chat_         ? static_cast<int>(context > ids.size() ? context - ids.size() : 0)
                                      : 16;
  prompts_.push_back(std::move(ids));
  echo_.push_back(std::move(echo_text));
  for (int k = 0; k < gen_.n; ++k) {
    auto c = std::make_unique<Choice>(ctx_.tok, gen_);
    c->index = choices_.size();
    c->prompt = p;
    auto& s = c->sampling;
    s.max_new_tokens = max_new;
    s.temperature = gen_.temperature;
    s.top_p = gen_.top_p;
    s.top_k = gen_.top_k;
    s.presence_penalty = gen_.presence_penalty;
    s.frequency_penalty = gen_.frequency_penalty;
    s.logprobs = gen_.logprobs;
    s.seed = gen_.seed ? *gen_.seed + static_cast<uint64_t>(c->index) : ctx_.random_seed();
    if (gen_.ignore_eos) {
      s.stop_ids = gen_.stop_token_ids.empty() ? std::vector<int32_t>{-1} : gen_.stop_token_ids;
    } else if (!gen_.stop_token_ids.empty()) {
      for (int64_t e : ctx_.cfg.eos_token_ids) s.stop_ids.push_back(static_cast<int32_t>(e));
      s.stop_ids.insert(s.stop_ids.end(), gen_.stop_token_ids.begin(), gen_.stop_token_ids.end());
    }
    c->full = echo_[p];
    choices_.push_back(std::move(c));
  }
}

void Generation::start() {
  try {
    for (auto& c : choices_) c->stream = ctx_.engine.submit(prompts_[c->prompt], c->sampling);
  } catch (const std::invalid_argument& e) {
    cancel();
    throw ApiError(400, "invalid_request_error", e.what(), chat_ ? "messages" : "prompt");
  } catch (const std::runtime_error& e) {
    cancel();
    throw ApiError(503, "server_error", e.what());
  }
  started_ = true;
}

void Generation::cancel() {
  for (auto& c : choices_)
    if (c->stream && !c->finish) c->stream->cancel();
}

namespace {

const char* finish_name(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop:
      return "stop";
    case engine::FinishReason::kLength:
      return "length";
    case engine::FinishReason::kAbort:
      return "abort";
    case engine::FinishReason::kError:
      return "error";
  }
  return "error";
}

}  // namespace

std::string Generation::chunk(const Choice& c, const std::string& delta, const std::vector<TokenInfo>& lps,
                              const std::optional<std::string>& finish) const {
  const bool want_lp = gen_.logprobs >= 0 && !lps.empty();
  nlohmann::json choice;
  if (chat_)
    choice = chat_delta(c.index, std::nullopt, delta.empty() && finish ? std::nullopt : std::optional(delta),
                        want_lp ? chat_logprobs(lps) : nlohmann::json(nullptr), finish);
  else
    choice = completion_choice(c.index, delta, want_lp ? completion_logprobs(lps) : nlohmann::json(nullptr), finish);
  return sse(response_object(id_, chat_ ? "chat.completion.chunk" : "text_completion", ctx_.created,
                             ctx_.opt.served_model_name, nlohmann::json::array({choice}), std::nullopt));
}

// Folds one event into its choice; streaming output (chunks) goes to `out`. True when it ended the choice.
bool Generation::handle(Choice& c, StreamEvent&& e, std::string& out) {
  if (c.finish) return false;  // a stop string already ended it; the engine's last events are dropped
  std::string delta;
  std::optional<std::string> finish;
  if (e.end) {
    delta = c.text.finish();
    finish = finish_name(e.summary.reason);
    if (e.summary.reason == engine::FinishReason::kError) c.error = e.summary.error;
  } else {
    ++c.tokens;
    const size_t offset = c.text.emitted_bytes();
    delta = c.text.push(e.token);
    if (e.logprobs) {
      TokenInfo t;
      t.text = c.text.token_text(e.token);
      t.raw = token_bytes(ctx_.tok, e.token);
      t.logprob = e.logprobs->logprob;
      t.text_offset = offset;
      for (const auto& [id, lp] : e.logprobs->top) {
        t.top.emplace_back(c.text.token_text(id), lp);
        t.top_raw.push_back(token_bytes(ctx_.tok, id));
      }
      c.lps.push_back(std::move(t));
    }
    if (c.text.stopped()) {
      finish = "stop";
      c.stream->cancel(true);
    }
  }
  if (finish) c.finish = finish;
  if (gen_.stream) {
    if (!delta.empty() || finish || !c.lps.empty()) {
      out += chunk(c, delta, c.lps, finish);
      c.lps.clear();
    }
  } else {
    c.full += delta;
  }
  return finish.has_value();
}

std::string Generation::final_object() const {
  Usage u;
  for (const auto& p : prompts_) u.prompt_tokens += p.size();
  nlohmann::json choices = nlohmann::json::array();
  for (const auto& c : choices_) {
    u.completion_tokens += c->tokens;
    const bool want_lp = gen_.logprobs >= 0;
    if (chat_)
      choices.push_back(
          chat_choice(c->index, c->full, want_lp ? chat_logprobs(c->lps) : nlohmann::json(nullptr), c->finish));
    else
      choices.push_back(completion_choice(c->index, c->full,
                                          want_lp ? completion_logprobs(c->lps) : nlohmann::json(nullptr), c->finish));
  }
  for (const auto& c : choices_)
    if (!c->error.empty()) return dump(nlohmann::json::parse(ApiError(500, "server_error", c->error).body()));
  return dump(response_object(id_, chat_ ? "chat.completion" : "text_completion", ctx_.created,
                              ctx_.opt.served_model_name, std::move(choices), u));
}

std::string Generation::pump(std::chrono::milliseconds wait) {
  std::string out;
  if (done_) return out;
  if (gen_.stream && !head_sent_) {
    head_sent_ = true;
    for (const auto& c : choices_) {
      if (chat_) {  // OpenAI's first chat chunk carries the role
        out += sse(response_object(id_, "chat.completion.chunk", ctx_.created, ctx_.opt.served_model_name,
                                   nlohmann::json::array({chat_delta(c->index, std::string("assistant"), std::string(),
                                                                     nullptr, std::nullopt)}),
                                   std::nullopt));
      } else if (!echo_[c->prompt].empty()) {
        out += chunk(*c, echo_[c->prompt], {}, std::nullopt);
      }
    }
  }
  bool any = false;
  for (auto& c : choices_)  // everything that has arrived
    while (!c->finish)
      if (auto e = c->stream->next(std::chrono::milliseconds(0))) {
        handle(*c, std::move(*e), out);
        any = true;
      } else {
        break;
      }
  if (!any)  // nothing yet: wait on the first running choice
    for (auto& c : choices_)
      if (!c->finish) {
        if (auto e = c->stream->next(wait)) handle(*c, std::move(*e), out);
        break;
      }
  for (const auto& c : choices_)
    if (!c->finish) return out;
  done_ = true;
  if (!gen_.stream) return final_object();
  for (const auto& c : choices_)
    if (!c->error.empty()) out += "data: " + ApiError(500, "server_error", c->error).body() + "\n\n";
  if (gen_.include_usage) {
    Usage u;
    for (const auto& p : prompts_) u.prompt_tokens += p.size();
    for (const auto& c : choices_) u.completion_tokens += c->tokens;
    out += sse(response_object(id_, chat_ ? "chat.completion.chunk" : "text_completion", ctx_.created,
                               ctx_.opt.served_model_name, nlohmann::json::array(), u));
  }
  out += "data: [DONE]\n\n";
  return out;
}

}  // namespace minimakv::serve
