// `minimakv serve`: the OpenAI-compatible HTTP server over the scheduler (serve/http_server.h).
//
// Loads the model, sizes the KV pools from --kv-memory, reports the memory and the envelope's
// measured capacity per mode on stderr (and in /metrics), prints "listening on http://HOST:PORT" on
// stdout once the socket is bound (--port 0 picks a free one), and serves until SIGTERM or SIGINT,
// which drain in-flight requests for --shutdown-grace seconds and exit 0.
#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "command.h"
#include "default_paths.h"
#include "engine_flags.h"
#include "minimakv/engine/capacity.h"
#include "minimakv/engine/kv_budget.h"
#include "minimakv/serve/http_server.h"

namespace minimakv::app {

namespace {

struct ServeFlags {
  EngineFlags engine;  // --kv-memory empty: 90% on cuda, 1GiB on cpu
  std::string chat_template;
  double shutdown_grace = 30;
  serve::ServerOptions server;
};

// The chat template: --chat-template, else the model's tokenizer_config.json, else the one beside the
// tokenizer the model fell back to (a dummy-weight model runs the embedded tokenizer and its template).
std::optional<serve::ChatTemplate> chat_template_for(const ServeFlags& f) {
  if (!f.chat_template.empty()) return serve::ChatTemplate::load(f.chat_template);
  const auto& e = f.engine;
  if (auto t = serve::ChatTemplate::from_model_dir(e.model)) return t;
  if (!std::filesystem::exists(std::filesystem::path(e.model) / "tokenizer.json") && !e.fallback_tokenizer.empty())
    return serve::ChatTemplate::from_model_dir(std::filesystem::path(e.fallback_tokenizer).parent_path().string());
  return std::nullopt;
}

// Fails fast, before a model is loaded, when the address cannot be bound (a port in use).
void probe_address(const std::string& host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (port == 0 || ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) return;  // names and IPv6: left to the server
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  if (!ok)
    throw std::invalid_argument("serve: cannot bind " + host + ":" + std::to_string(port) +
                                " (in use, or not an address of this machine)");
}

int run_serve(ServeFlags f) {
  auto& e = f.engine;
  if (e.kv_memory.empty()) e.kv_memory = e.device == "cuda" ? "90%" : "1GiB";
  e.check("serve");
  probe_address(f.server.host, f.server.port);
  if (f.server.served_model_name.empty())
    f.server.served_model_name = std::filesystem::path(e.model).filename().string();
  if (f.server.api_key.empty())
    if (const char* k = std::getenv("MINIMAKV_API_KEY")) f.server.api_key = k;
  f.server.shutdown_grace = std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_grace * 1000));

  // Signals go to one thread that waits for them; block them before any other thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto chat = chat_template_for(f);
  auto setup = e.load([](const engine::Model& m) {
    return std::min<size_t>(static_cast<size_t>(m.config().max_position_embeddings), 16384);
  });
  const auto& model = setup.model;
  const size_t envelope = setup.envelope, ref = setup.reference_tokens;
  const auto& cap = setup.capacity;

  serve::ServerMetrics metrics(f.server.served_model_name);
  metrics.set_capacity(cap);

  serve::EngineService engine(*model, setup.scheduler, setup.pools, metrics, &model->backend());
  const auto mem = model->memory();
  fmt::print(stderr, "serve: model {} ({}), device {}, weights {:.2f} GiB", e.model, f.server.served_model_name,
             model->backend().describe(), static_cast<double>(mem.weight_bytes) / (1u << 30));
  if (mem.device)
    fmt::print(stderr, ", {:.1f} GiB free of {:.1f}", static_cast<double>(mem.device->free) / (1u << 30),
               static_cast<double>(mem.device->total) / (1u << 30));
  fmt::print(stderr, "\nserve: kv {}, envelope {:.2f} GiB:", e.kv, static_cast<double>(envelope) / (1u << 30));
  for (int i = 0; i < codec::kNumPageFormats; ++i) {
    const auto& p = engine.scheduler().store().pool(static_cast<codec::PageFormat>(i));
    if (p.capacity())
      fmt::print(stderr, " {} {} pages ({:.2f} GiB)", codec::to_string(static_cast<codec::PageFormat>(i)), p.capacity(),
                 static_cast<double>(p.capacity() * p.page_bytes()) / (1u << 30));
  }
  if (const auto layout = stale_layout(model->config(), e.kv_opt); !layout.empty())
    fmt::print(stderr, "\nserve: {}", layout);
  fmt::print(stderr, "\nserve: capacity at {} tokens per request:", ref);
  for (const auto& r : cap) fmt::print(stderr, " {} {} requests", cache::to_string(r.mode), r.max_requests);
  fmt::print(stderr, "\nserve: chat template: {}\n", chat ? chat->origin() : "none (/v1/chat/completions answers 400)");

  serve::HttpServer server(f.server, engine, model->tokenizer(), model->config(), std::move(chat), metrics);
  const int port = server.bind();
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    fmt::print(stderr, "serve: signal {}: draining (up to {:.0f} s)\n", sig, f.shutdown_grace);
    server.stop();
  });
  fmt::print("listening on http://{}:{}\n", f.server.host, port);
  std::fflush(stdout);
  server.run();
  pthread_kill(waiter.native_handle(), SIGTERM);  // when run() ended by itself, release the waiter
  waiter.join();
  fmt::print(stderr, "serve: stopped\n");
  return 0;
}

const Registration kServe(
    {"serve", "an OpenAI-compatible HTTP server (completions, chat, streaming, /metrics) over the scheduler", 64,
     [](CLI::App& sub) {
       auto f = std::make_shared<ServeFlags>();
       f->server.served_model_name.clear();
       f->engine.add_to(sub,
                        "KV memory envelope: bytes with a unit (1GiB), or a share of the GPU memory free after loading "
                        "(default: 90% on cuda, 1GiB on cpu)",
                        "request length the minima pools are split for (default: the context, at most 16384)");
       sub.add_option("--threads", f->engine.cpu_threads, "CPU threads (0: one per hardware thread)")
           ->check(CLI::Range(0u, 1024u));
       sub.add_option("--host", f->server.host, "address to bind (default 127.0.0.1: this machine only)");
       sub.add_option("--port", f->server.port, "port (0: any free port)")->check(CLI::Range(0, 65535));
       sub.add_option("--api-key", f->server.api_key,
                      "require 'Authorization: Bearer KEY' on /v1 (also $MINIMAKV_API_KEY)");
       sub.add_option("--served-model-name", f->server.served_model_name,
                      "the model's name in the API (default: the folder's)");
       sub.add_option("--chat-template", f->chat_template,
                      "a chat template file (or tokenizer_config.json) to use instead");
       sub.add_option("--max-request-bytes", f->server.max_request_bytes, "largest request body")
           ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
       sub.add_option("--max-prompt-tokens", f->server.max_prompt_tokens,
                      "longest prompt (0: the model's context less one)")
           ->check(CLI::Range(size_t{0}, size_t{1} << 24));
       sub.add_option("--http-threads", f->server.http_threads, "connections answered at once")
           ->check(CLI::Range(4, 4096));
       sub.add_option("--shutdown-grace", f->shutdown_grace, "seconds in-flight requests may finish after SIGTERM")
           ->check(finite())
           ->check(CLI::Range(0.0, 3600.0));
       return std::function<int()>([=] { return run_serve(*f); });
     }});

}  // namespace

}  // namespace minimakv::app
