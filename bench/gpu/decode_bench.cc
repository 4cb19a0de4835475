// Decode throughput of the GPU engine (k3::engine_cuda::CudaEngine) at a given context, after a
// real prefill of every sequence (token by token through the decode step, random token ids), on
// a GGUF or a synthetic preset filled in memory. Prints, per batch size, tokens/s beside the
// floor (weight bytes read per step + MLA cache bytes, over 4.4 TB/s) and the fraction reached,
// then a per-layer-kind breakdown of one eager step from CUDA events.
//
//   k3_cuda_decode_bench --preset slice --layers 4 --quant UD-IQ1_S --ctx 4096 --batches 1,2,4,8
//   k3_cuda_decode_bench --model ../shared/data/golden/k3-golden-a.gguf --ctx 256
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "worker/engine_cuda/cuda_engine.h"
#include "worker/synth/presets.h"

using namespace k3;
using engine_cuda::CudaEngine;

namespace {
constexpr double kHbm = 4.4e12;  // measured H200 read bandwidth (bytes/s)

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) v.push_back(std::stoll(x));
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  std::string model, preset = "slice", quant = "UD-IQ1_S", batches_s = "1,2,4,8";
  int64_t layers = 4, ctx = 4096, steps = 32, experts = 0, seed = 1;
  bool f16 = false, graphs = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") model = next();
    else if (a == "--preset") preset = next();
    else if (a == "--layers") layers = std::stoll(next());
    else if (a == "--experts") experts = std::stoll(next());
    else if (a == "--quant") quant = next();
    else if (a == "--seed") seed = std::stoll(next());
    else if (a == "--ctx") ctx = std::stoll(next());
    else if (a == "--steps") steps = std::stoll(next());
    else if (a == "--batches") batches_s = next();
    else if (a == "--f16") f16 = true;
    else if (a == "--no-graphs") graphs = false;
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
  }
  const std::vector<int64_t> batches = ParseList(batches_s);
  int64_t max_b = 1;
  for (int64_t b : batches) max_b = std::max(max_b, b);

  engine_cuda::CudaEngineOptions opt;
  opt.max_seqs = max_b;
  opt.max_batch = max_b;
  opt.max_context = ctx + (steps + 8) * static_cast<int64_t>(batches.size()) + 8;  // warm-up + profile steps too
  opt.cache_tokens = max_b * opt.max_context;
  opt.page_size = 64;
  opt.cache_f16 = f16;
  opt.use_graphs = graphs;
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<CudaEngine>> e;
  std::string what;
  if (!model.empty()) {
    e = CudaEngine::Open(model, opt);
    what = model;
  } else {
    auto cfg = synth::PresetConfig(preset);
    if (!cfg.ok()) { std::fprintf(stderr, "%s\n", std::string(cfg.status().message()).c_str()); return 1; }
    synth::SizeOverrides o;
    if (layers > 0) o.layers = layers;
    if (experts > 0) o.experts = experts;
    if (auto s = synth::ApplyOverrides(o, &*cfg); !s.ok()) { std::fprintf(stderr, "%s\n", std::string(s.message()).c_str()); return 1; }
    e = CudaEngine::OpenSynth(engine_cuda::SynthSource{*cfg, quant, static_cast<uint64_t>(seed)}, opt);
    what = "synthetic " + preset + " (" + std::to_string(layers) + " layers, " + quant + ", seed " + std::to_string(seed) + ")";
  }
  if (!e.ok()) { std::fprintf(stderr, "open: %s\n", std::string(e.status().message()).c_str()); return 1; }
  CudaEngine& eng = **e;
  const auto& c = eng.config();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("model: %s\n%s\nweights on device: %.3f GB (loaded in %.1f s); cache %s; graphs %s\n", what.c_str(),
              c.Summary().c_str(), eng.weight_bytes() / 1e9, load_s, f16 ? "f16" : "f32", graphs ? "on" : "off");

  // Prefill every sequence to ctx tokens (batched decode steps, random ids).
  std::mt19937 rng(seed * 7919 + 1);
  std::vector<engine::SeqId> ids(max_b);
  for (int64_t i = 0; i < max_b; ++i) {
    ids[i] = i;
    if (auto s = eng.Add(i); !s.ok()) { std::fprintf(stderr, "add: %s\n", std::string(s.message()).c_str()); return 1; }
  }
  std::vector<int32_t> toks(max_b);
  t0 = std::chrono::steady_clock::now();
  for (int64_t t = 0; t < ctx; ++t) {
    for (auto& x : toks) x = static_cast<int32_t>(rng() % c.vocab);
    if (auto s = eng.Decode(ids, toks, nullptr); !s.ok()) {
      std::fprintf(stderr, "prefill step %lld: %s\n", static_cast<long long>(t), std::string(s.message()).c_str());
      return 1;
    }
  }
  const double pre_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("prefill: %lld sequences x %lld tokens token by token in %.2f s (%.0f tok/s)\n\n",
              static_cast<long long>(max_b), static_cast<long long>(ctx), pre_s, max_b * ctx / pre_s);

  std::printf("| batch | context | step ms | tokens/s | floor ms (weights + cache) | floor tok/s | fraction |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  std::vector<engine_cuda::StepProfile> profs;
  std::vector<float> logits(static_cast<size_t>(max_b) * eng.shard().vocab_width);
  for (int64_t b : batches) {
    std::span<const engine::SeqId> sub(ids.data(), b);
    std::vector<int32_t> tk(b);
    // warm-up (captures the graph)
    for (int w = 0; w < 3; ++w) {
      for (auto& x : tk) x = static_cast<int32_t>(rng() % c.vocab);
      if (auto s = eng.Decode(sub, tk, logits.data()); !s.ok()) { std::fprintf(stderr, "%s\n", std::string(s.message()).c_str()); return 1; }
    }
    const int64_t ctx_now = eng.Length(0);
    std::vector<double> times;
    for (int64_t st = 0; st < steps; ++st) {
      for (auto& x : tk) x = static_cast<int32_t>(rng() % c.vocab);
      auto a = std::chrono::steady_clock::now();
      if (auto s = eng.Decode(sub, tk, logits.data()); !s.ok()) { std::fprintf(stderr, "%s\n", std::string(s.message()).c_str()); return 1; }
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    const double bytes = static_cast<double>(eng.step_weight_bytes(b)) +
                         static_cast<double>(eng.cache_bytes_per_token()) * b * ctx_now;
    const double floor_s = bytes / kHbm;
    std::printf("| %lld | %lld | %.3f | %.1f | %.3f (%.2f GB + %.3f GB) | %.1f | %.1f%% |\n", static_cast<long long>(b),
                static_cast<long long>(ctx_now), med * 1e3, b / med, floor_s * 1e3, eng.step_weight_bytes(b) / 1e9,
                eng.cache_bytes_per_token() * b * ctx_now / 1e9, b / floor_s, 100.0 * floor_s / med);
    for (auto& x : tk) x = static_cast<int32_t>(rng() % c.vocab);
    auto p = eng.DecodeProfiled(sub, tk);
    if (!p.ok()) { std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str()); return 1; }
    profs.push_back(*p);
  }
  std::printf("\nper layer kind, one eager step (CUDA events, ms; launch gaps included):\n");
  std::printf("| batch | embed | KDA (%lld layers) | MLA (%lld) | dense FFN | MoE | mixes+norms+adds | LM head | total |\n",
              static_cast<long long>(c.n_kda_layers()), static_cast<long long>(c.n_mla_layers()));
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < batches.size(); ++i) {
    const auto& p = profs[i];
    std::printf("| %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", static_cast<long long>(batches[i]),
                p.embed, p.kda, p.mla, p.dense, p.moe, p.mix_norm, p.head, p.total);
  }
  return 0;
}
