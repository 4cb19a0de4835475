// k3-worker: one rank of a worker group, started by mpirun (one process per GPU, or per CPU
// socket for the CPU backend). Rank 0 leads. Without a coordinator (--prompt) the leader runs
// a greedy generation itself, which is how the group is smoke-tested and benchmarked.
//
//   mpirun -np 2 k3-worker --model m.gguf --prompt "1 2 3" --gen 16
//       [--prompt-file F]               the prompt's ids from a file (whitespace-separated), for
//                                       prompts too long for one command-line argument (32k ids)
//   mpirun -np 2 k3-worker --model m.gguf --serve 127.0.0.1:50061   (for the coordinator)
//       [--auth-token-file F]           only callers sending 'authorization: Bearer <token>' (the
//                                       coordinator's --worker-token-file) may run steps
//       [--tls-cert c.pem --tls-key k.pem]   TLS (the coordinator's --worker-tls-ca trusts it)
//       [--coordinator-timeout S]       no call from a coordinator for S seconds (it died, or never
//                                       came): the group shuts down cleanly, exit status 0;
//                                       0 (the default) waits for one forever
//       [--step-port P]                 also serve steps on the --serve host's port P over the step
//                                       channel (worker/common/step_channel_protocol.h: plain TCP
//                                       frames, bearer token in the hello; not with --tls-cert); the
//                                       coordinator uses it when GetInfo advertises it
//   mpirun -np 2 k3-worker --backend cuda --model m.gguf --prompt "1 2 3"   (one GPU per rank;
//       built with K3_WITH_CUDA: CudaEngine in the same step protocol, NCCL inside the engine)
//   mpirun -np 8 k3-worker --backend cuda --synth full [--synth-seed 1] [--synth-quant UD-IQ1_S]
//       [--synth-layers N] --serve ...   (no file: every rank fills its shard of the synthetic
//       preset on its GPU from the seed; the coordinator reads `k3-synth --preset full --header-only`)
//       [--prefill-chunk N]             cuda: prompt tokens per prefill forward (default 512); a
//                                       coordinator's --prefill-chunk below it makes smaller forwards
//       [--int8-experts]                cuda: decode steps' routed-expert GEMVs on int8 inputs
//                                       (CudaEngineOptions::int8_expert_x; not exact, held to llama.cpp's
//                                       closeness on the golden model)
//       [--ternary-experts]             cuda, with --int8-experts: the routed experts held in their
//                                       ternary form instead of the ggml rows (1.44x their bytes; the
//                                       same logits; CudaEngineOptions::ternary_experts)
//       [--token-kda]                   cuda: prefill's KDA recurrence token by token instead of in
//                                       chunks of 16 tokens on tensor cores (3xTF32, ~f32;
//                                       CudaEngineOptions::chunked_kda off; --chunked-kda, the
//                                       default, is still accepted)
//       [--f16-weights-mb N]            cuda: MiB of resident f16 copies of the dense weights for the
//                                       products of prefill chunks and large batches (default 16384;
//                                       0: decoded per call, for the memory; CudaEngineOptions::
//                                       prefill_f16_weights_mb)
//       [--exact-mla-decode]            cuda: decode steps' MLA attention on the exact f32 kernel
//                                       instead of tensor cores, over an f32 cache
//                                       (CudaEngineOptions::tc_mla_decode and cache_f16 off;
//                                       --tc-mla-decode, the default, is still accepted)
//   SPDLOG_LEVEL=debug (mpirun -x): the leader logs each step's time beside its handler's own
#include <algorithm>
#include <csignal>
#include <chrono>
#include <cstdio>

#include <mpi.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectives/mpi_communicator.h"
#include "spdlog/cfg/env.h"
#include "spdlog/spdlog.h"
#include "worker/common/cli_args.h"
#include "worker/common/small_file.h"
#include "worker/common/status_macros.h"
#include "worker/engine/engine.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/plan_report.h"
#include "worker/runtime/worker_group.h"
#ifdef K3_HAVE_CUDA_BACKEND
#include <cuda_runtime.h>

#include "collectives/nccl_communicator.h"
#include "worker/engine_cuda/cuda_engine.h"
#include "worker/engine_cuda/cuda_rank_engine.h"
#include "worker/synth/presets.h"
#endif
#ifdef K3_HAVE_GRPC
#include <grpcpp/grpcpp.h>

#include "worker/common/grpc_security.h"
#include "worker/runtime/leader_service.h"
#include "worker/runtime/step_channel.h"
#endif

namespace {

using k3::runtime::Step;

// What the leader tells the coordinator about its group (either backend).
struct GroupInfo {
  std::string plan;
  int ranks = 1;
  int64_t max_seqs = 0, page_size = 0, cache_tokens = 0;
};

// --serve and how the leader serves.
struct ServeOptions {
  std::string address;                           // empty: no --serve
  std::string token;                             // empty: no authentication
  std::string tls_cert, tls_key;                 // empty: plaintext
  int step_port = 0;                             // the step channel's port on the --serve host; 0: none
  std::chrono::seconds coordinator_timeout{0};   // 0: wait for a coordinator forever
};

// The leader as a gRPC server for the coordinator, until SIGINT/SIGTERM, a group failure or
// (with a coordinator timeout) no coordinator for that long.
absl::Status Serve(const ServeOptions& opt, k3::runtime::WorkerGroup& group, k3::runtime::RankEngine& engine,
                   const k3::model::K3Config& c, const GroupInfo& g) {
#ifdef K3_HAVE_GRPC
  const std::string& address = opt.address;
  k3::runtime::LeaderInfo info;
  info.model_name = c.name;
  info.model_summary = c.Summary();
  info.plan = g.plan;
  info.ranks = static_cast<uint32_t>(g.ranks);
  info.max_seqs = static_cast<uint32_t>(g.max_seqs);
  info.page_size = static_cast<uint32_t>(g.page_size);
  info.cache_tokens = static_cast<uint64_t>(g.cache_tokens);
  info.vocab = static_cast<uint32_t>(c.vocab);
  info.context_length = static_cast<uint32_t>(c.context_length);
  info.step_port = static_cast<uint32_t>(opt.step_port);
  K3_ASSIGN_OR_RETURN(auto credentials, k3::security::ServerCredentials(opt.tls_cert, opt.tls_key));
  k3::runtime::LeaderService service(group, engine, info, k3::security::BearerAuth(opt.token));
  k3::runtime::StepChannelServer channel(service, k3::security::BearerAuth(opt.token));
  if (opt.step_port > 0) {
    const std::string host = address.substr(0, address.rfind(':'));
    K3_RETURN_IF_ERROR(channel.Start(host, opt.step_port));
    spdlog::info("step channel on {}:{} (plaintext frames; {})", host, opt.step_port,
                 opt.token.empty() ? "no authentication" : "bearer token required");
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, credentials, &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return absl::UnavailableError("cannot listen on " + address);
  spdlog::info("worker group leader serving on {} (port {}): {}, {}", address, port,
               opt.tls_cert.empty() ? "plaintext" : "TLS", opt.token.empty() ? "no authentication" : "bearer token required");
  std::printf("LEADER READY %s\n", address.c_str());
  std::fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  timespec tick{0, 100 * 1000 * 1000};
  while (!service.broken()) {
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      spdlog::info("signal {}: shutting the worker group down", sig);
      break;
    }
    // A live coordinator health-checks every second even when idle: silence this long means it
    // is gone, and the group would only hold its memory (and GPUs) for nobody.
    if (opt.coordinator_timeout.count() > 0 && service.idle() >= opt.coordinator_timeout) {
      spdlog::warn("no call from a coordinator for {} s (--coordinator-timeout): shutting the worker group down",
                   opt.coordinator_timeout.count());
      break;
    }
  }
  channel.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (service.broken()) return absl::UnavailableError("the worker group failed (see the log above)");
  return service.Shutdown();
#else
  return absl::UnimplementedError("this k3-worker was built without gRPC (K3_WITH_GRPC=OFF): --serve is unavailable");
#endif
}

// Leader without a coordinator: greedy generation of one prompt (either backend's group).

absl::Status Generate(k3::runtime::WorkerGroup& group, const std::string& prompt, int64_t gen) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(prompt, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) return absl::InvalidArgumentError("--prompt wants token ids");
    ids.push_back(id);
  }
  if (ids.empty()) ids = {1};
  Step step;
  step.id = 1;
  step.add = {0};
  step.entries = {{0, ids, 1, false, false}};
  std::vector<int32_t> out;
  // Each decode step's time too: its median is not moved by the few steps that capture a CUDA
  // graph (a new batch size or MLA context bucket), which the mean over a short run is.
  std::vector<double> step_ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto t1 = t0, last = t0;
  for (int64_t i = 0; i < gen; ++i) {
    K3_ASSIGN_OR_RETURN(auto result, group.LeaderStep(step));
    const int32_t next = result.rows[0][0].top[0].token;
    out.push_back(next);
    const auto now = std::chrono::steady_clock::now();
    if (i == 0) t1 = now;
    if (i > 0) step_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
    step = Step{};
    step.id = i + 2;
    step.entries = {{0, {next}, 1, false, false}};
  }
  const auto t2 = std::chrono::steady_clock::now();
  step = Step{};
  step.id = gen + 2;
  step.free = {0};
  step.shutdown = true;
  K3_RETURN_IF_ERROR(group.LeaderStep(step).status());
  std::printf("generated:");
  for (int32_t t : out) std::printf(" %d", t);
  const double pre = std::chrono::duration<double>(t1 - t0).count();
  const double dec = std::chrono::duration<double>(t2 - t1).count();
  std::sort(step_ms.begin(), step_ms.end());
  std::printf("\nprefill %zu tokens: %.3f s (%.1f tokens/s); decode %ld tokens: %.1f tokens/s (median step %.3f ms)\n",
              ids.size(), pre, ids.size() / pre, static_cast<long>(gen - 1), gen > 1 ? (gen - 1) / dec : 0.0,
              step_ms.empty() ? 0.0 : step_ms[step_ms.size() / 2]);
  return absl::OkStatus();
}

// Where the weights come from: a GGUF file, or (GPU only) a synthetic preset filled on each GPU
// from a seed — the full model's 553 GiB never touch a disk.
struct ModelSource {
  std::string path;
  std::string synth_preset;
  uint64_t synth_seed = 1;
  std::string synth_quant = "UD-IQ1_S";
  int64_t synth_layers = 0;  // 0: the preset's
};

// The CUDA engine's optional fast paths (flags without values).
struct CudaFastPaths {
  bool int8_experts = false;
  bool ternary_experts = false;
  bool chunked_kda = false;       // the flag given (the engine's default anyway)
  bool token_kda = false;         // the flag given: chunked KDA prefill off
  bool tc_mla_decode = false;     // the flag given (the engine's default anyway)
  bool exact_mla_decode = false;  // the flag given: tensor-core MLA decode off
  int64_t f16_weights_mb = -1;    // --f16-weights-mb; -1: the engine's default
};

#ifdef K3_HAVE_CUDA_BACKEND
// --backend cuda: this rank's shard on its GPU (the local rank's, of those it sees), the engine's
// all-reduces over NCCL on the engine's stream, steps and band summaries over `comm` (MPI).
absl::Status RunCuda(k3::coll::Communicator& comm, const ModelSource& model, k3::model::RankPlan plan, int rank,
                     int64_t max_seqs, int64_t cache_tokens, int64_t prefill_chunk, const CudaFastPaths& fast,
                     const ServeOptions& serve, const std::string& prompt, int64_t gen) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) return absl::FailedPreconditionError("no CUDA device");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  k3::engine_cuda::CudaEngineOptions opt;
  opt.device = (local != nullptr ? std::atoi(local) : rank) % n_dev;
  if (cudaSetDevice(opt.device) != cudaSuccess) return absl::InternalError("cudaSetDevice failed");
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    return absl::InternalError("cudaStreamCreate failed");
  }
  K3_ASSIGN_OR_RETURN(auto nccl, k3::coll::MakeNcclCommunicator(MPI_COMM_WORLD, {stream}));
  opt.plan = plan;
  opt.rank = rank;
  opt.comm = nccl.get();
  opt.stream = stream;
  opt.max_seqs = max_seqs;
  opt.max_batch = max_seqs;
  opt.cache_tokens = cache_tokens;
  if (prefill_chunk > 0) opt.prefill_chunk = prefill_chunk;
  opt.int8_expert_x = fast.int8_experts;
  opt.ternary_experts = fast.ternary_experts;
  opt.chunked_kda = !fast.token_kda;
  opt.tc_mla_decode = !fast.exact_mla_decode;
  opt.cache_f16 = !fast.exact_mla_decode;  // the exact decode kernel on an f32 cache: the exact function
  if (fast.f16_weights_mb >= 0) opt.prefill_f16_weights_mb = fast.f16_weights_mb;
  opt.verbose = rank == 0;
  std::unique_ptr<k3::engine_cuda::CudaEngine> engine;
  if (!model.path.empty()) {
    K3_ASSIGN_OR_RETURN(engine, k3::engine_cuda::CudaEngine::Open(model.path, opt));
  } else {
    K3_ASSIGN_OR_RETURN(k3::model::K3Config cfg, k3::synth::PresetConfig(model.synth_preset));
    k3::synth::SizeOverrides o;
    if (model.synth_layers > 0) o.layers = model.synth_layers;
    K3_RETURN_IF_ERROR(k3::synth::ApplyOverrides(o, &cfg));
    K3_ASSIGN_OR_RETURN(engine, k3::engine_cuda::CudaEngine::OpenSynth(
                                    {cfg, model.synth_quant, model.synth_seed}, opt));
  }
  if (rank == 0) {
    std::printf("%s\nbackend cuda: %d ranks (GPU %d here), %d expert groups, %.2f GB of weights on rank 0\n",
                engine->config().Summary().c_str(), plan.ranks, opt.device, plan.expert_groups,
                engine->weight_bytes() / 1e9);
    std::fflush(stdout);
  }
  k3::engine_cuda::CudaRankEngine rank_engine(*engine);
  k3::runtime::WorkerGroup group(rank_engine, comm);
  if (rank != 0) return group.FollowerLoop();
  if (!serve.address.empty()) {
    return Serve(serve, group, rank_engine, engine->config(),
                 {"", plan.ranks, max_seqs, engine->page_size(), engine->cache_capacity_tokens()});
  }
  return Generate(group, prompt, gen);
}
#endif

absl::Status Run(k3::CliArgs& args, int rank, int size) {
  ModelSource model;
  model.path = args.Str("model");
  model.synth_preset = args.Str("synth");
  K3_ASSIGN_OR_RETURN(int64_t synth_seed, args.Int("synth-seed", 1));
  model.synth_quant = args.Str("synth-quant", "UD-IQ1_S");
  K3_ASSIGN_OR_RETURN(model.synth_layers, args.Int("synth-layers", 0));
  K3_ASSIGN_OR_RETURN(int64_t groups, args.Int("expert-groups", size));
  K3_ASSIGN_OR_RETURN(int64_t max_seqs, args.Int("max-seqs", 8));
  K3_ASSIGN_OR_RETURN(int64_t cache_tokens, args.Int("cache-tokens", 0));
  K3_ASSIGN_OR_RETURN(int64_t timeout_ms, args.Int("timeout-ms", 60000));
  K3_ASSIGN_OR_RETURN(int64_t gen, args.Int("gen", 16));
  std::string prompt = args.Str("prompt");
  const std::string prompt_file = args.Str("prompt-file");
  K3_ASSIGN_OR_RETURN(int64_t prefill_chunk, args.Int("prefill-chunk", 0));
  CudaFastPaths fast;
  for (auto [name, flag] : {std::pair<const char*, bool*>{"int8-experts", &fast.int8_experts},
                            std::pair<const char*, bool*>{"ternary-experts", &fast.ternary_experts},
                            std::pair<const char*, bool*>{"chunked-kda", &fast.chunked_kda},
                            std::pair<const char*, bool*>{"token-kda", &fast.token_kda},
                            std::pair<const char*, bool*>{"tc-mla-decode", &fast.tc_mla_decode},
                            std::pair<const char*, bool*>{"exact-mla-decode", &fast.exact_mla_decode}}) {
    *flag = args.Has(name);
    if (*flag && !args.Str(name).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
    }
  }
  K3_ASSIGN_OR_RETURN(fast.f16_weights_mb, args.Int("f16-weights-mb", -1));
  ServeOptions serve;
  serve.address = args.Str("serve");
  const std::string token_file = args.Str("auth-token-file");
  serve.tls_cert = args.Str("tls-cert");
  serve.tls_key = args.Str("tls-key");
  K3_ASSIGN_OR_RETURN(int64_t coordinator_timeout, args.Int("coordinator-timeout", 0));
  K3_ASSIGN_OR_RETURN(int64_t step_port, args.Int("step-port", 0));
  serve.coordinator_timeout = std::chrono::seconds(coordinator_timeout);
  const std::string trace_dir = args.Str("trace-dir");
  const std::string backend = args.Str("backend", "cpu");
  K3_RETURN_IF_ERROR(args.Finish());
  if (backend != "cpu" && backend != "cuda") return absl::InvalidArgumentError("--backend is cpu or cuda");
  if ((fast.int8_experts || fast.ternary_experts || fast.chunked_kda || fast.token_kda || fast.tc_mla_decode ||
       fast.exact_mla_decode || fast.f16_weights_mb >= 0) &&
      backend != "cuda") {
    return absl::InvalidArgumentError(
        "--int8-experts, --ternary-experts, --chunked-kda, --token-kda, --tc-mla-decode, --exact-mla-decode and "
        "--f16-weights-mb are options of the CUDA engine (--backend cuda)");
  }
  if (args.Has("f16-weights-mb") && fast.f16_weights_mb < 0) {
    return absl::InvalidArgumentError("--f16-weights-mb wants MiB >= 0");
  }
  if (fast.ternary_experts && !fast.int8_experts) {
    return absl::InvalidArgumentError("--ternary-experts needs --int8-experts (the experts' f32-input GEMVs read only "
                                      "the ggml rows)");
  }
  // A default's flag and the flag that turns it off, given together
  struct Opposites {
    const char *on, *off;
    bool both;
  };
  for (const Opposites& o :
       {Opposites{"chunked-kda", "token-kda", fast.chunked_kda && fast.token_kda},
        Opposites{"tc-mla-decode", "exact-mla-decode", fast.tc_mla_decode && fast.exact_mla_decode}}) {
    if (o.both) return absl::InvalidArgumentError(absl::StrCat("--", o.on, " and --", o.off, " exclude each other"));
  }
  if (prefill_chunk < 0 || (prefill_chunk > 0 && backend != "cuda")) {
    return absl::InvalidArgumentError("--prefill-chunk wants tokens >= 1 and --backend cuda (the CPU engine takes a "
                                      "step's prompt tokens in one forward)");
  }
  if (!prompt_file.empty()) {
    if (!prompt.empty()) return absl::InvalidArgumentError("give one of --prompt and --prompt-file");
    // Only the leader generates, so only it needs the file; ids separated by any whitespace, at
    // most a step's worth (kMaxStepTokens ids of up to 7 characters each).
    if (rank == 0) {
      K3_ASSIGN_OR_RETURN(prompt, k3::ReadSmallFile(prompt_file, 8 * k3::runtime::kMaxStepTokens, "--prompt-file"));
    }
  }
  if (model.path.empty() == model.synth_preset.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model FILE and --synth PRESET");
  }
  if (!model.synth_preset.empty() && backend != "cuda") {
    return absl::InvalidArgumentError(
        "--synth PRESET fills the weights on the GPU and needs --backend cuda; for the CPU engine write the "
        "model with k3-synth and pass --model");
  }
  if (synth_seed < 0 || model.synth_layers < 0) {
    return absl::InvalidArgumentError("--synth-seed and --synth-layers want numbers >= 0");
  }
  model.synth_seed = static_cast<uint64_t>(synth_seed);
  if (coordinator_timeout < 0) return absl::InvalidArgumentError("--coordinator-timeout wants seconds >= 0");
  if (serve.address.empty() && (!token_file.empty() || !serve.tls_cert.empty() || !serve.tls_key.empty() ||
                                coordinator_timeout > 0)) {
    return absl::InvalidArgumentError("--auth-token-file, --tls-cert/--tls-key and --coordinator-timeout go with --serve");
  }
  if (step_port < 0 || step_port > 65535 || (step_port > 0 && (serve.address.empty() || !serve.tls_cert.empty()))) {
    return absl::InvalidArgumentError(
        "--step-port wants a port in 1..65535, --serve, and no --tls-cert (the step channel is plaintext)");
  }
  serve.step_port = static_cast<int>(step_port);

#ifdef K3_HAVE_GRPC
  // The leader's secrets, read (and the TLS files checked) before the model loads: a bad file
  // is an error now, not after minutes of loading. Only rank 0 serves, so only it reads them.
  if (rank == 0 && !serve.address.empty()) {
    if (!token_file.empty()) {
      K3_ASSIGN_OR_RETURN(serve.token, k3::security::ReadTokenFile(token_file));
    }
    K3_RETURN_IF_ERROR(k3::security::ServerCredentials(serve.tls_cert, serve.tls_key).status());
  }
#endif
  // The per-rank timeline, written when the rank ends (trace-rank<r>.json; merge with
  // launch/merge_traces.py).
  std::unique_ptr<k3::Tracer> tracer;
  if (!trace_dir.empty()) tracer = std::make_unique<k3::Tracer>(rank, "rank " + std::to_string(rank));
  struct TraceWriter {
    k3::Tracer* t;
    std::string path;
    ~TraceWriter() {
      if (t && !t->WriteFile(path).ok()) std::fprintf(stderr, "could not write %s\n", path.c_str());
    }
  } trace_writer{tracer.get(), trace_dir + "/trace-rank" + std::to_string(rank) + ".json"};

  auto comm = k3::coll::MakeMpiCommunicator(MPI_COMM_WORLD, {std::chrono::milliseconds(timeout_ms)});
  if (backend == "cuda") {
#ifdef K3_HAVE_CUDA_BACKEND
    return RunCuda(*comm, model, {size, static_cast<int>(groups)}, rank, max_seqs, cache_tokens, prefill_chunk, fast,
                   serve, prompt, gen);
#else
    return absl::UnimplementedError("this k3-worker was built without CUDA (K3_WITH_CUDA=OFF): --backend cuda is unavailable");
#endif
  }
  k3::engine::EngineOptions opt;
  opt.plan = {size, static_cast<int>(groups)};
  opt.rank = rank;
  opt.comm = comm.get();
  opt.tracer = tracer.get();
  opt.max_seqs = max_seqs;
  opt.cache_tokens = cache_tokens;
  K3_ASSIGN_OR_RETURN(auto engine, k3::engine::Engine::Open(model.path, opt));
  std::string plan;
  if (rank == 0) {
    auto file = k3::gguf::GgufFile::Open(model.path);
    const k3::gguf::GgufFile* f = file->get();
    plan = k3::model::DescribePlan(engine->config(), opt.plan, [f](const k3::model::TensorSpec& s) {
      return f->FindTensor(s.name)->type;
    });
    std::printf("%s\n%s", engine->config().Summary().c_str(), plan.c_str());
    std::fflush(stdout);
  }
  k3::runtime::CpuRankEngine rank_engine(*engine);
  k3::runtime::WorkerGroup group(rank_engine, *comm);
  if (rank != 0) return group.FollowerLoop();
  if (!serve.address.empty()) {
    const auto& shape = engine->cache().shape();
    return Serve(serve, group, rank_engine, engine->config(),
                 {plan, opt.plan.ranks, shape.max_seqs, shape.page_size, shape.n_pages * shape.page_size});
  }

  return Generate(group, prompt, gen);
}

}  // namespace

int main(int argc, char** argv) {
  // SIGINT/SIGTERM are taken synchronously by the leader's serve loop (every thread inherits
  // the mask, so none of gRPC's threads takes them first).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // SPDLOG_LEVEL=debug (k3-launch's logging.level, mpirun -x) turns on the leader's per-step timing lines.
  spdlog::cfg::load_env_levels();
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  k3::CliArgs args(argc, argv);
  absl::Status s = Run(args, rank, size);
  if (!s.ok()) {
    std::fprintf(stderr, "k3-worker rank %d: %s\n", rank, std::string(s.message()).c_str());
    // A failed group cannot finish MPI cleanly (peers may be gone): end the whole job.
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  MPI_Finalize();
  return 0;
}
