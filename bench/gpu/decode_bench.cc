// Decode and prefill throughput of the GPU engine (k3::engine_cuda::CudaEngine). Decode at a given
// context, after a real prefill of every sequence (the engine's chunked prefill, random token
// ids), on a GGUF or a synthetic preset filled in memory. Prints, per batch size, tokens/s beside the
// floor (weight bytes read per step + MLA cache bytes + KDA state bytes read and written, over
// 4.4 TB/s) and the fraction reached, then a per-layer-kind breakdown of one eager step from CUDA
// events, and each kind's eager time against its own floor (CudaEngine::step_bytes: its weights,
// MLA's cache rows, KDA's states, over 4.4 TB/s). --ctx takes a list: the sequences are prefilled to each context in turn and measured
// there. --prefill N1,N2 (decode skipped with --batches 0) times a fresh sequence's prefill of N
// tokens (chunks of --chunk) beside its compute floor: multiply-adds x 2 over the measured dense
// f16/bf16 tensor-core rate (790 TFLOP/s on an H200), with a per-layer-kind breakdown.
//
// Built with NCCL (K3_WITH_MPI): under mpirun every rank holds its shard of one tensor + expert
// parallel group (one GPU per rank, --expert-groups G; default 1 = every expert split into
// FFN bands, falling back to one group per rank when the bands would break quant blocks); rank
// 0 times and prints. The floor is then one rank's bytes (the ranks read in parallel).
//
//   k3_cuda_decode_bench --preset slice --layers 4 --quant UD-IQ1_S --ctx 4096 --batches 1,2,4,8
//   mpirun -np 2 k3_cuda_decode_bench --preset slice --layers 8 --ctx 4096,16384 --batches 1
//   k3_cuda_decode_bench --model ../shared/data/golden/k3-golden-a.gguf --ctx 256
//   k3_cuda_decode_bench --preset slice --layers 8 --batches 0 --prefill 4096,8192 --chunk 2048
//   ncu --profile-from-start off --clock-control none --print-summary per-kernel (then:)
//       k3_cuda_decode_bench --preset slice --layers 4 --batches 1 --steps 4 --ncu-step
//       k3_cuda_decode_bench --preset slice --layers 4 --batches 0 --prefill 4096 --chunk 4096 --ncu-prefill
// --exact-mla-decode: decode steps' MLA attention on the exact f32 kernel (the default, --tc-mla-decode:
// tensor cores, CudaEngineOptions::tc_mla_decode);
// --mma-mla: that tensor-core MLA attention on the mma.sync kernel (CudaEngineOptions::wgmma_mla off;
// --wgmma-mla: on, the default where the build and widths allow);
// --int8-experts: the routed experts' decode GEMVs on int8 inputs (CudaEngineOptions::int8_expert_x);
// --ternary-experts: with --int8-experts, the experts held in their ternary form instead of the ggml
// rows (made at load), read by those GEMVs and by the grouped GEMMs (CudaEngineOptions::ternary_experts);
// --chunked-kda: prefill runs' KDA recurrence in chunks of 16 tokens on tensor cores
// (CudaEngineOptions::chunked_kda; --token-kda: token by token); --pipelined-kda: that chunked
// kernel software-pipelined (CudaEngineOptions::pipelined_kda; --unpipelined-kda: off);
// --split-kda-chains: its 3xTF32 products in three accumulators each (CudaEngineOptions::split_kda_chains);
// --fused-residual: decode steps' residual steps (add, mix, norm) in one launch each
// (CudaEngineOptions::fused_residual; the default launches them separately);
// --fused-prefill-residual / --unfused-prefill-residual: prefill chunks' residual steps in one
// launch each or separately (CudaEngineOptions::fused_prefill_residual on / off);
// --tf32x3-router / --cublas-router: prefill chunks' MoE router in 3xTF32 on the tensor cores or
// on cuBLAS's exact f32 GEMM (CudaEngineOptions::tf32x3_router on / off);
// --one-stream: decode steps on one stream (CudaEngineOptions::side_streams off);
// --l2-prefetch MB: decode steps prefetch up to MB MiB of the next products' weights into L2
// (CudaEngineOptions::l2_prefetch_mb; 0: off; default: the engine's);
// --unfused-gate-up: with --int8-experts, the experts' gate, up and activation as three launches
// (CudaEngineOptions::fused_gate_up off);
// --per-pair-experts: with --int8-experts, a GEMV per (token, expert) pair instead of the
// expert-grouped GEMV (CudaEngineOptions::grouped_expert_gemv off; --grouped-experts: on, the default);
// --moe-gemv-max-rows N: steps of up to N rows run the routed experts as GEMVs (per pair, or
// grouped), larger ones on the grouped tile GEMMs (CudaEngineOptions::moe_gemv_max_rows);
// --mla-head-gemv-max-rows N: steps past --mma-max-rows rows run the MLA per-head products as one
// stacked GEMV over all heads up to N rows, as one GEMM per head past it
// (CudaEngineOptions::mla_head_gemv_max_rows);
// --mma-max-rows N: decode steps of up to N (32..256) rows run their Q8_0 products on the
// tensor-core GEMV, larger ones on cuBLAS / the tile GEMM (CudaEngineOptions::mma_max_rows);
// --mma-unstaged-x: the tensor-core GEMV's blocks round their f32 x themselves, not from the f16
// scratch rounded once per product (CudaEngineOptions::mma_staged_x off; --mma-staged-x: on, the default);
// --mma-per-warp-x: the tensor-core GEMV's first form, x read per warp, passes of 16 rows
// (CudaEngineOptions::mma_shared_x off; --mma-shared-x: on, the default);
// --no-residual-epilogue: output products write a delta that AddInto launches add to the residual
// stream (CudaEngineOptions::residual_epilogue off);
// --dense-gemv-max-rows N: non-expert products of steps of more rows on the tensor-core GEMM
// (CudaEngineOptions::dense_gemv_max_rows, 1..16);
// --blas-min-rows N: products of steps of at least N rows (prefill chunks, large decode batches)
// on cuBLAS (CudaEngineOptions::blas_min_rows; 0: never);
// --f16-weights-mb N: those cuBLAS products on resident f16 copies of their weights, up to N MiB
// (CudaEngineOptions::prefill_f16_weights_mb; 0: decoded per call);
// --mla-mha-min-rows N: prefill chunks of at least N rows run MLA attention decompressed
// (CudaEngineOptions::mla_mha_min_rows; 0: the absorbed form at every size);
// --f16 | --f32-cache: the MLA cache in f16 (the default) or f32 (the default with --exact-mla-decode,
// as k3-worker does).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_profiler_api.h>

#include "worker/engine_cuda/cuda_engine.h"
#include "worker/model/shard_rules.h"
#include "worker/synth/presets.h"
#ifdef K3_BENCH_NCCL
#include <mpi.h>

#include "collectives/nccl_communicator.h"
#endif

using namespace k3;
using engine_cuda::CudaEngine;

namespace {
constexpr double kHbm = 4.4e12;  // measured H200 read bandwidth (bytes/s)
constexpr double kTensorRate = 790e12;  // measured dense f16/bf16 tensor-core rate of an H200 (FLOP/s)

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) v.push_back(std::stoll(x));
  return v;
}
}  // namespace

int Main(int argc, char** argv, int rank, int ranks);

int main(int argc, char** argv) {
  int rank = 0, ranks = 1;
#ifdef K3_BENCH_NCCL
  const char* ws = std::getenv("OMPI_COMM_WORLD_SIZE");
  const bool mpi = ws != nullptr && std::atoi(ws) > 1;
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  }
  const int rc = Main(argc, argv, rank, ranks);
  if (mpi) {
    if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
  }
  return rc;
#else
  return Main(argc, argv, rank, ranks);
#endif
}

int Main(int argc, char** argv, int rank, int ranks) {
  std::string model, preset = "slice", quant = "UD-IQ1_S", batches_s = "1,2,4,8", ctx_s = "4096", prefill_s;
  int64_t layers = 4, steps = 32, experts = 0, seed = 1, expert_groups = 0, chunk = 2048, dense_gemv_rows = 0;
  int64_t mla_mha_min_rows = -1;  // -1: the engine's default
  int64_t blas_min_rows = -1;     // -1: the engine's default
  int64_t f16_weights_mb = -1;    // -1: the engine's default
  int64_t moe_gemv_max_rows = -1;  // -1: the engine's default
  int64_t mla_head_gemv_max_rows = -1;  // -1: the engine's default
  int64_t mma_max_rows = -1;  // -1: the engine's default
  int64_t l2_prefetch_mb = -1;  // -1: the engine's default
  int cache_f16 = -1;  // -1: f16 (the engine's default), f32 with --exact-mla-decode (as k3-worker)
  bool graphs = true, ncu_step = false, ncu_prefill = false, tc_mla = true, int8_experts = false,
       ternary_experts = false;
  bool fused_residual = false, side_streams = true, fused_gate_up = true, residual_epilogue = true;
  const k3::engine_cuda::CudaEngineOptions defaults;
  bool grouped_expert_gemv = defaults.grouped_expert_gemv, mma_shared_x = defaults.mma_shared_x;
  bool chunked_kda = defaults.chunked_kda, fused_prefill_residual = defaults.fused_prefill_residual;
  bool tf32x3_router = defaults.tf32x3_router, pipelined_kda = defaults.pipelined_kda;
  bool split_kda_chains = defaults.split_kda_chains;
  bool mma_staged_x = defaults.mma_staged_x, wgmma_mla = defaults.wgmma_mla;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") model = next();
    else if (a == "--preset") preset = next();
    else if (a == "--layers") layers = std::stoll(next());
    else if (a == "--experts") experts = std::stoll(next());
    else if (a == "--quant") quant = next();
    else if (a == "--seed") seed = std::stoll(next());
    else if (a == "--ctx") ctx_s = next();
    else if (a == "--expert-groups") expert_groups = std::stoll(next());
    else if (a == "--steps") steps = std::stoll(next());
    else if (a == "--batches") batches_s = next();
    else if (a == "--prefill") prefill_s = next();
    else if (a == "--chunk") chunk = std::stoll(next());
    else if (a == "--f16") cache_f16 = 1;  // the MLA cache in f16 (the engine's default)
    else if (a == "--f32-cache") cache_f16 = 0;  // the MLA cache in f32 (CudaEngineOptions::cache_f16 off)
    else if (a == "--tc-mla-decode") tc_mla = true;  // decode MLA attention on tensor cores (the default)
    else if (a == "--exact-mla-decode") tc_mla = false;  // decode MLA attention on the exact f32 kernel
    else if (a == "--wgmma-mla") wgmma_mla = true;  // (the default now)
    else if (a == "--mma-mla") wgmma_mla = false;  // CudaEngineOptions::wgmma_mla off
    else if (a == "--int8-experts") int8_experts = true;  // expert GEMVs on int8 inputs (CudaEngineOptions)
    else if (a == "--ternary-experts") ternary_experts = true;  // CudaEngineOptions::ternary_experts
    else if (a == "--chunked-kda") chunked_kda = true;  // CudaEngineOptions::chunked_kda
    else if (a == "--token-kda") chunked_kda = false;  // CudaEngineOptions::chunked_kda off
    else if (a == "--pipelined-kda") pipelined_kda = true;  // CudaEngineOptions::pipelined_kda
    else if (a == "--unpipelined-kda") pipelined_kda = false;
    else if (a == "--split-kda-chains") split_kda_chains = true;  // CudaEngineOptions::split_kda_chains
    else if (a == "--fused-residual") fused_residual = true;  // CudaEngineOptions::fused_residual
    else if (a == "--unfused-prefill-residual") fused_prefill_residual = false;
    else if (a == "--fused-prefill-residual") fused_prefill_residual = true;
    else if (a == "--tf32x3-router") tf32x3_router = true;
    else if (a == "--cublas-router") tf32x3_router = false;
    else if (a == "--one-stream") side_streams = false;  // CudaEngineOptions::side_streams off
    else if (a == "--unfused-gate-up") fused_gate_up = false;  // CudaEngineOptions::fused_gate_up off
    else if (a == "--grouped-experts") grouped_expert_gemv = true;  // (the default now)
    else if (a == "--mma-shared-x") mma_shared_x = true;  // (the default now)
    else if (a == "--per-pair-experts") grouped_expert_gemv = false;  // CudaEngineOptions::grouped_expert_gemv off
    else if (a == "--mma-staged-x") mma_staged_x = true;  // (the default now)
    else if (a == "--mma-unstaged-x") mma_staged_x = false;  // CudaEngineOptions::mma_staged_x off
    else if (a == "--mma-per-warp-x") mma_shared_x = false;  // CudaEngineOptions::mma_shared_x off
    else if (a == "--no-residual-epilogue") residual_epilogue = false;  // CudaEngineOptions::residual_epilogue off
    else if (a == "--l2-prefetch") l2_prefetch_mb = std::stoll(next());  // CudaEngineOptions::l2_prefetch_mb
    else if (a == "--dense-gemv-max-rows") dense_gemv_rows = std::stoll(next());  // CudaEngineOptions, 1..16
    else if (a == "--moe-gemv-max-rows") moe_gemv_max_rows = std::stoll(next());  // CudaEngineOptions
    else if (a == "--mla-head-gemv-max-rows") mla_head_gemv_max_rows = std::stoll(next());  // CudaEngineOptions
    else if (a == "--mma-max-rows") mma_max_rows = std::stoll(next());  // CudaEngineOptions
    else if (a == "--blas-min-rows") blas_min_rows = std::stoll(next());  // CudaEngineOptions, 0: never
    else if (a == "--f16-weights-mb") f16_weights_mb = std::stoll(next());  // CudaEngineOptions::prefill_f16_weights_mb
    else if (a == "--mla-mha-min-rows")
      mla_mha_min_rows = std::stoll(next());  // CudaEngineOptions, 0: never
    else if (a == "--no-graphs") graphs = false;
    else if (a == "--ncu-step") ncu_step = true;  // one eager step between cudaProfilerStart/Stop
    else if (a == "--ncu-prefill")
      ncu_prefill = true;  // the timed prefill run between them
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
  }
  std::vector<int64_t> batches = ParseList(batches_s);
  batches.erase(std::remove(batches.begin(), batches.end(), 0), batches.end());
  std::vector<int64_t> ctxs = ParseList(ctx_s);
  std::sort(ctxs.begin(), ctxs.end());
  if (batches.empty()) ctxs.clear();
  const std::vector<int64_t> prefills = prefill_s.empty() ? std::vector<int64_t>{} : ParseList(prefill_s);
  int64_t max_b = 1, max_prefill = 0;
  for (int64_t b : batches) max_b = std::max(max_b, b);
  for (int64_t n : prefills) max_prefill = std::max(max_prefill, n);
  const bool lead = rank == 0;

  engine_cuda::CudaEngineOptions opt;
  opt.max_seqs = max_b;
  opt.max_batch = max_b;
  // warm-up + measured + profile steps at every context too
  opt.max_context = std::max<int64_t>(ctxs.empty() ? 0 : ctxs.back() + (steps + 8) * static_cast<int64_t>(batches.size() * ctxs.size()) + 8,
                                     max_prefill + 8);
  // Whole pages per sequence: a sequence of max_context tokens holds ceil(max_context / page) pages.
  constexpr int64_t kPage = 64;
  const int64_t seq_tokens = (opt.max_context + kPage - 1) / kPage * kPage;
  opt.cache_tokens = max_b * seq_tokens + (max_prefill > 0 ? seq_tokens : 0);
  opt.max_seqs = max_b + (max_prefill > 0 ? 1 : 0);
  opt.prefill_chunk = chunk;
  if (blas_min_rows >= 0) opt.blas_min_rows = blas_min_rows;
  if (f16_weights_mb >= 0) opt.prefill_f16_weights_mb = f16_weights_mb;
  if (moe_gemv_max_rows >= 0) opt.moe_gemv_max_rows = moe_gemv_max_rows;
  if (mla_head_gemv_max_rows >= 0) opt.mla_head_gemv_max_rows = mla_head_gemv_max_rows;
  if (mma_max_rows >= 0) opt.mma_max_rows = mma_max_rows;
  opt.page_size = kPage;
  const bool f16 = cache_f16 < 0 ? tc_mla : cache_f16 == 1;
  opt.cache_f16 = f16;
  opt.tc_mla_decode = tc_mla;
  opt.wgmma_mla = wgmma_mla;
  opt.int8_expert_x = int8_experts;
  opt.ternary_experts = ternary_experts;
  opt.fused_residual = fused_residual;
  opt.fused_prefill_residual = fused_prefill_residual;
  opt.tf32x3_router = tf32x3_router;
  opt.chunked_kda = chunked_kda;
  opt.pipelined_kda = pipelined_kda;
  opt.split_kda_chains = split_kda_chains;
  opt.side_streams = side_streams;
  opt.fused_gate_up = fused_gate_up;
  opt.grouped_expert_gemv = grouped_expert_gemv;
  opt.mma_shared_x = mma_shared_x;
  opt.mma_staged_x = mma_staged_x;
  opt.residual_epilogue = residual_epilogue;
  if (l2_prefetch_mb >= 0) opt.l2_prefetch_mb = l2_prefetch_mb;
  if (dense_gemv_rows > 0) opt.dense_gemv_max_rows = dense_gemv_rows;
  if (mla_mha_min_rows >= 0) opt.mla_mha_min_rows = mla_mha_min_rows;
  opt.use_graphs = graphs;
  opt.verbose = lead;
#ifdef K3_BENCH_NCCL
  std::unique_ptr<coll::Communicator> nccl;
  cudaStream_t stream = nullptr;
  if (ranks > 1) {
    int n_dev = 0;
    cudaGetDeviceCount(&n_dev);
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    opt.device = (local != nullptr ? std::atoi(local) : rank) % std::max(n_dev, 1);
    cudaSetDevice(opt.device);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    auto c = coll::MakeNcclCommunicator(MPI_COMM_WORLD, {stream});
    if (!c.ok()) { std::fprintf(stderr, "rank %d: %s\n", rank, std::string(c.status().message()).c_str()); return 1; }
    nccl = std::move(*c);
    opt.comm = nccl.get();
    opt.stream = stream;
  }
#endif
  opt.rank = rank;
  opt.plan = {ranks, 1};
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<CudaEngine>> e;
  std::string what;
  auto pick_groups = [&](const model::K3Config& c) {
    opt.plan.expert_groups = static_cast<int>(expert_groups > 0 ? expert_groups : 1);
    if (!model::CheckPlan(c, opt.plan).ok()) opt.plan.expert_groups = ranks;
  };
  if (!model.empty()) {
    // The groups need the config first: the engine parses it again.
    if (ranks > 1) {
      opt.plan.expert_groups = static_cast<int>(expert_groups > 0 ? expert_groups : ranks);
    }
    e = CudaEngine::Open(model, opt);
    what = model;
  } else {
    auto cfg = synth::PresetConfig(preset);
    if (!cfg.ok()) { std::fprintf(stderr, "%s\n", std::string(cfg.status().message()).c_str()); return 1; }
    synth::SizeOverrides o;
    if (layers > 0) o.layers = layers;
    if (experts > 0) o.experts = experts;
    if (auto s = synth::ApplyOverrides(o, &*cfg); !s.ok()) { std::fprintf(stderr, "%s\n", std::string(s.message()).c_str()); return 1; }
    pick_groups(*cfg);
    e = CudaEngine::OpenSynth(engine_cuda::SynthSource{*cfg, quant, static_cast<uint64_t>(seed)}, opt);
    what = "synthetic " + preset + " (" + std::to_string(layers) + " layers, " + quant + ", seed " + std::to_string(seed) + ")";
  }
  if (!e.ok()) { std::fprintf(stderr, "rank %d: open: %s\n", rank, std::string(e.status().message()).c_str()); return 1; }
  CudaEngine& eng = **e;
  const auto& c = eng.config();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (lead) {
    const std::string kda_form = !chunked_kda ? std::string("token by token")
                                              : std::string("chunked (tensor cores") + (pipelined_kda ? ", pipelined" : "") +
                                                    (split_kda_chains ? ", split chains" : "") + ")";
    std::printf(
        "model: %s\n%s\nweights on device (rank 0): %.3f GB (loaded in %.1f s); cache %s; graphs %s; "
        "decode MLA %s; expert inputs %s%s (gate|up %s, %s up to %lld rows); residual steps %s (prefill %s); L2 prefetch %lld MiB; dense products on the GEMV up to %lld rows (then tensor cores, %s x); prefill chunk of %lld "
        "rows: MLA %s, KDA %s, router %s; resident f16 weights %.2f GB (%lld matrices; up to %lld MiB)\n",
        what.c_str(), c.Summary().c_str(), eng.weight_bytes() / 1e9, load_s, f16 ? "f16" : "f32", graphs ? "on" : "off",
        tc_mla ? (eng.MlaOnWgmma() ? "tensor cores (wgmma)" : "tensor cores (mma.sync)") : "exact", int8_experts ? "int8" : "f32",
        int8_experts && ternary_experts ? ", ternary expert rows" : "", fused_gate_up ? "fused" : "unfused",
        grouped_expert_gemv ? "expert-grouped GEMV" : "per-pair GEMV", static_cast<long long>(eng.MoeGemvMaxRows()),
        fused_residual ? "fused" : "unfused", fused_prefill_residual ? "fused" : "unfused",
        static_cast<long long>(opt.l2_prefetch_mb),
        static_cast<long long>(opt.dense_gemv_max_rows), mma_shared_x ? "shared" : "per-warp",
        static_cast<long long>(chunk),
        eng.MlaDecompressed(chunk) ? "decompressed" : "absorbed",
        kda_form.c_str(), tf32x3_router ? "3xTF32" : "cuBLAS f32",
        eng.half_weight_bytes() / 1e9, static_cast<long long>(eng.half_weight_matrices()),
        static_cast<long long>(opt.prefill_f16_weights_mb));
    std::printf("ranks: %d (one GPU each), expert groups %d x %d FFN bands; all-reduces per step %lld\n", ranks,
                opt.plan.expert_groups, opt.plan.expert_bands(), static_cast<long long>(eng.CollectivesPerStep()));
    std::fflush(stdout);
  }

  std::mt19937 rng(seed * 7919 + 1);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % c.vocab);
    return t;
  };
  // Prefill of a fresh sequence per length: wall time (host, synchronized per chunk), floor, and a
  // second, profiled run's breakdown.
  if (!prefills.empty() && lead) {
    std::printf("\n| ranks | prompt | chunk | time ms | tokens/s | floor ms (TFLOP) | fraction of floor |\n|---|---|---|---|---|---|---|\n");
  }
  std::vector<std::pair<int64_t, engine_cuda::StepProfile>> prefill_profs;
  const engine::SeqId pre_id = 1 << 20;
  for (int64_t n : prefills) {
    const auto toks_n = random_tokens(n);
    for (int rep = 0; rep < 3; ++rep) {  // 0: warm-up, 1: timed, 2: profiled
      if (auto s = eng.Add(pre_id); !s.ok()) { std::fprintf(stderr, "add: %s\n", std::string(s.message()).c_str()); return 1; }
      engine_cuda::StepProfile prof;
      const auto a = std::chrono::steady_clock::now();
      if (ncu_prefill && rep == 1) cudaProfilerStart();
      auto s = eng.Prefill(pre_id, toks_n, false, nullptr, rep == 2 ? &prof : nullptr);
      if (ncu_prefill && rep == 1) cudaProfilerStop();
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      if (!s.ok()) { std::fprintf(stderr, "prefill %lld: %s\n", static_cast<long long>(n), std::string(s.message()).c_str()); return 1; }
      (void)eng.Free(pre_id);
      if (rep == 2) prefill_profs.push_back({n, prof});
      if (rep != 1 || !lead) continue;
      const double macs = static_cast<double>(eng.linear_macs_per_token()) * n +
                          static_cast<double>(eng.attention_macs_per_row(std::min(chunk, n))) * n * (n + 1) / 2.0;
      const double floor_s = 2.0 * macs / kTensorRate;
      std::printf("| %d | %lld | %lld | %.1f | %.0f | %.1f (%.1f) | %.1f%% |\n", ranks, static_cast<long long>(n),
                  static_cast<long long>(std::min(chunk, n)), sec * 1e3, n / sec, floor_s * 1e3, 2.0 * macs / 1e12,
                  100.0 * floor_s / sec);
      std::fflush(stdout);
    }
  }
  if (!prefill_profs.empty() && lead) {
    std::printf("\nprefill per layer kind (CUDA events, ms, summed over chunks; rank 0):\n");
    std::printf("| prompt | embed | KDA | MLA | dense FFN | MoE | mixes+norms+adds | all-reduces | LM head | total |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& [n, p] : prefill_profs) {
      std::printf("| %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", static_cast<long long>(n),
                  p.embed, p.kda, p.mla, p.dense, p.moe, p.mix_norm, p.comm, p.head, p.total);
    }
    std::fflush(stdout);
  }
  if (batches.empty()) return 0;

  // Prefill every sequence to each context in turn (the chunked prefill, random ids), then
  // measure every batch size there.
  std::vector<engine::SeqId> ids(max_b);
  for (int64_t i = 0; i < max_b; ++i) {
    ids[i] = i;
    if (auto s = eng.Add(i); !s.ok()) { std::fprintf(stderr, "add: %s\n", std::string(s.message()).c_str()); return 1; }
  }
  std::vector<engine_cuda::StepProfile> profs;
  std::vector<engine_cuda::StepBytes> prof_bytes;  // each profiled step's bytes by kind (its floors)
  std::vector<std::pair<int64_t, int64_t>> prof_keys;  // (batch, context)
  std::vector<float> logits(static_cast<size_t>(max_b) * eng.shard().vocab_width);
  for (int64_t ctx : ctxs) {
    const int64_t from = eng.Length(0);
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < max_b && ctx > eng.Length(i); ++i) {
      if (auto s = eng.Prefill(ids[i], random_tokens(ctx - eng.Length(i)), false, nullptr); !s.ok()) {
        std::fprintf(stderr, "prefill of sequence %lld: %s\n", static_cast<long long>(i), std::string(s.message()).c_str());
        return 1;
      }
    }
    const double pre_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (lead) {
      std::printf("\nprefill: %lld sequences from %lld to %lld tokens (chunked prefill) in %.2f s (%.0f tok/s)\n\n",
                  static_cast<long long>(max_b), static_cast<long long>(from), static_cast<long long>(ctx), pre_s,
                  max_b * (ctx - from) / std::max(pre_s, 1e-9));
      std::printf("| ranks | batch | context | step ms | tokens/s | floor ms (weights + MLA cache + KDA state) | floor tok/s | fraction |\n");
      std::printf("|---|---|---|---|---|---|---|---|\n");
      std::fflush(stdout);
    }
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
      const engine_cuda::StepBytes sb = eng.step_bytes(b, ctx_now);
      const double floor_s = static_cast<double>(sb.weights() + sb.state()) / kHbm;
      if (lead) {
        std::printf("| %d | %lld | %lld | %.3f | %.1f | %.3f (%.2f GB + %.3f GB + %.3f GB) | %.1f | %.1f%% |\n", ranks,
                    static_cast<long long>(b), static_cast<long long>(ctx_now), med * 1e3, b / med, floor_s * 1e3,
                    sb.weights() / 1e9, sb.mla_cache / 1e9, sb.kda_state / 1e9, b / floor_s, 100.0 * floor_s / med);
        std::fflush(stdout);
      }
      for (auto& x : tk) x = static_cast<int32_t>(rng() % c.vocab);
      // For `ncu --profile-from-start off`: exactly one decode step's kernels (eager).
      if (ncu_step) cudaProfilerStart();
      auto p = eng.DecodeProfiled(sub, tk);
      if (ncu_step) cudaProfilerStop();
      if (!p.ok()) { std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str()); return 1; }
      profs.push_back(*p);
      prof_keys.push_back({b, ctx_now});
      prof_bytes.push_back(sb);
    }
  }
  if (!lead) return 0;
  std::printf("\nper layer kind, one eager step (CUDA events, ms; launch gaps included; rank 0):\n");
  std::printf("| batch | context | embed | KDA (%lld layers) | MLA (%lld) | dense FFN | MoE | mixes+norms+adds | all-reduces | LM head | total |\n",
              static_cast<long long>(c.n_kda_layers()), static_cast<long long>(c.n_mla_layers()));
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < profs.size(); ++i) {
    const auto& p = profs[i];
    std::printf("| %lld | %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
                static_cast<long long>(prof_keys[i].first), static_cast<long long>(prof_keys[i].second), p.embed, p.kda,
                p.mla, p.dense, p.moe, p.mix_norm, p.comm, p.head, p.total);
  }
  // The per-layer-kind bar: each kind's eager time against its own floor (its bytes over
  // kHbm; the MLA cache rows in MLA's). Eager times include launch gaps a graph step overlaps.
  std::printf("\nper layer kind against its floor (eager ms / floor ms = ratio; floor = bytes / %.1f TB/s):\n", kHbm / 1e12);
  std::printf("| batch | context | KDA (weights + state) | MLA (weights + cache) | dense FFN | MoE | LM head |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < profs.size(); ++i) {
    const auto& p = profs[i];
    const auto& sb = prof_bytes[i];
    auto cell = [](double ms, uint64_t bytes) {
      char buf[64];
      const double fl = static_cast<double>(bytes) / kHbm * 1e3;
      std::snprintf(buf, sizeof(buf), "%.3f / %.3f = %.2fx", ms, fl, fl > 0 ? ms / fl : 0.0);
      return std::string(buf);
    };
    std::printf("| %lld | %lld | %s | %s | %s | %s | %s |\n", static_cast<long long>(prof_keys[i].first),
                static_cast<long long>(prof_keys[i].second), cell(p.kda, sb.kda + sb.kda_state).c_str(),
                cell(p.mla, sb.mla_weights + sb.mla_cache).c_str(), cell(p.dense, sb.dense).c_str(),
                cell(p.moe, sb.moe).c_str(), cell(p.head, sb.head).c_str());
  }
  return 0;
}
