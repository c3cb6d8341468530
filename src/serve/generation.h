// One generation request of either endpoint, from its parsed body to the bytes the client receives.
//
// Owns: the request's choices (one engine request each: prompts x n), their text streams, stop
// strings, log-probabilities and usage, and the endpoint's output format. start() submits every
// choice or none (a refusal cancels those already submitted and throws ApiError). pump() moves the
// events that have arrived into output: SSE chunks when streaming, else the final object once every
// choice has ended. cancel() aborts whatever is still running (a client that went away).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "minimakv/serve/api_request.h"
#include "minimakv/serve/api_response.h"
#include "minimakv/serve/chat_template.h"
#include "minimakv/serve/engine_service.h"
#include "minimakv/serve/http_server.h"
#include "minimakv/serve/text_stream.h"

namespace minimakv::serve {

// What every handler reads: the engine, tokenizer, template and limits.
struct ServeContext {
  ServeContext(ServerOptions o, EngineService& e, const model::Tokenizer& t, const model::ModelConfig& c,
               std::optional<ChatTemplate> ch, ServerMetrics& m)
      : opt(std::move(o)), engine(e), tok(t), cfg(c), chat(std::move(ch)), metrics(m) {}
  ServerOptions opt;
  EngineService& engine;
  const model::Tokenizer& tok;
  const model::ModelConfig& cfg;
  std::optional<ChatTemplate> chat;
  ServerMetrics& metrics;
  int64_t created = 0;  // unix seconds at startup (the model's "created")
  std::mutex rng_mu;
  std::mt19937_64 rng{std::random_device{}()};
  uint64_t random_seed() {
    std::lock_guard lock(rng_mu);
    return rng();
  }
  size_t max_prompt_tokens() const;
};

class Generation {
 public:
  Generation(ServeContext& ctx, const CompletionRequest& r);
  Generation(ServeContext& ctx, const ChatRequest& r);
  ~Generation();

  void start();
  // Waits up to `wait` for events, then returns the output they produced (possibly empty). done()
  // is true once the last piece (the final object, or the stream's usage chunk and "[DONE]") was returned.
  std::string pump(std::chrono::milliseconds wait);
  bool done() const { return done_; }
  bool streaming() const { return gen_.stream; }
  void cancel();

 private:
  struct Choice;
  std::vector<int32_t> tokenize(const std::string& text) const;
  void add_prompt(std::vector<int32_t> ids, std::string echo_text);
  bool handle(Choice& c, StreamEvent&& e, std::string& out);
  std::string chunk(const Choice& c, const std::string& delta, const std::vector<TokenInfo>& lps,
                    const std::optional<std::string>& finish) const;
  std::string final_object() const;

  ServeContext& ctx_;
  bool chat_;
  GenerationParams gen_;
  std::string id_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::string> echo_;  // per prompt: the text to prepend (completions with echo)
  std::vector<std::unique_ptr<Choice>> choices_;
  bool started_ = false, head_sent_ = false, done_ = false;
};

}  // namespace minimakv::serve
