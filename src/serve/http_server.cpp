#include "minimakv/serve/http_server.h"

#include <httplib.h>

#include <ctime>

#include "generation.h"

namespace minimakv::serve {

namespace {

const char* error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "invalid_request_error";
    case 503:
      return "server_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

bool same(const std::string& a, const std::string& b) {  // constant time in the key's length
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

struct HttpServer::Impl {
  ServeContext ctx;
  httplib::Server http;
  std::atomic<bool> draining{false};
  int port = 0;

  Impl(ServerOptions opt, EngineService& engine, const model::Tokenizer& tok, const model::ModelConfig& cfg,
       std::optional<ChatTemplate> chat, ServerMetrics& metrics)
      : ctx(std::move(opt), engine, tok, cfg, std::move(chat), metrics) {
    ctx.created = static_cast<int64_t>(std::time(nullptr));
  }

  void error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(e.body(), "application/json");
    ctx.metrics.http_error(e.status);
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (ctx.opt.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    if (h.rfind("Bearer ", 0) == 0 && same(h.substr(7), ctx.opt.api_key)) return true;
    error(res,
          ApiError(401, "authentication_error", "a valid API key is required: send 'Authorization: Bearer <key>'"));
    return false;
  }

  void check_model(const std::string& m) const {
    if (!m.empty() && m != ctx.opt.served_model_name)
      throw ApiError(404, "not_found_error",
                     "the model '" + m + "' does not exist; this server serves '" + ctx.opt.served_model_name + "'",
                     "model");
  }

  // Runs a generation request: streamed as SSE, or as one JSON object once done. Either way the
  // answer goes through a content provider, which returns false once the client is gone: then the
  // releaser aborts every choice still running.
  void answer(httplib::Response& res, std::shared_ptr<Generation> g) {
    g->start();
    const bool stream = g->streaming();
    if (stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
    }
    res.set_chunked_content_provider(
        stream ? "text/event-stream" : "application/json",
        [g](size_t, httplib::DataSink& sink) {
          // short waits, so httplib checks between calls that the client is still there
          const std::string out = g->pump(std::chrono::milliseconds(100));
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (g->done()) sink.done();
          return true;
        },
        [g](bool success) {
          if (!success) g->cancel();
        });
  }

  template <typename Parse>
  void generation_route(const httplib::Request& req, httplib::Response& res, Parse parse) {
    if (!authorized(req, res)) return;
    try {
      if (draining || !ctx.engine.accepting()) throw ApiError(503, "server_error", "the server is shutting down");
      auto r = parse(req.body, ctx.opt.limits);
      check_model(r.model);
      answer(res, std::make_shared<Generation>(ctx, r));
    } catch (const ApiError& e) {
      error(res, e);
    }
  }

  void routes() {
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& s) {
      generation_route(q, s, [](std::string_view b, const RequestLimits& l) { return parse_completion_request(b, l); });
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& s) {
      generation_route(q, s, [](std::string_view b, const RequestLimits& l) { return parse_chat_request(b, l); });
    });
    http.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& s) {
      if (!authorized(q, s)) return;
      s.set_content(dump(model_list(ctx.opt.served_model_name, ctx.created,
                                    static_cast<size_t>(ctx.cfg.max_position_embeddings))),
                    "application/json");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& s) {
      const bool ok = !draining && ctx.engine.accepting();
      s.status = ok ? 200 : 503;
      s.set_content(ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& s) {
      s.set_content(ctx.metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    // Every other refusal (unknown path, wrong method, a body over the limit) in OpenAI's shape.
    http.set_error_handler([this](const httplib::Request& q, httplib::Response& s) {
      if (!s.body.empty()) return;
      std::string msg = "HTTP " + std::to_string(s.status);
      if (s.status == 404) msg = "no such endpoint: " + q.method + " " + q.path;
      if (s.status == 413)
        msg = "the request body is larger than this server's limit of " + std::to_string(ctx.opt.max_request_bytes) +
              " bytes";
      if (s.status == 405) msg = q.method + " is not allowed on " + q.path;
      const int status = s.status;
      error(s, ApiError(status, error_type(status), msg));
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& s, std::exception_ptr ep) {
      std::string msg = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        msg = e.what();
      } catch (...) {
      }
      error(s, ApiError(500, "server_error", msg));
    });
  }
};

HttpServer::HttpServer(ServerOptions opt, EngineService& engine, const model::Tokenizer& tok,
                       const model::ModelConfig& cfg, std::optional<ChatTemplate> chat, ServerMetrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(opt), engine, tok, cfg, std::move(chat), metrics)) {
  auto& h = impl_->http;
  const int threads = std::max(4, impl_->ctx.opt.http_threads);
  h.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  h.set_payload_max_length(impl_->ctx.opt.max_request_bytes);
  h.set_tcp_nodelay(true);
  h.set_keep_alive_max_count(1000);
  h.set_read_timeout(60, 0);
  h.set_write_timeout(60, 0);
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  auto& i = *impl_;
  if (i.ctx.opt.port == 0) {
    i.port = i.http.bind_to_any_port(i.ctx.opt.host);
    if (i.port < 0) throw std::runtime_error("serve: cannot bind " + i.ctx.opt.host);
  } else {
    if (!i.http.bind_to_port(i.ctx.opt.host, i.ctx.opt.port))
      throw std::runtime_error("serve: cannot bind " + i.ctx.opt.host + ":" + std::to_string(i.ctx.opt.port) +
                               " (in use?)");
    i.port = i.ctx.opt.port;
  }
  return i.port;
}

void HttpServer::run() {
  impl_->http.listen_after_bind();
}

void HttpServer::stop() {
  auto& i = *impl_;
  if (i.draining.exchange(true)) return;
  i.ctx.engine.drain(i.ctx.opt.shutdown_grace);
  // the handlers still streaming see their requests end (finished, or aborted by the drain) and
  // close; give them a moment to send their last chunks before the listener goes
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  i.http.stop();
}

}  // namespace minimakv::serve
