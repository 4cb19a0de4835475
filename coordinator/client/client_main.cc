// k3: the command-line client of the K3 server.
//
//   k3 generate --prompt "Once upon a time" [--max-tokens 64] [--temperature 0.7] [--seed 1] ...
//   k3 generate --ids "1 2 3" --max-tokens 16        (token ids in, token ids out)
//   k3 generate --ids-file prompt.txt --max-tokens 16 (ids from a file: prompts too long for argv)
//   k3 chat --message "Hello"  [--system "You are terse."]
//   k3 tokenize --text "..." | k3 detokenize --ids "..." | k3 info | k3 health | k3 stats
//   k3 load --requests 32 --concurrency 8 --ids "1 2 3" --max-tokens 32
// Common: --server 127.0.0.1:50051, --timeout-s 600,
//   --token-file PATH (or env K3_TOKEN_FILE): sends 'authorization: Bearer <first line of PATH>'
//   --tls-ca PATH: TLS to the server, trusting the PEM CA certificate(s) in PATH
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "k3/v1/inference.grpc.pb.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/common/cli_args.h"
#include "worker/common/grpc_security.h"
#include "worker/common/small_file.h"
#include "worker/common/status_macros.h"

namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  for (absl::string_view p : absl::StrSplit(s, absl::ByAnyChar(" ,\t\r\n"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(p, &id)) return absl::InvalidArgumentError("--ids wants integers separated by spaces");
    ids.push_back(id);
  }
  return ids;
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

const char* Reason(k3::v1::FinishReason r) {
  switch (r) {
    case k3::v1::FINISH_REASON_STOP: return "stop";
    case k3::v1::FINISH_REASON_LENGTH: return "length";
    case k3::v1::FINISH_REASON_CANCELLED: return "cancelled";
    default: return "?";
  }
}

absl::StatusOr<k3::v1::GenerateRequest> BuildRequest(k3::CliArgs& args, const std::string& cmd) {
  k3::v1::GenerateRequest req;
  if (cmd == "chat") {
    auto* chat = req.mutable_chat();
    if (args.Has("system")) {
      auto* m = chat->add_messages();
      m->set_role("system");
      m->set_content(args.Str("system"));
    }
    auto* m = chat->add_messages();
    m->set_role("user");
    m->set_content(args.Str("message"));
  } else if (args.Has("ids")) {
    K3_ASSIGN_OR_RETURN(auto ids, ParseIds(args.Str("ids")));
    req.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  } else if (args.Has("ids-file")) {
    // A 32k-token prompt's ids exceed what one command-line argument may hold (128 KiB); the
    // file is bounded by what the coordinator accepts in one request.
    K3_ASSIGN_OR_RETURN(std::string text, k3::ReadSmallFile(args.Str("ids-file"), 16 << 20, "--ids-file"));
    K3_ASSIGN_OR_RETURN(auto ids, ParseIds(text));
    req.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  } else {
    req.set_text(args.Str("prompt"));
  }
  K3_ASSIGN_OR_RETURN(int64_t max_tokens, args.Int("max-tokens", 64));
  req.set_max_tokens(static_cast<uint32_t>(max_tokens));
  auto* s = req.mutable_sampling();
  K3_ASSIGN_OR_RETURN(double t, args.Double("temperature", 0));
  K3_ASSIGN_OR_RETURN(int64_t top_k, args.Int("top-k", 0));
  K3_ASSIGN_OR_RETURN(double top_p, args.Double("top-p", 1));
  K3_ASSIGN_OR_RETURN(double min_p, args.Double("min-p", 0));
  K3_ASSIGN_OR_RETURN(double rep, args.Double("repetition-penalty", 1));
  K3_ASSIGN_OR_RETURN(double pres, args.Double("presence-penalty", 0));
  K3_ASSIGN_OR_RETURN(double freq, args.Double("frequency-penalty", 0));
  K3_ASSIGN_OR_RETURN(int64_t logprobs, args.Int("logprobs", 0));
  s->set_temperature(static_cast<float>(t));
  s->set_top_k(static_cast<int32_t>(top_k));
  s->set_top_p(static_cast<float>(top_p));
  s->set_min_p(static_cast<float>(min_p));
  s->set_repetition_penalty(static_cast<float>(rep));
  s->set_presence_penalty(static_cast<float>(pres));
  s->set_frequency_penalty(static_cast<float>(freq));
  s->set_logprobs(static_cast<int32_t>(logprobs));
  if (args.Has("seed")) {
    K3_ASSIGN_OR_RETURN(int64_t seed, args.Int("seed", 0));
    s->set_seed(static_cast<uint64_t>(seed));
  }
  for (absl::string_view stop : absl::StrSplit(args.Str("stop"), '|', absl::SkipEmpty())) req.add_stop(std::string(stop));
  req.set_ignore_eos(args.Has("ignore-eos"));
  return req;
}

struct GenerateOutcome {
  std::vector<int32_t> tokens;
  std::string text;
  double ttft_ms = 0;
  double total_ms = 0;
  double decode_s = 0;  // first token's arrival to the last one's, as this client saw them
  k3::v1::FinishReason reason = k3::v1::FINISH_REASON_UNSPECIFIED;
};

absl::StatusOr<GenerateOutcome> RunGenerate(k3::v1::Inference::Stub& stub, const k3::v1::GenerateRequest& req,
                                            const std::string& token, double timeout_s, bool print,
                                            bool print_ids = false) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  k3::security::AddBearer(ctx, token);
  GenerateOutcome out;
  const auto t0 = Clock::now();
  auto reader = stub.Generate(&ctx, req);
  k3::v1::GenerateResponse resp;
  bool first = true;
  Clock::time_point first_at, last_at;
  while (reader->Read(&resp)) {
    if (resp.tokens_size() > 0) {
      last_at = Clock::now();
      if (first) {
        first_at = last_at;
        out.ttft_ms = std::chrono::duration<double, std::milli>(first_at - t0).count();
        first = false;
      }
    }
    for (const auto& t : resp.tokens()) out.tokens.push_back(t.token());
    out.text += resp.text();
    if (print) {
      if (print_ids || (req.has_token_ids() && resp.text().empty())) {
        for (const auto& t : resp.tokens()) std::printf(" %d", t.token());
      } else {
        std::fputs(resp.text().c_str(), stdout);
      }
      std::fflush(stdout);
    }
    if (resp.finish_reason() != k3::v1::FINISH_REASON_UNSPECIFIED) {
      out.reason = resp.finish_reason();
      if (print) {
        std::fprintf(stderr, "\n[finish: %s; prompt %u tokens, completion %u tokens; ttft %.1f ms; decode %.1f tokens/s; seed %llu]\n",
                     Reason(resp.finish_reason()), resp.usage().prompt_tokens(), resp.usage().completion_tokens(),
                     resp.usage().time_to_first_token_ms(), resp.usage().decode_tokens_per_second(),
                     static_cast<unsigned long long>(resp.seed()));
      }
    }
  }
  K3_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
  out.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  out.decode_s = std::chrono::duration<double>(last_at - first_at).count();
  if (print) {
    // The same figures as the server's usage line, timed here: what a caller sees, the RPC's
    // setup and the stream's delivery included.
    std::fprintf(stderr, "[client: ttft %.1f ms; decode %.1f tokens/s over %zu tokens]\n", out.ttft_ms,
                 out.tokens.size() > 1 && out.decode_s > 0 ? (out.tokens.size() - 1) / out.decode_s : 0.0,
                 out.tokens.size() > 1 ? out.tokens.size() - 1 : 0);
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * v.size()));
  return v[i];
}

absl::Status Load(k3::v1::Inference::Stub& stub, const k3::v1::GenerateRequest& req, const std::string& token,
                  int64_t n, int64_t conc, double timeout_s) {
  std::atomic<int64_t> next{0}, failed{0}, tokens{0};
  std::mutex mu;
  std::vector<double> latency, ttft;
  std::string first_error;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < conc; ++c) {
    threads.emplace_back([&] {
      while (next.fetch_add(1) < n) {
        auto r = RunGenerate(stub, req, token, timeout_s, false);
        std::lock_guard<std::mutex> l(mu);
        if (!r.ok()) {
          ++failed;
          if (first_error.empty()) first_error = std::string(r.status().message());
          continue;
        }
        tokens += static_cast<int64_t>(r->tokens.size());
        latency.push_back(r->total_ms);
        ttft.push_back(r->ttft_ms);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("load: %ld requests, concurrency %ld, %ld failed, %.2f s\n", static_cast<long>(n), static_cast<long>(conc),
              static_cast<long>(failed.load()), wall);
  std::printf("  throughput: %.2f requests/s, %.1f generated tokens/s\n", (n - failed) / wall, tokens / wall);
  std::printf("  latency ms: p50 %.1f p90 %.1f p99 %.1f max %.1f\n", Percentile(latency, 50), Percentile(latency, 90),
              Percentile(latency, 99), Percentile(latency, 100));
  std::printf("  time to first token ms: p50 %.1f p90 %.1f p99 %.1f\n", Percentile(ttft, 50), Percentile(ttft, 90),
              Percentile(ttft, 99));
  if (failed > 0) return absl::UnavailableError("some requests failed; first error: " + first_error);
  return absl::OkStatus();
}

absl::Status Run(const std::string& cmd, k3::CliArgs& args) {
  const std::string server = args.Str("server", "127.0.0.1:50051");
  K3_ASSIGN_OR_RETURN(double timeout_s, args.Double("timeout-s", 600));
  std::string token_file = args.Str("token-file");
  if (token_file.empty()) {
    if (const char* env = std::getenv("K3_TOKEN_FILE")) token_file = env;
  }
  std::string token;
  if (!token_file.empty()) {
    K3_ASSIGN_OR_RETURN(token, k3::security::ReadTokenFile(token_file));
  }
  K3_ASSIGN_OR_RETURN(auto creds, k3::security::ChannelCredentials(args.Str("tls-ca")));
  auto channel = grpc::CreateChannel(server, creds);
  auto stub = k3::v1::Inference::NewStub(channel);
  if (cmd == "generate" || cmd == "chat") {
    K3_ASSIGN_OR_RETURN(auto req, BuildRequest(args, cmd));
    const bool print_ids = args.Has("print-ids");  // token ids instead of text
    K3_RETURN_IF_ERROR(args.Finish());
    return RunGenerate(*stub, req, token, timeout_s, true, print_ids).status();
  }
  if (cmd == "load") {
    K3_ASSIGN_OR_RETURN(auto req, BuildRequest(args, "generate"));
    K3_ASSIGN_OR_RETURN(int64_t n, args.Int("requests", 16));
    K3_ASSIGN_OR_RETURN(int64_t conc, args.Int("concurrency", 4));
    K3_RETURN_IF_ERROR(args.Finish());
    return Load(*stub, req, token, n, std::max<int64_t>(1, conc), timeout_s);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  k3::security::AddBearer(ctx, token);
  if (cmd == "tokenize") {
    k3::v1::TokenizeRequest req;
    req.set_text(args.Str("text"));
    req.set_allow_special(args.Has("allow-special"));
    K3_RETURN_IF_ERROR(args.Finish());
    k3::v1::TokenizeResponse resp;
    K3_RETURN_IF_ERROR(FromGrpc(stub->Tokenize(&ctx, req, &resp)));
    for (int32_t id : resp.ids()) std::printf("%d ", id);
    std::printf("\n");
    return absl::OkStatus();
  }
  if (cmd == "detokenize") {
    K3_ASSIGN_OR_RETURN(auto ids, ParseIds(args.Str("ids")));
    K3_RETURN_IF_ERROR(args.Finish());
    k3::v1::DetokenizeRequest req;
    req.mutable_ids()->Assign(ids.begin(), ids.end());
    k3::v1::DetokenizeResponse resp;
    K3_RETURN_IF_ERROR(FromGrpc(stub->Detokenize(&ctx, req, &resp)));
    std::printf("%s\n", resp.text().c_str());
    return absl::OkStatus();
  }
  if (cmd == "info") {
    K3_RETURN_IF_ERROR(args.Finish());
    k3::v1::ModelInfo resp;
    K3_RETURN_IF_ERROR(FromGrpc(stub->GetModelInfo(&ctx, k3::v1::ModelInfoRequest(), &resp)));
    std::printf("%s\n", resp.DebugString().c_str());
    return absl::OkStatus();
  }
  if (cmd == "health") {
    K3_RETURN_IF_ERROR(args.Finish());
    k3::v1::HealthResponse resp;
    K3_RETURN_IF_ERROR(FromGrpc(stub->Health(&ctx, k3::v1::HealthRequest(), &resp)));
    std::printf("%s (%u of %u worker groups up)\n", resp.status() == k3::v1::HealthResponse::SERVING ? "SERVING" : "NOT_SERVING",
                resp.groups_up(), resp.groups_total());
    return resp.status() == k3::v1::HealthResponse::SERVING ? absl::OkStatus() : absl::UnavailableError("not serving");
  }
  if (cmd == "stats") {
    K3_RETURN_IF_ERROR(args.Finish());
    k3::v1::Stats resp;
    K3_RETURN_IF_ERROR(FromGrpc(stub->GetStats(&ctx, k3::v1::StatsRequest(), &resp)));
    std::printf("%s\n", resp.DebugString().c_str());
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown command '" + cmd +
                                    "'; commands: generate chat tokenize detokenize info health stats load");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: k3 generate|chat|tokenize|detokenize|info|health|stats|load [--server ADDR] "
                         "[--token-file PATH] [--tls-ca PATH] ...\n");
    return 2;
  }
  // Warnings (a token file others can read) go to stderr: stdout carries the generated output.
  spdlog::set_default_logger(spdlog::stderr_color_st("k3"));
  const std::string cmd = argv[1];
  k3::CliArgs args(argc - 1, argv + 1);
  absl::Status s = Run(cmd, args);
  if (!s.ok()) {
    std::fprintf(stderr, "k3 %s: %s (%s)\n", cmd.c_str(), std::string(s.message()).c_str(),
                 absl::StatusCodeToString(s.code()).c_str());
    return 1;
  }
  return 0;
}
