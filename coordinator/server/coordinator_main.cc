// k3-coordinator: the gRPC front end. Reads the model's metadata and tokenizer from the GGUF
// (no weights), connects to one or more worker-group leaders, serves k3.v1.Inference and
// Prometheus metrics.
//
//   k3-coordinator --model m.gguf --workers 127.0.0.1:50061[,host:port...] --listen 127.0.0.1:50051
//                  [--metrics-port 9464] [--token-budget 512] [--prefill-chunk 256] [--max-queue 256]
//                  [--idle-prefill-chunk 16384]  prompt tokens per step while no sequence decodes
//                                                (step_plan.h; <= --prefill-chunk: always the latter)
//                  [--max-concurrent-per-client N]              Generate calls in flight per client (0: no limit)
//                  [--auth-token-file F]                        clients must send 'authorization: Bearer <token>'
//                  [--tls-cert cert.pem --tls-key key.pem]      TLS for clients
//                  [--worker-token-file F] [--worker-tls-ca ca.pem]  what the leaders want (k3-worker --serve)
//                  [--step-poll-us N]   after sending a step, poll for its reply N us before sleeping
//                                       (default 0; a busy core per worker group while steps run)
//   SPDLOG_LEVEL=debug: one line per worker step with its latency (RPC, the leader's step, the
//   scheduler's own work), as bench/device/system_slice_run.sh reads them
#include <csignal>
#include <cstdio>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/server/inference_service.h"
#include "coordinator/server/router.h"
#include "coordinator/tokenizer/gguf_vocab.h"
#include "spdlog/cfg/env.h"
#include "spdlog/spdlog.h"
#include "worker/common/cli_args.h"
#include "worker/common/grpc_security.h"
#include "worker/common/status_macros.h"
#include "worker/gguf/gguf_file.h"

namespace {

absl::Status Run(k3::CliArgs& args) {
  const std::string model = args.Str("model");
  const std::string workers = args.Str("workers");
  const std::string listen = args.Str("listen", "127.0.0.1:50051");
  K3_ASSIGN_OR_RETURN(int64_t metrics_port, args.Int("metrics-port", 0));
  k3::coord::SchedulerOptions sched;
  K3_ASSIGN_OR_RETURN(sched.token_budget, args.Int("token-budget", 512));
  K3_ASSIGN_OR_RETURN(sched.prefill_chunk, args.Int("prefill-chunk", 256));
  K3_ASSIGN_OR_RETURN(sched.idle_prefill_chunk, args.Int("idle-prefill-chunk", 16384));
  K3_ASSIGN_OR_RETURN(sched.max_queue, args.Int("max-queue", 256));
  K3_ASSIGN_OR_RETURN(int64_t step_poll_us, args.Int("step-poll-us", 0));
  k3::coord::ServiceLimits limits;
  K3_ASSIGN_OR_RETURN(int64_t max_tokens, args.Int("max-tokens-limit", 0));
  K3_ASSIGN_OR_RETURN(int64_t max_prompt, args.Int("max-prompt-tokens", 0));
  K3_ASSIGN_OR_RETURN(limits.max_concurrent_per_client, args.Int("max-concurrent-per-client", 0));
  limits.max_tokens = static_cast<uint32_t>(max_tokens);
  limits.max_prompt_tokens = static_cast<uint32_t>(max_prompt);
  const std::string token_file = args.Str("auth-token-file");
  const std::string tls_cert = args.Str("tls-cert");
  const std::string tls_key = args.Str("tls-key");
  const std::string worker_token_file = args.Str("worker-token-file");
  const std::string worker_tls_ca = args.Str("worker-tls-ca");
  K3_RETURN_IF_ERROR(args.Finish());
  if (model.empty() || workers.empty()) return absl::InvalidArgumentError("--model and --workers are required");
  if (sched.token_budget < 1 || sched.prefill_chunk < 1 || sched.idle_prefill_chunk < 1) {
    return absl::InvalidArgumentError("budgets must be >= 1");
  }
  if (step_poll_us < 0) return absl::InvalidArgumentError("--step-poll-us must be >= 0");
  sched.step_poll = std::chrono::microseconds(step_poll_us);
  if (limits.max_concurrent_per_client < 0) return absl::InvalidArgumentError("--max-concurrent-per-client must be >= 0");
  // Secrets and certificates are read before anything starts: a bad file is a clear error now,
  // not a server that refuses every call later.
  std::string token;
  if (!token_file.empty()) {
    K3_ASSIGN_OR_RETURN(token, k3::security::ReadTokenFile(token_file));
  }
  K3_ASSIGN_OR_RETURN(auto server_creds, k3::security::ServerCredentials(tls_cert, tls_key));
  if (!worker_token_file.empty()) {
    K3_ASSIGN_OR_RETURN(sched.link.token, k3::security::ReadTokenFile(worker_token_file));
  }
  K3_ASSIGN_OR_RETURN(sched.link.credentials, k3::security::ChannelCredentials(worker_tls_ca));
  sched.link.tls = !worker_tls_ca.empty();

  K3_ASSIGN_OR_RETURN(auto file, k3::gguf::GgufFile::Open(model, /*allow_header_only=*/true));
  K3_ASSIGN_OR_RETURN(k3::model::K3Config config, k3::model::ParseK3Config(*file));
  std::optional<k3::tok::Tokenizer> tokenizer;
  if (auto t = k3::tok::TokenizerFromGguf(*file); t.ok()) {
    tokenizer.emplace(std::move(*t));
    spdlog::info("tokenizer: {} tokens", tokenizer->vocab_size());
  } else {
    spdlog::warn("no tokenizer ({}): token ids only", std::string(t.status().message()));
  }
  std::vector<std::string> addrs = absl::StrSplit(workers, ',', absl::SkipEmpty());
  k3::coord::Metrics metrics;
  k3::coord::Router router(addrs, tokenizer ? &*tokenizer : nullptr, sched, &metrics);
  router.Start();
  k3::coord::InferenceService service(config, tokenizer ? &*tokenizer : nullptr, router, metrics, limits, token);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, server_creds, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen,
                                               tls_cert.empty() ? "" : " (or the TLS certificate and key do not match)"));
  }
  spdlog::info("coordinator serving k3.v1.Inference on {} for {} worker group(s): {}, {}, {}", listen, addrs.size(),
               tls_cert.empty() ? "plaintext" : "TLS", token.empty() ? "no authentication" : "bearer token required",
               limits.max_concurrent_per_client > 0
                   ? absl::StrCat("at most ", limits.max_concurrent_per_client, " requests in flight per client")
                   : std::string("no per-client limit"));

  httplib::Server http;
  std::thread http_thread;
  if (metrics_port > 0) {
    http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
      router.groups_up();
      std::string text = metrics.Render();
      text += "# HELP k3_worker_group_up Whether a worker group answers its health check.\n"
              "# TYPE k3_worker_group_up gauge\n";
      for (const auto& g : router.groups()) {
        text += "k3_worker_group_up{address=\"" + g->address() + "\"} " + (g->healthy() ? "1" : "0") + "\n";
      }
      text += "# HELP k3_worker_group_requests Requests queued or running on a worker group.\n"
              "# TYPE k3_worker_group_requests gauge\n";
      for (const auto& g : router.groups()) {
        text += "k3_worker_group_requests{address=\"" + g->address() + "\"} " + std::to_string(g->load()) + "\n";
      }
      res.set_content(text, "text/plain; version=0.0.4");
    });
    http_thread = std::thread([&] { http.listen("127.0.0.1", static_cast<int>(metrics_port)); });
    spdlog::info("metrics on http://127.0.0.1:{}/metrics", metrics_port);
  }
  std::printf("COORDINATOR READY %s\n", listen.c_str());
  std::fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("signal {}: shutting down", sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  router.Stop();
  if (metrics_port > 0) {
    http.stop();
    http_thread.join();
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // SPDLOG_LEVEL=debug (k3-launch's logging.level) turns on the per-step timing lines.
  spdlog::cfg::load_env_levels();
  k3::CliArgs args(argc, argv);
  absl::Status s = Run(args);
  if (!s.ok()) {
    std::fprintf(stderr, "k3-coordinator: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
