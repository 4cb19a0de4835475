// k3-run: the CPU engine on one model, no server: prefill a prompt, decode greedily, report
// tokens/s. For checking a model file and timing the CPU backend.
//
//   k3-run --model m.gguf --prompt "1 2 3" --gen 16
//   k3-run --model m.gguf --prompt-len 64 --gen 32 --seqs 4
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "worker/common/cli_args.h"
#include "worker/common/status_macros.h"
#include "worker/engine/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int32_t Argmax(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

absl::Status Run(k3::CliArgs& args) {
  using namespace k3::engine;
  const std::string model = args.Str("model");
  const std::string prompt_text = args.Str("prompt");
  K3_ASSIGN_OR_RETURN(int64_t prompt_len, args.Int("prompt-len", 16));
  K3_ASSIGN_OR_RETURN(int64_t gen, args.Int("gen", 16));
  K3_ASSIGN_OR_RETURN(int64_t seqs, args.Int("seqs", 1));
  const bool quiet = args.Has("quiet");
  const std::string trace = args.Str("trace");
  K3_RETURN_IF_ERROR(args.Finish());
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  if (seqs < 1 || gen < 0) return absl::InvalidArgumentError("--seqs must be >= 1, --gen >= 0");

  EngineOptions opt;
  opt.max_seqs = seqs;
  std::unique_ptr<k3::Tracer> tracer;
  if (!trace.empty()) tracer = std::make_unique<k3::Tracer>(0, "k3-run");
  opt.tracer = tracer.get();
  K3_ASSIGN_OR_RETURN(auto engine, Engine::Open(model, opt));
  const auto& c = engine->config();
  std::printf("%s\n", c.Summary().c_str());

  std::vector<int32_t> prompt;
  if (!prompt_text.empty()) {
    for (absl::string_view piece : absl::StrSplit(prompt_text, ' ', absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(piece, &id)) return absl::InvalidArgumentError("--prompt wants token ids separated by spaces");
      prompt.push_back(id);
    }
  } else {
    std::mt19937 rng(1);
    for (int64_t i = 0; i < prompt_len; ++i) prompt.push_back(static_cast<int32_t>(rng() % c.vocab));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");

  std::vector<SeqInput> batch;
  for (int64_t s = 0; s < seqs; ++s) {
    K3_RETURN_IF_ERROR(engine->cache().Add(s));
    batch.push_back({s, prompt, false});
  }
  const auto t0 = Clock::now();
  K3_ASSIGN_OR_RETURN(ForwardResult r, engine->Forward(batch));
  const auto t1 = Clock::now();
  std::vector<std::vector<int32_t>> out(seqs);
  std::vector<int32_t> next(seqs);
  for (int64_t s = 0; s < seqs; ++s) next[s] = Argmax(r.row(s), c.vocab);
  for (int64_t step = 0; step < gen; ++step) {
    for (int64_t s = 0; s < seqs; ++s) {
      out[s].push_back(next[s]);
      batch[s].tokens = std::span<const int32_t>(&next[s], 1);
    }
    if (step + 1 == gen) break;
    K3_ASSIGN_OR_RETURN(r, engine->Forward(batch));
    for (int64_t s = 0; s < seqs; ++s) next[s] = Argmax(r.row(s), c.vocab);
  }
  const auto t2 = Clock::now();
  if (!quiet) {
    for (int64_t s = 0; s < std::min<int64_t>(seqs, 4); ++s) {
      std::printf("seq %ld:", static_cast<long>(s));
      for (int32_t t : out[s]) std::printf(" %d", t);
      std::printf("\n");
    }
  }
  const double prefill_s = Seconds(t0, t1), decode_s = Seconds(t1, t2);
  if (tracer) {
    K3_RETURN_IF_ERROR(tracer->WriteFile(trace));
    std::printf("trace: %zu spans in %s\n", tracer->size(), trace.c_str());
  }
  std::printf("prefill: %ld x %zu tokens in %.3f s = %.1f tokens/s\n", static_cast<long>(seqs), prompt.size(),
              prefill_s, seqs * prompt.size() / prefill_s);
  if (gen > 1) {
    std::printf("decode:  %ld x %ld steps in %.3f s = %.1f tokens/s (%.1f ms/step)\n", static_cast<long>(seqs),
                static_cast<long>(gen - 1), decode_s, seqs * (gen - 1) / decode_s, 1e3 * decode_s / (gen - 1));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  k3::CliArgs args(argc, argv);
  absl::Status s = Run(args);
  if (!s.ok()) {
    std::fprintf(stderr, "k3-run: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
