// The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (both streaming over SSE),
// /v1/models, /health and /metrics, on cpp-httplib.
//
// Owns: the listening socket, the HTTP worker threads and the request handlers. Each generation
// request is answered by one worker thread that submits its choices to the EngineService and relays
// their tokens; a client that disconnects has its requests aborted (their pages freed at the
// engine's next step). Binds 127.0.0.1 unless told otherwise. With an API key, /v1/* requires
// "Authorization: Bearer <key>". Every refusal is OpenAI's error JSON with a 4xx status (401, 404,
// 413 for a body over max_request_bytes, 400 for the rest), and the server keeps serving.
// stop() (from any thread, e.g. on SIGTERM) stops accepting generation requests (503), lets
// in-flight ones finish for `shutdown_grace`, aborts what remains and returns from run().
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "minimakv/model/config.h"
#include "minimakv/model/tokenizer.h"
#include "minimakv/serve/api_request.h"
#include "minimakv/serve/chat_template.h"
#include "minimakv/serve/engine_service.h"
#include "minimakv/serve/metrics.h"

namespace minimakv::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() returns it)
  std::string api_key;
  std::string served_model_name = "minimakv";
  size_t max_request_bytes = 16u << 20;
  size_t max_prompt_tokens = 0;  // 0: the model's context less one token to generate
  int http_threads = 128;        // concurrent connections being answered (a streaming one holds one)
  std::chrono::milliseconds shutdown_grace{30000};
  RequestLimits limits;
};

class HttpServer {
 public:
  HttpServer(ServerOptions opt, EngineService& engine, const model::Tokenizer& tok, const model::ModelConfig& cfg,
             std::optional<ChatTemplate> chat, ServerMetrics& metrics);
  ~HttpServer();
  // Binds the socket; returns the port. Throws std::runtime_error when the address cannot be bound.
  int bind();
  void run();   // serves until stop()
  void stop();  // thread-safe; see above

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace minimakv::serve
