#include "worker/engine_cuda/cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/band_top/band_top.h"
#include "kernels/cuda/kda/kda.h"
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/cuda/mla/mla_prefill.h"
#include "kernels/cuda/mla/mla_prefill_mha.h"
#include "kernels/quant/ggml_type.h"
#include "kernels/cuda/moe/moe_router.h"
#include "kernels/cuda/quant_gemm/blas_gemm.h"
#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/residual_mix/add_mix_norm.h"
#include "kernels/cuda/residual_mix/residual_mix.h"
#include "kernels/cuda/short_conv/short_conv.h"
#include "kernels/cuda/short_conv/short_conv_decode.h"
#include "worker/common/status_macros.h"
#include "worker/engine/model_weights.h"
#include "worker/engine_cuda/cuda_status.h"
#include "worker/engine_cuda/device_weights.h"
#include "worker/engine_cuda/engine_kernels.h"
#include "worker/engine_cuda/half_weights.h"
#include "worker/engine_cuda/products.h"
#include "worker/engine/bind_shard.h"
#include "worker/engine_cuda/synth_shard.h"
#include "worker/engine_cuda/weight_upload.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/tensor_manifest.h"
#include "worker/synth/synth_model.h"

namespace k3::engine_cuda {

// The engine's device state: the weights (model-wide tensors inherited from DGlobals, layers),
// sequence state, per-step metadata and activation buffers, all allocated from `arena`.
struct CudaEngine::Impl : DGlobals {
  DeviceArena arena;
  std::vector<DLayer> layers;
  // state
  float* kda_state = nullptr;  // [n_kda][max_seqs][state_floats]
  float* conv_hist = nullptr;  // [n_kda][max_seqs][3][taps-1][D]
  void* mla_cache = nullptr;   // [n_pages][n_mla][page_size][row]
  int64_t n_pages = 0, pages_per_seq = 0;
  // per-step metadata: [tokens B][seq_lens B][slots B][block tables B x pages_per_seq]
  int32_t* meta_h = nullptr;
  int32_t* meta_d = nullptr;
  size_t meta_ints = 0;
  // prefill metadata: [tokens R][seq_lens R][slot 1][block table pages_per_seq], R = rows
  int32_t* pmeta_h = nullptr;
  int32_t* pmeta_d = nullptr;
  size_t pmeta_ints = 0;
  int64_t rows = 0;  // rows every activation buffer holds: max(max_batch, prefill_chunk)
  // activations
  std::vector<float*> bank;
  float *x, *cur, *h, *delta, *mix_ws, *y, *logits;
  float *kq, *kk, *kv_, *pq, *pk, *pv, *fa, *g, *beta, *o, *gp;
  float* in_proj;  // [B][4D]: the stacked q | k | v | g projections (DKda::in_proj)
  float *qa, *qf, *mkv, *qabs, *lat, *mo, *mgate, *mla_ws;
  int64_t mla_ws_floats = 0;
  float *rlogits, *wts, *wloc, *r, *xe, *ge, *ue, *ye, *reduce, *sg, *su, *dg, *du;
  int32_t *ids, *idloc;
  // MoE grouped by expert (steps of more than moe_gemv_max_rows rows, or of 2.. with the grouped GEMV):
  // offsets, rows, slots, scratch, and the grouped GEMV's passes
  int32_t *group_offsets = nullptr, *group_rows = nullptr, *group_slot = nullptr;
  int32_t *pass_count = nullptr, *pass_mat = nullptr, *pass_row0 = nullptr, *pass_n = nullptr;
  void* group_ws = nullptr;
  void* gemm_ws = nullptr;  // the GEMM's f16 copy of its activations
  size_t gemm_ws_bytes = 0;
  // mma_staged_x: the tensor-core GEMV's x as f16 fragments (QuantGemvDirectParams::x_half), one
  // scratch per stream (with side_streams a product on the side stream may run beside one on the
  // main stream; without a side scratch those products round their x per block)
  void* x_half = nullptr;
  void* x_half_side = nullptr;
  size_t x_half_bytes = 0;
  cuda::BlasScratch blas;     // the cuBLAS form's handle and f16 weight rows (blas_min_rows)
  void* h_half = nullptr;     // [rows][hidden] halves of h, for the cuBLAS products that read h
  void* mha_ws = nullptr;     // MlaPrefillMha's workspace (mla_mha_min_rows), or null: absorbed only
  size_t mha_ws_bytes = 0;
  float* logits_h = nullptr;  // pinned [B][band]
  // Band summaries (ForwardSummaries): BandTop's outputs for up to `rows` rows, their pinned
  // copies, and its workspace.
  cuda::BandTopCandidate *top_d = nullptr, *top_h = nullptr;  // [rows][kBandTopMaxN]
  float *lse_d = nullptr, *lse_h = nullptr;                    // [rows]
  void* band_ws = nullptr;
  size_t band_ws_bytes = 0;

  ~Impl() {
    if (blas.handle) cublasDestroy(blas.handle);
    if (meta_h) cudaFreeHost(meta_h);
    if (pmeta_h) cudaFreeHost(pmeta_h);
    if (logits_h) cudaFreeHost(logits_h);
    if (top_h) cudaFreeHost(top_h);
    if (lse_h) cudaFreeHost(lse_h);
  }
  template <class T>
  absl::StatusOr<T*> Alloc(size_t n) {
    return arena.Alloc<T>(n);
  }
};

CudaEngine::CudaEngine() : impl_(std::make_unique<Impl>()) {}

CudaEngine::~CudaEngine() {
  for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g);
  impl_.reset();
  if (fork_event_) cudaEventDestroy(fork_event_);
  if (join_event_) cudaEventDestroy(join_event_);
  if (mid_event_) cudaEventDestroy(mid_event_);
  if (prefetch_event_) cudaEventDestroy(prefetch_event_);
  if (prefetch_join_) cudaEventDestroy(prefetch_join_);
  if (prefetch_stream_) cudaStreamDestroy(prefetch_stream_);
  if (side_stream_) cudaStreamDestroy(side_stream_);
  if (stream_ && own_stream_) cudaStreamDestroy(stream_);
}

absl::Status CudaEngine::CheckRanks(const CudaEngineOptions& o) {
  if (o.rank < 0 || o.rank >= o.plan.ranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", o.rank, " outside the plan's ", o.plan.ranks, " ranks"));
  }
  if (o.plan.ranks > 1 && o.comm == nullptr) {
    return absl::InvalidArgumentError("a plan of several ranks needs a device communicator (NCCL)");
  }
  if (o.plan.ranks > 1 && o.stream == nullptr) {
    return absl::InvalidArgumentError("a plan of several ranks needs the communicator's stream in the options");
  }
  if (o.comm != nullptr && (o.comm->size() != o.plan.ranks || o.comm->rank() != o.rank)) {
    return absl::InvalidArgumentError(absl::StrCat("communicator is rank ", o.comm->rank(), " of ", o.comm->size(),
                                                   ", the plan says rank ", o.rank, " of ", o.plan.ranks));
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::CheckTernary(const CudaEngineOptions& o) {
  if (!o.ternary_experts) return absl::OkStatus();
  if (!o.int8_expert_x) {
    return absl::InvalidArgumentError("ternary_experts needs int8_expert_x (the f32-input expert GEMVs read only the ggml rows)");
  }
  if (o.exact_prefill) {
    return absl::InvalidArgumentError("ternary_experts and exact_prefill exclude each other (the exact prefill reads the ggml rows)");
  }
  cuda::QuantGemmParams probe{};  // no shape: the kernel choice only
  probe.type = quant::GgmlType::kIQ1_S;
  probe.iq1s_ternary = true;
  if (!cuda::QuantGemmTakesTernary(probe)) {
    return absl::InvalidArgumentError("ternary_experts needs the IQ1_S wgmma GEMM (an sm_90 GPU and an sm_90a build)");
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::AllReduce(float* data, int64_t n) {
  if (comm_ == nullptr) return absl::OkStatus();
  return comm_->AllReduceSum(data, n);
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Open(const std::string& path,
                                                             const CudaEngineOptions& options) {
  std::unique_ptr<CudaEngine> e(new CudaEngine());
  K3_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  K3_ASSIGN_OR_RETURN(e->config_, model::ParseK3Config(*file));
  K3_RETURN_IF_ERROR(model::ValidateManifest(e->config_, *file));
  K3_RETURN_IF_ERROR(model::CheckPlan(e->config_, options.plan));
  K3_RETURN_IF_ERROR(CheckRanks(options));
  e->shard_ = model::ShardFor(e->config_, options.plan, options.rank);
  K3_CU(cudaSetDevice(options.device));
  K3_RETURN_IF_ERROR(CheckTernary(options));
  K3_ASSIGN_OR_RETURN(engine::ModelWeights w, engine::BindWeights(e->config_, *file, e->shard_));
  Uploader up(e->impl_->arena, e->weight_bytes_, options.direct_gemv, options.ternary_experts);
  K3_RETURN_IF_ERROR(up.Globals(e->config_, w, e->impl_.get()));
  e->impl_->layers.resize(e->config_.n_layers);
  for (int64_t il = 0; il < e->config_.n_layers; ++il) {
    K3_RETURN_IF_ERROR(up.Layer(e->config_, il, w.layers[il], e->impl_->layers[il]));
    if (options.verbose && (il + 1 == e->config_.n_layers || (il + 1) % 8 == 0)) {
      std::fprintf(stderr, "[cuda_engine] uploaded %lld/%lld layers, %.2f GB\n", static_cast<long long>(il + 1),
                   static_cast<long long>(e->config_.n_layers), e->weight_bytes_ / 1e9);
    }
  }
  K3_RETURN_IF_ERROR(e->Init(options));
  return e;
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::OpenSynth(const SynthSource& source,
                                                                  const CudaEngineOptions& options) {
  std::unique_ptr<CudaEngine> e(new CudaEngine());
  K3_RETURN_IF_ERROR(CheckRanks(options));
  K3_ASSIGN_OR_RETURN(model::QuantMix mix, model::QuantMix::Preset(source.quant));
  synth::SynthOptions so;
  so.seed = source.seed;
  K3_ASSIGN_OR_RETURN(synth::SynthModel m, synth::SynthModel::Create(source.config, mix, so));
  e->config_ = m.config();
  K3_RETURN_IF_ERROR(model::CheckPlan(e->config_, options.plan));
  e->shard_ = model::ShardFor(e->config_, options.plan, options.rank);
  K3_CU(cudaSetDevice(options.device));
  K3_RETURN_IF_ERROR(CheckTernary(options));
  SynthHost host(m, source.fill_on_device ? &e->impl_->arena : nullptr);
  Uploader up(e->impl_->arena, e->weight_bytes_, options.direct_gemv, options.ternary_experts);
  {
    engine::ModelWeights w;
    const model::RankShard& s = e->shard_;
    K3_RETURN_IF_ERROR(engine::BindGlobals(host, s, w));
    K3_RETURN_IF_ERROR(up.Globals(e->config_, w, e->impl_.get()));
    host.Clear();
  }
  e->impl_->layers.resize(e->config_.n_layers);
  for (int64_t il = 0; il < e->config_.n_layers; ++il) {
    engine::LayerWeights lw;
    K3_RETURN_IF_ERROR(engine::BindLayer(host, e->config_, e->shard_, il, lw));
    K3_RETURN_IF_ERROR(up.Layer(e->config_, il, lw, e->impl_->layers[il]));
    host.Clear();
    if (options.verbose) {
      std::fprintf(stderr, "[cuda_engine] rank %d/%d: synthetic layer %lld/%lld filled, %.2f GB (%lld tensors on the GPU)\n",
                   options.rank, options.plan.ranks, static_cast<long long>(il + 1),
                   static_cast<long long>(e->config_.n_layers), e->weight_bytes_ / 1e9,
                   static_cast<long long>(host.device_fills()));
    }
  }
  K3_RETURN_IF_ERROR(e->Init(options));
  return e;
}

absl::Status CudaEngine::Init(const CudaEngineOptions& options) {
  options_ = options;
  const model::K3Config& c = config_;
  Impl& m = *impl_;
  if (options.max_seqs < 1 || options.max_batch < 1 || options.page_size < 1) {
    return absl::InvalidArgumentError("max_seqs, max_batch, page_size must be >= 1");
  }
  if (options.stream != nullptr) {
    stream_ = options.stream;
  } else {
    K3_CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    own_stream_ = true;
  }
  K3_CU(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
  K3_CU(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
  K3_CU(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
  K3_CU(cudaEventCreateWithFlags(&mid_event_, cudaEventDisableTiming));
  K3_CU(cudaStreamCreateWithFlags(&prefetch_stream_, cudaStreamNonBlocking));
  K3_CU(cudaEventCreateWithFlags(&prefetch_event_, cudaEventDisableTiming));
  K3_CU(cudaEventCreateWithFlags(&prefetch_join_, cudaEventDisableTiming));
  if (options.l2_prefetch_mb < 0) return absl::InvalidArgumentError("l2_prefetch_mb must be >= 0");
  comm_ = options.plan.ranks > 1 ? options.comm : nullptr;
  if (options.prefill_chunk < 1) return absl::InvalidArgumentError("prefill_chunk must be >= 1");
  if (options.blas_min_rows < 0) return absl::InvalidArgumentError("blas_min_rows must be >= 0");
  if (options.moe_gemv_max_rows < 1 && options.moe_gemv_max_rows != -1) {
    return absl::InvalidArgumentError("moe_gemv_max_rows must be >= 1, or -1 (by the expert GEMV's form)");
  }
  if (options.mma_max_rows < kMmaMaxRows || options.mma_max_rows > kMmaWideMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat("mma_max_rows must be in ", kMmaMaxRows, "..", kMmaWideMaxRows));
  }
  if (options.mla_head_gemv_max_rows < 1) return absl::InvalidArgumentError("mla_head_gemv_max_rows must be >= 1");
  // The warpgroup MLA kernel where it can run (an sm_90a build, K3's widths), else the mma.sync one.
  options_.wgmma_mla =
      options.wgmma_mla && cuda::MlaPrefillWgmmaSupports(c.mla_row, c.kv_lora_rank);
  if (options.dense_gemv_max_rows < 1 || options.dense_gemv_max_rows > kGemvMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat("dense_gemv_max_rows must be in 1..", kGemvMaxRows));
  }
  const int64_t H = c.hidden, nh = shard_.n_heads, hd = c.kda_head_dim;
  const int64_t D = nh * hd, taps = c.conv_kernel;
  // Activation buffers hold the larger of a decode batch and a prefill chunk.
  const int64_t B = std::max(options.max_batch, options.prefill_chunk);
  m.rows = B;
  int64_t cache_tokens = options.cache_tokens;
  if (cache_tokens <= 0) cache_tokens = options.max_seqs * std::min<int64_t>(c.context_length, 1 << 16);
  int64_t max_ctx = options.max_context > 0 ? options.max_context : std::min(c.context_length, cache_tokens);
  max_ctx = std::min(max_ctx, c.context_length);
  options_.max_context = max_ctx;
  m.pages_per_seq = (max_ctx + options.page_size - 1) / options.page_size;
  m.n_pages = (cache_tokens + options.page_size - 1) / options.page_size;
  const int64_t n_kda = c.n_kda_layers(), n_mla = c.n_mla_layers();
  const int64_t state_floats = nh * hd * hd, conv_floats = 3 * (taps - 1) * D;
  K3_ASSIGN_OR_RETURN(m.kda_state, m.Alloc<float>(static_cast<size_t>(n_kda) * options.max_seqs * state_floats));
  K3_ASSIGN_OR_RETURN(m.conv_hist, m.Alloc<float>(static_cast<size_t>(n_kda) * options.max_seqs * conv_floats));
  const size_t elem = options.cache_f16 ? 2 : 4;
  K3_ASSIGN_OR_RETURN(uint8_t* cache, m.Alloc<uint8_t>(static_cast<size_t>(m.n_pages) * n_mla * options.page_size * c.mla_row * elem));
  m.mla_cache = cache;
  for (int64_t p = m.n_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  cache_pages_ = m.n_pages;
  for (int64_t s = options.max_seqs - 1; s >= 0; --s) free_slots_.push_back(s);

  const int64_t MB = options.max_batch;
  m.meta_ints = static_cast<size_t>(3 * MB + MB * m.pages_per_seq);
  K3_CU(cudaMallocHost(&m.meta_h, m.meta_ints * sizeof(int32_t)));
  K3_ASSIGN_OR_RETURN(m.meta_d, m.Alloc<int32_t>(m.meta_ints));
  m.pmeta_ints = static_cast<size_t>(2 * options.prefill_chunk + 1 + m.pages_per_seq);
  K3_CU(cudaMallocHost(&m.pmeta_h, m.pmeta_ints * sizeof(int32_t)));
  K3_ASSIGN_OR_RETURN(m.pmeta_d, m.Alloc<int32_t>(m.pmeta_ints));
  K3_CU(cudaMallocHost(&m.logits_h, static_cast<size_t>(MB) * shard_.vocab_width * sizeof(float)));

  auto F = [&](size_t n) { return m.Alloc<float>(n); };
  for (int64_t i = 0; i < c.max_checkpoints(); ++i) {
    K3_ASSIGN_OR_RETURN(float* b, F(B * H));
    m.bank.push_back(b);
  }
  K3_ASSIGN_OR_RETURN(m.x, F(B * H));
  K3_ASSIGN_OR_RETURN(m.cur, F(B * H));
  K3_ASSIGN_OR_RETURN(m.h, F(B * H));
  K3_ASSIGN_OR_RETURN(m.delta, F(B * H));
  K3_ASSIGN_OR_RETURN(m.y, F(B * H));
  K3_ASSIGN_OR_RETURN(m.mix_ws, F(cuda::ResidualMixWorkspaceFloats(B, H)));
  K3_ASSIGN_OR_RETURN(m.logits, F(B * shard_.vocab_width));
  K3_ASSIGN_OR_RETURN(m.top_d, m.Alloc<cuda::BandTopCandidate>(B * cuda::kBandTopMaxN));
  K3_ASSIGN_OR_RETURN(m.lse_d, F(B));
  m.band_ws_bytes = cuda::BandTopWorkspaceBytes(B, shard_.vocab_width, cuda::kBandTopMaxN);
  K3_ASSIGN_OR_RETURN(uint8_t* band_ws, m.Alloc<uint8_t>(m.band_ws_bytes));
  m.band_ws = band_ws;
  K3_CU(cudaMallocHost(&m.top_h, static_cast<size_t>(B) * cuda::kBandTopMaxN * sizeof(cuda::BandTopCandidate)));
  K3_CU(cudaMallocHost(&m.lse_h, static_cast<size_t>(B) * sizeof(float)));
  // KDA
  K3_ASSIGN_OR_RETURN(m.pq, F(B * D));
  K3_ASSIGN_OR_RETURN(m.pk, F(B * D));
  K3_ASSIGN_OR_RETURN(m.pv, F(B * D));
  K3_ASSIGN_OR_RETURN(m.kq, F(B * D));
  K3_ASSIGN_OR_RETURN(m.kk, F(B * D));
  K3_ASSIGN_OR_RETURN(m.kv_, F(B * D));
  K3_ASSIGN_OR_RETURN(m.fa, F(B * hd));
  K3_ASSIGN_OR_RETURN(m.g, F(B * D));
  K3_ASSIGN_OR_RETURN(m.beta, F(B * nh));
  K3_ASSIGN_OR_RETURN(m.o, F(B * D));
  K3_ASSIGN_OR_RETURN(m.gp, F(B * D));
  K3_ASSIGN_OR_RETURN(m.in_proj, F(B * 4 * D));
  // MLA
  const int64_t qk = c.mla_qk_head_dim(), row = c.mla_row, lora = c.kv_lora_rank;
  K3_ASSIGN_OR_RETURN(m.qa, F(B * c.q_lora_rank));
  K3_ASSIGN_OR_RETURN(m.qf, F(B * nh * qk));
  K3_ASSIGN_OR_RETURN(m.mkv, F(B * row));
  K3_ASSIGN_OR_RETURN(m.qabs, F(B * nh * row));
  K3_ASSIGN_OR_RETURN(m.lat, F(B * nh * lora));
  K3_ASSIGN_OR_RETURN(m.mo, F(B * nh * c.v_head_dim));
  K3_ASSIGN_OR_RETURN(m.mgate, F(B * nh * c.v_head_dim));
  // Splits fill the GPU for a decode batch; a prefill chunk's many rows need few (bounded below).
  const int max_splits = cuda::MlaDecodeSplits(1, nh, max_ctx) * 2 + 8;
  m.mla_ws_floats = std::max(cuda::MlaDecodeWorkspaceFloats(MB, nh, lora, max_splits),
                             cuda::MlaDecodeWorkspaceFloats(B, nh, lora, 2));
  if (!options.exact_prefill || options.tc_mla_decode) {
    // The tensor-core attention shares it: an f16 copy of an f32 cache's rows (up to the
    // longest bucket) plus 64 MB for context-split partials (fewer splits are used if they need more).
    const auto ct = options.cache_f16 ? cuda::MlaCacheType::kF16 : cuda::MlaCacheType::kF32;
    const int64_t pf = cuda::MlaPrefillWorkspaceBytes(ct, MlaBucket(max_ctx), options.prefill_chunk, nh, row, lora, 1);
    m.mla_ws_floats = std::max(m.mla_ws_floats, pf / 4 + (int64_t{16} << 20));
  }
  K3_ASSIGN_OR_RETURN(m.mla_ws, F(m.mla_ws_floats));
  // MoE / dense
  const int64_t E = c.n_experts, K = c.n_experts_used, L = c.expert_latent, Fw = shard_.expert_ffn_width;
  K3_ASSIGN_OR_RETURN(m.rlogits, F(B * std::max<int64_t>(E, 1)));
  K3_ASSIGN_OR_RETURN(m.wts, F(B * K));
  K3_ASSIGN_OR_RETURN(m.wloc, F(B * K));
  K3_ASSIGN_OR_RETURN(m.ids, m.Alloc<int32_t>(B * K));
  K3_ASSIGN_OR_RETURN(m.idloc, m.Alloc<int32_t>(B * K));
  // Steps that group the MoE by expert (GEMM, or grouped GEMV passes): of 2 rows or more, and of
  // one row too on a rank that holds only some experts (the passes then hold only its own).
  const bool some_experts = shard_.expert_begin != 0 || shard_.n_experts != c.n_experts;
  if ((B > 1 || some_experts) && c.n_experts > 0) {
    const int64_t El = std::max<int64_t>(shard_.n_experts, 1);
    K3_ASSIGN_OR_RETURN(m.group_offsets, m.Alloc<int32_t>(El + 1));
    K3_ASSIGN_OR_RETURN(m.group_rows, m.Alloc<int32_t>(B * K));
    K3_ASSIGN_OR_RETURN(m.group_slot, m.Alloc<int32_t>(B * K));
    K3_ASSIGN_OR_RETURN(uint8_t* ws, m.Alloc<uint8_t>(cuda::MoeGroupWorkspaceBytes(B, K, El)));
    m.group_ws = ws;
    K3_ASSIGN_OR_RETURN(m.pass_count, m.Alloc<int32_t>(1));
    K3_ASSIGN_OR_RETURN(m.pass_mat, m.Alloc<int32_t>(B * K));
    K3_ASSIGN_OR_RETURN(m.pass_row0, m.Alloc<int32_t>(B * K));
    K3_ASSIGN_OR_RETURN(m.pass_n, m.Alloc<int32_t>(B * K));
  }
  // The widest activations a product of this engine reads.
  const int64_t widest = std::max({H, D, c.q_lora_rank, nh * c.v_head_dim, L, shard_.dense_width,
                                   shard_.shared_width, c.kv_lora_rank, qk});
  if (options.mma_shared_x && options.mma_staged_x) {  // rows of the tensor-core GEMV's steps, as f16
    m.x_half_bytes = cuda::QuantGemvMmaXHalfBytes(std::min(B, options.mma_max_rows), widest);
    K3_ASSIGN_OR_RETURN(uint8_t* xh, m.Alloc<uint8_t>(m.x_half_bytes));
    m.x_half = xh;
    if (options.side_streams) {
      K3_ASSIGN_OR_RETURN(uint8_t* xh_side, m.Alloc<uint8_t>(m.x_half_bytes));
      m.x_half_side = xh_side;
    }
  }
  if (B > kMmaMaxRows) {  // steps with products on the tile GEMM (Product, products.h)
    // The GEMM's f16 copy of its activations: B rows of the widest input, or the B*K grouped
    // expert rows.
    m.gemm_ws_bytes = (static_cast<size_t>(std::max(B * widest, B * K * std::max<int64_t>(Fw, 1))) * 2 + 255) / 256 * 256;
    K3_ASSIGN_OR_RETURN(uint8_t* gws, m.Alloc<uint8_t>(m.gemm_ws_bytes));
    m.gemm_ws = gws;
    if (!options.exact_prefill && options.blas_min_rows > 0 && B >= options.blas_min_rows) {
      // cuBLAS gets its own workspace (no allocation inside a step, capturable).
      constexpr size_t kBlasWeightBytes = size_t{64} << 20, kBlasWorkspaceBytes = size_t{32} << 20;
      m.blas.weight_bytes = std::max(kBlasWeightBytes, cuda::QuantGemmBlasMinScratch(widest));
      K3_ASSIGN_OR_RETURN(uint8_t * bw, m.Alloc<uint8_t>(m.blas.weight_bytes));
      K3_ASSIGN_OR_RETURN(uint8_t * bws, m.Alloc<uint8_t>(kBlasWorkspaceBytes));
      m.blas.weights = bw;
      K3_ASSIGN_OR_RETURN(uint8_t * hh, m.Alloc<uint8_t>(static_cast<size_t>(B) * c.hidden * 2));
      m.h_half = hh;
      if (cublasCreate(&m.blas.handle) != CUBLAS_STATUS_SUCCESS) {
        m.blas.handle = nullptr;
        return absl::InternalError("cublasCreate failed");
      }
      if (cublasSetWorkspace(m.blas.handle, bws, kBlasWorkspaceBytes) != CUBLAS_STATUS_SUCCESS) {
        return absl::InternalError("cublasSetWorkspace failed");
      }
      if (options.mla_mha_min_rows > 0 && B >= options.mla_mha_min_rows && MlaMhaFits()) {
        // K and V of as many heads as 1 GiB holds at the longest context (at least one).
        constexpr size_t kMhaKvBudget = size_t{1} << 30;
        const size_t per_head = static_cast<size_t>(max_ctx) * (cuda::kMlaMhaNope + cuda::kMlaMhaValue) * 2;
        const int64_t group = std::clamp<int64_t>(static_cast<int64_t>(kMhaKvBudget / per_head), 1, nh);
        m.mha_ws_bytes = cuda::MlaPrefillMhaWorkspaceBytes(max_ctx, nh, group);
        K3_ASSIGN_OR_RETURN(uint8_t * mws, m.Alloc<uint8_t>(m.mha_ws_bytes));
        m.mha_ws = mws;
      }
    }
  }
  K3_ASSIGN_OR_RETURN(m.r, F(B * L));
  K3_ASSIGN_OR_RETURN(m.xe, F(B * K * L));
  K3_ASSIGN_OR_RETURN(m.ge, F(B * K * Fw));
  K3_ASSIGN_OR_RETURN(m.ue, F(B * K * Fw));
  K3_ASSIGN_OR_RETURN(m.ye, F(B * K * L));
  K3_ASSIGN_OR_RETURN(m.reduce, F(B * (L + H)));
  K3_ASSIGN_OR_RETURN(m.sg, F(B * std::max<int64_t>(shard_.shared_width, 1)));
  K3_ASSIGN_OR_RETURN(m.su, F(B * std::max<int64_t>(shard_.shared_width, 1)));
  K3_ASSIGN_OR_RETURN(m.dg, F(B * std::max<int64_t>(shard_.dense_width, 1)));
  K3_ASSIGN_OR_RETURN(m.du, F(B * std::max<int64_t>(shard_.dense_width, 1)));
  if (m.blas.handle != nullptr && options.prefill_f16_weights_mb > 0) {  // last: the copies take what is left
    const size_t budget = static_cast<size_t>(options.prefill_f16_weights_mb) << 20;
    K3_ASSIGN_OR_RETURN(HalfWeightsResult hw,
                        MakeResidentHalfWeights(m.layers, m.arena, budget, kHalfWeightsReserveBytes, stream_));
    half_weight_matrices_ = hw.matrices;
    half_weight_bytes_ = hw.bytes;
    if (options.verbose) {
      std::fprintf(stderr, "[cuda_engine] rank %d: resident f16 weights for cuBLAS: %lld matrices, %.2f GB (%lld left to decode per call)\n",
                   options.rank, static_cast<long long>(hw.matrices), hw.bytes / 1e9, static_cast<long long>(hw.skipped));
    }
  }
  K3_CU(cudaDeviceSynchronize());
  if (comm_ != nullptr) {
    // Eager all-reduces of every size a step uses at 1 and B rows, before any capture: NCCL
    // connects its peers on first use, which must not happen inside a graph capture.
    // Every rank loaded before the first all-reduce: the peer path's GPU-side wait for a peer is
    // bounded (10 s), and one rank may load much longer than another.
    K3_RETURN_IF_ERROR(comm_->Barrier());
    K3_CU(cudaMemsetAsync(m.reduce, 0, B * (L + H) * sizeof(float), stream_));
    for (int64_t n : {int64_t{1}, MB}) {
      K3_RETURN_IF_ERROR(AllReduce(m.reduce, n * H));
      K3_RETURN_IF_ERROR(AllReduce(m.reduce, n * L));
      K3_RETURN_IF_ERROR(AllReduce(m.reduce, n * (L + H)));
    }
    K3_RETURN_IF_ERROR(SyncStream());
    comm_->ResetStats();
  }
  return absl::OkStatus();
}

StepBytes CudaEngine::step_bytes(int64_t n_seqs, int64_t ctx) const {
  const model::K3Config& c = config_;
  const Impl& m = *impl_;
  StepBytes b;
  b.embed = m.token_embd.row_bytes;
  b.head = MatBytes(m.output);
  b.mla_cache = cache_bytes_per_token() * static_cast<uint64_t>(n_seqs) * static_cast<uint64_t>(ctx);
  b.kda_state = 2 * sizeof(float) * static_cast<uint64_t>(n_seqs) * static_cast<uint64_t>(c.n_kda_layers()) *
                static_cast<uint64_t>(shard_.n_heads) * static_cast<uint64_t>(c.kda_head_dim) *
                static_cast<uint64_t>(c.kda_head_dim);
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const DLayer& l = m.layers[il];
    if (c.is_mla(il)) {
      const DMla& w = l.mla;
      b.mla_weights += MatBytes(w.q_a) + MatBytes(w.q_b) + MatBytes(w.kv_a) + MatBytes(w.out) +
                       (w.has_gate ? MatBytes(w.gate) : 0) + w.k_b.matrix_stride * w.k_b.count +
                       w.v_b.matrix_stride * w.v_b.count;
    } else {
      const DKda& w = l.kda;
      b.kda += MatBytes(w.q) + MatBytes(w.k) + MatBytes(w.v) + MatBytes(w.f_a) + MatBytes(w.f_b) + MatBytes(w.beta) +
               MatBytes(w.g) + MatBytes(w.out);
    }
    if (c.is_dense(il)) {
      b.dense += MatBytes(l.dense.gate) + MatBytes(l.dense.up) + MatBytes(l.dense.down);
    } else {
      const DMoe& w = l.moe;
      b.moe += MatBytes(w.router) + MatBytes(w.routed_down) + MatBytes(w.routed_up);
      if (w.has_shared) b.moe += MatBytes(w.shared_gate) + MatBytes(w.shared_up) + MatBytes(w.shared_down);
      b.moe += static_cast<uint64_t>(std::min<int64_t>(n_seqs * c.n_experts_used, shard_.n_experts)) *
               (w.gate_exps.matrix_stride + w.up_exps.matrix_stride + w.down_exps.matrix_stride);
    }
  }
  return b;
}

uint64_t CudaEngine::linear_macs_per_token() const {
  const model::K3Config& c = config_;
  const Impl& m = *impl_;
  auto macs = [](const DMat& w) { return static_cast<uint64_t>(w.rows) * w.cols; };
  auto stack = [](const DStack& w, int64_t count) { return static_cast<uint64_t>(w.rows) * w.cols * count; };
  uint64_t t = 0;
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const DLayer& l = m.layers[il];
    if (c.is_mla(il)) {
      const DMla& w = l.mla;
      t += macs(w.q_a) + macs(w.q_b) + macs(w.kv_a) + macs(w.out) + (w.has_gate ? macs(w.gate) : 0);
      t += stack(w.k_b, w.k_b.count) + stack(w.v_b, w.v_b.count);
    } else {
      const DKda& w = l.kda;
      t += macs(w.q) + macs(w.k) + macs(w.v) + macs(w.f_a) + macs(w.f_b) + macs(w.beta) + macs(w.g) + macs(w.out);
      t += static_cast<uint64_t>(shard_.n_heads) * 4 * c.kda_head_dim * c.kda_head_dim;  // the recurrence
    }
    if (c.is_dense(il)) {
      t += macs(l.dense.gate) + macs(l.dense.up) + macs(l.dense.down);
    } else {
      const DMoe& w = l.moe;
      t += macs(w.router) + macs(w.routed_down) + macs(w.routed_up);
      if (w.has_shared) t += macs(w.shared_gate) + macs(w.shared_up) + macs(w.shared_down);
      // K experts per token, of which this rank holds its share (groups x bands split them evenly).
      const double share = static_cast<double>(shard_.n_experts) / c.n_experts;
      t += static_cast<uint64_t>(share * c.n_experts_used *
                                 (stack(w.gate_exps, 1) + stack(w.up_exps, 1) + stack(w.down_exps, 1)));
    }
  }
  return t;
}

uint64_t CudaEngine::attention_macs_per_row(int64_t chunk) const {
  const model::K3Config& c = config_;
  // Per head and cached row: decompressed, a 192-wide score and a 128-wide value product;
  // absorbed, 576 and 512.
  const int64_t per_head = MlaDecompressed(chunk) ? c.mla_qk_head_dim() + c.v_head_dim : c.mla_row + c.kv_lora_rank;
  return static_cast<uint64_t>(c.n_mla_layers()) * shard_.n_heads * per_head;
}

bool CudaEngine::MlaMhaFits() const {
  const model::K3Config& c = config_;
  if (c.qk_nope_dim != cuda::kMlaMhaNope || c.qk_rope_dim != cuda::kMlaMhaRope ||
      c.kv_lora_rank != cuda::kMlaMhaLatent || c.v_head_dim != cuda::kMlaMhaValue) {
    return false;
  }
  for (int64_t il = 0; il < c.n_layers; ++il) {
    if (!c.is_mla(il)) continue;
    const DMla& w = impl_->layers[il].mla;
    if (w.k_b.type != w.v_b.type || !cuda::QuantGemmSupports(w.k_b.type) ||
        cuda::kMlaMhaNope % quant::Traits(w.k_b.type).block_elems != 0) {
      return false;
    }
  }
  return true;
}

int64_t CudaEngine::MoeGemvMaxRows() const {
  if (options_.moe_gemv_max_rows > 0) return options_.moe_gemv_max_rows;
  return options_.int8_expert_x && options_.grouped_expert_gemv ? 256 : 64;
}

bool CudaEngine::MlaDecompressed(int64_t n) const {
  return impl_->mha_ws != nullptr && n > kMmaMaxRows && n >= options_.mla_mha_min_rows;
}

uint64_t CudaEngine::cache_bytes_per_token() const {
  return static_cast<uint64_t>(config_.n_mla_layers()) * config_.mla_row * (options_.cache_f16 ? 2 : 4);
}

absl::Status CudaEngine::Add(SeqId id) {
  if (seqs_.contains(id)) return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " exists"));
  if (free_slots_.empty()) return absl::ResourceExhaustedError("no free sequence slot");
  Sequence s;
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  const model::K3Config& c = config_;
  const int64_t nh = shard_.n_heads, hd = c.kda_head_dim, D = nh * hd;
  const size_t state_floats = nh * hd * hd, conv_floats = 3 * (c.conv_kernel - 1) * D;
  for (int64_t l = 0; l < c.n_kda_layers(); ++l) {
    K3_CU(cudaMemsetAsync(impl_->kda_state + (l * options_.max_seqs + s.slot) * state_floats, 0,
                          state_floats * sizeof(float), stream_));
    K3_CU(cudaMemsetAsync(impl_->conv_hist + (l * options_.max_seqs + s.slot) * conv_floats, 0,
                          conv_floats * sizeof(float), stream_));
  }
  seqs_[id] = std::move(s);
  return absl::OkStatus();
}

absl::Status CudaEngine::Free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  for (int32_t p : it->second.pages) free_pages_.push_back(p);
  free_slots_.push_back(it->second.slot);
  seqs_.erase(it);
  return absl::OkStatus();
}

int64_t CudaEngine::Length(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? -1 : it->second.length;
}

// Checks the step, reserves pages, fills the metadata and uploads it (async).
absl::Status CudaEngine::Prepare(std::span<const SeqId> ids, std::span<const int32_t> tokens, StepView* view) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 1 || n > options_.max_batch || tokens.size() != ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("decode step of ", n, " rows (max_batch ", options_.max_batch, ")"));
  }
  std::unordered_set<SeqId> seen;
  int64_t need = 0, max_len = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto it = seqs_.find(ids[i]);
    if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", ids[i]));
    if (!seen.insert(ids[i]).second) return absl::InvalidArgumentError("a sequence appears twice in one step");
    if (tokens[i] < 0 || tokens[i] >= config_.vocab) return absl::InvalidArgumentError("token id outside the vocabulary");
    const int64_t len = it->second.length;
    if (len + 1 > options_.max_context) return absl::InvalidArgumentError("context length exceeded");
    if (len % options_.page_size == 0 && static_cast<int64_t>(it->second.pages.size()) * options_.page_size <= len) ++need;
    max_len = std::max(max_len, len + 1);
  }
  if (need > static_cast<int64_t>(free_pages_.size())) return absl::ResourceExhaustedError("MLA cache pages exhausted");
  const int64_t B = options_.max_batch, MP = impl_->pages_per_seq;
  int32_t* meta = impl_->meta_h;
  std::fill(meta, meta + impl_->meta_ints, 0);
  for (int64_t i = 0; i < n; ++i) {
    Sequence& s = seqs_[ids[i]];
    while (static_cast<int64_t>(s.pages.size()) * options_.page_size < s.length + 1) {
      s.pages.push_back(free_pages_.back());
      free_pages_.pop_back();
    }
    meta[i] = tokens[i];
    meta[B + i] = static_cast<int32_t>(s.length + 1);
    meta[2 * B + i] = static_cast<int32_t>(s.slot);
    std::copy(s.pages.begin(), s.pages.end(), meta + 3 * B + i * MP);
  }
  K3_CU(cudaMemcpyAsync(impl_->meta_d, meta, impl_->meta_ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  StepView& v = *view;
  v.n = n;
  v.n_seqs = n;
  v.run = 1;
  v.tokens = impl_->meta_d;
  v.lens = impl_->meta_d + B;
  v.slots = impl_->meta_d + 2 * B;
  v.block_tables = impl_->meta_d + 3 * B;
  v.block_table_stride = MP;
  v.bucket = MlaBucket(max_len);
  v.head_row = 0;
  v.head_rows = n;
  return absl::OkStatus();
}

int CudaEngine::MlaBucket(int64_t max_len) {
  // A power of two >= the longest sequence (at least 256 rows): the MLA split count's key.
  int b = 256;
  while (b < max_len) b *= 2;
  return b;
}

absl::Status CudaEngine::PreparePrefill(SeqId id, std::span<const int32_t> tokens, StepView* view) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > options_.prefill_chunk) {
    return absl::InvalidArgumentError(absl::StrCat("prefill chunk of ", n, " rows (prefill_chunk ", options_.prefill_chunk, ")"));
  }
  Sequence& s = it->second;
  if (s.length + n > options_.max_context) return absl::InvalidArgumentError("context length exceeded");
  for (int32_t t : tokens) {
    if (t < 0 || t >= config_.vocab) return absl::InvalidArgumentError("token id outside the vocabulary");
  }
  const int64_t P = options_.page_size;
  const int64_t need = (s.length + n + P - 1) / P - static_cast<int64_t>(s.pages.size());
  if (need > static_cast<int64_t>(free_pages_.size())) return absl::ResourceExhaustedError("MLA cache pages exhausted");
  for (int64_t i = 0; i < need; ++i) {
    s.pages.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
  const int64_t R = options_.prefill_chunk;
  int32_t* meta = impl_->pmeta_h;
  for (int64_t t = 0; t < n; ++t) {
    meta[t] = tokens[t];
    meta[R + t] = static_cast<int32_t>(s.length + 1 + t);
  }
  meta[2 * R] = static_cast<int32_t>(s.slot);
  std::copy(s.pages.begin(), s.pages.end(), meta + 2 * R + 1);
  // Pinned staging is reused by the next chunk: this upload must finish before the host rewrites it.
  K3_CU(cudaMemcpyAsync(impl_->pmeta_d, meta, impl_->pmeta_ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  StepView& v = *view;
  v.n = n;
  v.n_seqs = 1;
  v.run = n;
  v.tokens = impl_->pmeta_d;
  v.lens = impl_->pmeta_d + R;
  v.slots = impl_->pmeta_d + 2 * R;
  v.block_tables = impl_->pmeta_d + 2 * R + 1;
  v.block_table_stride = 0;  // every row of the run reads the sequence's one table
  v.bucket = MlaBucket(s.length + n);
  v.kv_len = s.length + n;
  return absl::OkStatus();
}

void CudaEngine::Commit(std::span<const SeqId> ids) {
  for (SeqId id : ids) ++seqs_[id].length;
}

// Kinds for the profile marks.
enum Mark { kEmbed = 0, kKda, kMla, kDense, kMoe, kMixNorm, kHead, kComm, kMarks };

absl::Status CudaEngine::Enqueue(const StepView& v, std::vector<std::pair<int, cudaEvent_t>>* marks) {
  const model::K3Config& c = config_;
  Impl& m = *impl_;
  cudaStream_t s = stream_;
  const int64_t n = v.n, H = c.hidden, nh = shard_.n_heads, hd = c.kda_head_dim, D = nh * hd;
  const int64_t taps = c.conv_kernel, MP = v.block_table_stride;
  const float eps = c.rms_eps;
  const int bucket = v.bucket;
  const int32_t* tokens_d = v.tokens;
  const int32_t* lens_d = v.lens;
  const int32_t* slots_d = v.slots;
  const int32_t* bt_d = v.block_tables;
  // Products (Product, products.h): the f32 GEMV, the tensor-core GEMV up to kMmaMaxRows rows, the
  // tile GEMM beyond, cuBLAS from blas_min_rows rows (unless exact_prefill).
  const bool exact = options_.exact_prefill;
  GemmScratch gws{m.gemm_ws, m.gemm_ws_bytes, m.blas, options_.blas_min_rows};
  // Decode steps (one token per sequence) above dense_gemv_max_rows rows take the tensor-core GEMV;
  // a prefill run of up to kGemvMaxRows tokens stays on the exact f32 GEMV.
  const int64_t gemv_rows = v.run == 1 ? options_.dense_gemv_max_rows : kGemvMaxRows;
  // Every non-expert product of the step goes through here; st: the side stream, or nullptr for s.
  // Decode steps take the tensor-core GEMV up to mma_max_rows rows (CudaEngineOptions).
  const MmaChoice mma{options_.mma_shared_x, v.run == 1 ? options_.mma_max_rows : kMmaMaxRows, m.x_half,
                      m.x_half_bytes};
  MmaChoice mma_side = mma;  // products on the side stream: its own x scratch
  mma_side.x_half = m.x_half_side;
  auto Prod = [&](const DMat& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t rows,
                  cudaStream_t st = nullptr) {
    return Product(w, x, xs, y, ys, rows, exact, gws, st != nullptr ? st : s, gemv_rows,
                   st != nullptr && st != s ? mma_side : mma);
  };
  // The LM head: cuBLAS from kHeadBlasMinRows rows only (its f16 decode pass is ~1 ms).
  GemmScratch head_ws = gws;
  if (head_ws.blas_min_rows > 0) head_ws.blas_min_rows = std::max(head_ws.blas_min_rows, kHeadBlasMinRows);
  auto HeadProd = [&](const float* x, int64_t rows) {
    return Product(m.output, x, H, m.logits, shard_.vocab_width, rows, exact, head_ws, s, gemv_rows, mma);
  };
  // Products on the tile GEMM (or cuBLAS) above mma.max_rows rows: no side stream then (below).
  const bool grouped = !exact && n > mma.max_rows;
  // Steps whose products of h run on cuBLAS round h to f16 once after each norm (round_h) for all
  // of them (up to six a layer), instead of once per product: the same halves.
  const bool round_h = grouped && m.h_half != nullptr && m.blas.handle != nullptr && options_.blas_min_rows > 0 &&
                       n >= options_.blas_min_rows && H % 8 == 0;
  if (round_h) {
    gws.rounded_from = m.h;
    gws.rounded_half = m.h_half;
    gws.rounded_cols = H;
  }
  auto rounded_h = [&]() { return round_h ? cuda::RoundRowsToHalf(m.h, H, n, H, m.h_half, s) : cudaSuccess; };
  // The MLA per-head products: one GEMM per head in steps whose products take GEMMs, past
  // mla_head_gemv_max_rows rows of a decode step; otherwise one stacked GEMV launch over all heads.
  const bool per_head_gemm = grouped && n > (v.run == 1 ? options_.mla_head_gemv_max_rows : 0);
  // The MoE groups (token, expert) pairs by expert for the tile GEMMs only above moe_gemv_max_rows
  // rows: up to it the GEMVs are faster than grouped tile GEMMs whose groups hold a few rows.
  const bool moe_grouped = !exact && n > MoeGemvMaxRows();
  // Independent branches of a layer run on the side stream when no product of the step takes the
  // tile GEMM (none uses its workspace; Product: steps of up to mma.max_rows rows never do).
  const bool side = !grouped && options_.side_streams;
  // A MoE layer's shared experts: out[n][H] = down(situ(gate·h, up·h)), on stream `st`.
  auto SharedExperts = [&](const DMoe& w, const float* h, int64_t rows, float* out, cudaStream_t st) -> cudaError_t {
    const int64_t Fs = w.shared_gate.rows;
    cudaError_t e = Prod(w.shared_gate, h, H, m.sg, Fs, rows, st);
    if (e == cudaSuccess) e = Prod(w.shared_up, h, H, m.su, Fs, rows, st);
    if (e == cudaSuccess) e = SituInto(m.sg, m.su, rows, Fs, c, st);
    if (e == cudaSuccess) e = Prod(w.shared_down, m.sg, Fs, out, H, rows, st);
    return e;
  };
  auto mark = [&](int kind) -> absl::Status {
    if (marks == nullptr) return absl::OkStatus();
    cudaEvent_t ev;
    K3_CU(cudaEventCreate(&ev));
    K3_CU(cudaEventRecord(ev, s));
    marks->push_back({kind, ev});
    return absl::OkStatus();
  };
  // The side stream starts after everything enqueued on s so far; join_side: s waits for
  // everything enqueued on the side stream so far.
  auto fork_side = [&]() -> cudaError_t {
    const cudaError_t e = cudaEventRecord(fork_event_, s);
    return e != cudaSuccess ? e : cudaStreamWaitEvent(side_stream_, fork_event_, 0);
  };
  auto join_side = [&]() -> cudaError_t {
    const cudaError_t e = cudaEventRecord(join_event_, side_stream_);
    return e != cudaSuccess ? e : cudaStreamWaitEvent(s, join_event_, 0);
  };
  // L2 prefetch of up to l2_prefetch_mb MiB of the bytes product `w` will read first (its direct
  // form: for repacked Q8_0, the leading rows' quants and their scales), on prefetch_stream_ from
  // this point of s on. Decode-sized steps only (their products are the direct GEMVs).
  const size_t prefetch_cap = static_cast<size_t>(options_.l2_prefetch_mb) << 20;
  const bool prefetching = prefetch_cap > 0 && v.run == 1 && n <= kGemvMaxRows;
  bool prefetched = false;
  auto prefetch = [&](const DMat& w) -> cudaError_t {
    if (!prefetching || w.direct == nullptr) return cudaSuccess;
    cuda::L2PrefetchRange a{w.direct, 0}, b{nullptr, 0};
    if (w.type == quant::GgmlType::kQ8_0) {  // the quants of the leading rows, then their scales
      const size_t row_total = static_cast<size_t>(w.cols) + static_cast<size_t>(w.cols / 32) * 2;
      const size_t rows = std::min<size_t>(w.rows, prefetch_cap / row_total);
      a.bytes = rows * static_cast<size_t>(w.cols);
      b = {static_cast<const uint8_t*>(w.direct) + cuda::RepackedQ8_0ScaleOffset(w.rows, w.cols),
           rows * static_cast<size_t>(w.cols / 32) * 2};
    } else {
      a.bytes = std::min<size_t>(prefetch_cap, static_cast<size_t>(w.rows) * w.row_bytes);
    }
    cudaError_t e = cudaEventRecord(prefetch_event_, s);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(prefetch_stream_, prefetch_event_, 0);
    if (e == cudaSuccess) e = cuda::L2Prefetch(a, b, prefetch_stream_);
    prefetched = prefetched || e == cudaSuccess;
    return e;
  };
  // The first product of layer il (what the layer boundary's mix and norm wait before).
  auto first_product = [&](int64_t il) -> const DMat* {
    if (il >= c.n_layers) return nullptr;
    const DLayer& l = m.layers[il];
    if (c.is_mla(il)) return &l.mla.q_a;
    return l.kda.in_proj.direct != nullptr ? &l.kda.in_proj : &l.kda.q;
  };
  int n_ckpt = 0;
  // Rows [row0, row0 + rows) of src (and of the bank) mixed into dst.
  auto mix = [&](const float* w, const float* src, float* dst, int64_t row0 = 0, int64_t rows = -1) -> cudaError_t {
    cuda::ResidualMixParams p;
    for (int i = 0; i < n_ckpt; ++i) p.bank[i] = m.bank[i] + row0 * H;
    p.n_ckpt = n_ckpt;
    p.bank_stride = H;
    p.x = src + row0 * H;
    p.w = w;
    p.out = dst + row0 * H;
    p.n_tokens = rows < 0 ? n : rows;
    p.n = H;
    p.x_stride = H;
    p.out_stride = H;
    p.eps = eps;
    p.workspace = m.mix_ws;
    return cuda::ResidualMix(p, s);
  };

  // Each residual step (the delta's add, the bank copy, the mix, the norm) as one launch
  // (AddMixNorm) instead of four or five (fused_residual: decode-sized steps; fused_prefill_residual:
  // prefill chunks); a layer's last delta (and the shared experts')
  // waits in pend0/pend1 for the next layer's first step, or the head's.
  const bool fuse_residual = H <= cuda::kAddMixNormMaxWidth && (grouped ? options_.fused_prefill_residual
                                                                         : options_.fused_residual);
  float* pend0 = nullptr;
  const float* pend1 = nullptr;
  // One rank, unfused residual steps: a layer's output product that runs on the direct or the
  // tensor-core GEMV adds into m.x in its epilogue (the same bits as the product into m.delta and
  // the AddInto launches).
  const bool epilogue_ok = options_.residual_epilogue && comm_ == nullptr && !fuse_residual;
  auto into_residual = [&](const DMat& w) {
    return epilogue_ok && TakesEpilogueProduct(w, n, exact, gemv_rows, mma);
  };
  auto residual_product = [&](const DMat& w, const float* in, int64_t in_stride, const float* add, bool accumulate) {
    return ResidualProduct(w, in, in_stride, m.x, H, n, add, accumulate, exact, gemv_rows, s, mma);
  };
  auto add_mix_norm = [&](const float* score_w, const float* norm_w, const float* d0, const float* d1, bool restart,
                          float* bank_out, float* y) -> cudaError_t {
    cuda::AddMixNormParams p;
    for (int i = 0; i < n_ckpt; ++i) p.bank[i] = m.bank[i];
    p.n_ckpt = n_ckpt;
    p.bank_stride = H;
    p.x = m.x;
    p.x_stride = H;
    p.d0 = d0;
    p.d1 = d1;
    p.d_stride = H;
    p.restart = restart;
    p.bank_out = bank_out;
    p.score_w = score_w;
    p.norm_w = norm_w;
    p.y = y;
    p.y_stride = H;
    p.n_tokens = n;
    p.n = H;
    p.eps = eps;
    return cuda::AddMixNorm(p, s);
  };

  K3_RETURN_IF_ERROR(mark(kEmbed));
  K3_CU(EmbedRows(m.token_embd.type, m.token_embd.data, m.token_embd.row_bytes, shard_.vocab_begin,
                  shard_.vocab_width, tokens_d, n, H, m.x, s));
  // All-reduce i of the step: the CPU engine's places, in place on the stream.
  auto reduce = [&](float* data, int64_t count) -> absl::Status {
    if (comm_ == nullptr) return absl::OkStatus();
    K3_RETURN_IF_ERROR(mark(kComm));
    return AllReduce(data, count);
  };
  K3_RETURN_IF_ERROR(reduce(m.x, n * H));  // the vocabulary bands' rows
  const size_t state_floats = nh * hd * hd, conv_floats = 3 * (taps - 1) * D;
  const size_t elem = options_.cache_f16 ? 2 : 4;
  const int64_t page_elems = c.n_mla_layers() * options_.page_size * c.mla_row;

  if (const DMat* first = first_product(0)) K3_CU(prefetch(*first));
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const DLayer& lw = m.layers[il];
    K3_RETURN_IF_ERROR(mark(kMixNorm));
    const bool banked = il % c.res_block_size == 0;
    if (fuse_residual) {
      K3_CU(add_mix_norm(lw.attn_res_score, lw.attn_norm, pend0, pend1, false, banked ? m.bank[n_ckpt] : nullptr, m.h));
      if (banked) ++n_ckpt;
    } else {
      K3_CU(mix(lw.attn_res_score, m.x, m.cur));
      if (banked) K3_CU(AddInto(m.bank[n_ckpt++], m.x, n * H, false, s));
      K3_CU(Rms(m.cur, m.h, lw.attn_norm, n, H, eps, s));
    }
    K3_CU(rounded_h());  // every write of h is followed by this
    const int64_t ki = c.kind_index(il);
    // Whether the layer's attention and FFN output products add into m.x themselves.
    const bool attn_added = into_residual(c.is_mla(il) ? lw.mla.out : lw.kda.out);
    const bool ffn_added = into_residual(c.is_dense(il) ? lw.dense.down : lw.moe.routed_up);
    if (c.is_mla(il)) {
      K3_RETURN_IF_ERROR(mark(kMla));
      const DMla& w = lw.mla;
      const int64_t qk = c.mla_qk_head_dim(), row = c.mla_row, lora = c.kv_lora_rank, vd = c.v_head_dim;
      const int64_t ql = c.q_lora_rank, nope = c.qk_nope_dim, rope = c.qk_rope_dim;
      void* layer_cache = static_cast<uint8_t*>(m.mla_cache) + ki * options_.page_size * row * elem;
      MlaAppendParams ap{m.mkv, row, w.kv_a_norm, layer_cache, options_.cache_f16, page_elems, row,
                         options_.page_size, bt_d, MP, lens_d, n, lora, row, eps};
      // Decode-sized steps: kv_a + the cache append, then the output gate's GEMV, on the side
      // stream beside the q chain (mid_event_: the cache rows are in before attention reads them).
      if (side) {
        K3_CU(fork_side());
        K3_CU(Prod(w.kv_a, m.h, H, m.mkv, row, n, side_stream_));
        K3_CU(MlaAppend(ap, side_stream_));
        K3_CU(cudaEventRecord(mid_event_, side_stream_));
        if (w.has_gate) K3_CU(Prod(w.gate, m.h, H, m.mgate, nh * vd, n, side_stream_));
      }
      K3_CU(Prod(w.q_a, m.h, H, m.qa, ql, n));
      K3_CU(Rms(m.qa, m.qa, w.q_a_norm, n, ql, eps, s));
      K3_CU(Prod(w.q_b, m.qa, ql, m.qf, nh * qk, n));
      K3_CU(prefetch(w.out));  // during the absorption, attention and the value products
      if (side) {
        K3_CU(cudaStreamWaitEvent(s, mid_event_, 0));
      } else {
        K3_CU(Prod(w.kv_a, m.h, H, m.mkv, row, n));
        K3_CU(MlaAppend(ap, s));
      }
      const bool prefill_run = MP == 0;
      if (prefill_run && MlaDecompressed(n) && v.kv_len > 0) {
        // Long prefill chunks: attention on decompressed keys and values, o_h straight into m.mo.
        cuda::MlaPrefillMhaParams mp;
        mp.q = m.qf;
        mp.q_row_stride = nh * qk;
        mp.cache = layer_cache;
        mp.cache_type = options_.cache_f16 ? cuda::MlaCacheType::kF16 : cuda::MlaCacheType::kF32;
        mp.page_stride = page_elems;
        mp.row_stride = row;
        mp.page_size = options_.page_size;
        mp.block_table = bt_d;
        mp.kv_len = v.kv_len;
        mp.seq_lens = lens_d;
        mp.n_rows = n;
        mp.n_heads = nh;
        mp.weight_type = w.k_b.type;
        mp.k_b = w.k_b.data;
        mp.k_b_head_bytes = w.k_b.matrix_stride;
        mp.v_b = w.v_b.data;
        mp.v_b_head_bytes = w.v_b.matrix_stride;
        mp.scale = 1.0f / std::sqrt(static_cast<float>(qk));
        mp.out = m.mo;
        mp.out_row_stride = nh * vd;
        mp.blas = m.blas.handle;
        mp.workspace = m.mha_ws;
        mp.workspace_bytes = m.mha_ws_bytes;
        K3_CU(cuda::MlaPrefillMha(mp, s));
      } else {
        if (per_head_gemm) {  // one GEMM per head over all rows
          for (int64_t hh = 0; hh < nh; ++hh) {
            K3_CU(Prod(Slice(w.k_b, hh), m.qf + hh * qk, nh * qk, m.qabs + hh * row, nh * row, n));
          }
        } else {
          K3_CU(GemvStack(w.k_b, nullptr, nh, m.qf, nh * qk, qk, m.qabs, nh * row, row, n, s));
        }
        K3_CU(cudaMemcpy2DAsync(m.qabs + lora, row * sizeof(float), m.qf + nope, qk * sizeof(float),
                                rope * sizeof(float), n * nh, cudaMemcpyDeviceToDevice, s));
        cuda::MlaDecodeParams dp;
        dp.q = m.qabs;
        dp.q_seq_stride = nh * row;
        dp.cache = layer_cache;
        dp.cache_type = options_.cache_f16 ? cuda::MlaCacheType::kF16 : cuda::MlaCacheType::kF32;
        dp.page_stride = page_elems;
        dp.row_stride = row;
        dp.page_size = options_.page_size;
        dp.block_table = bt_d;
        dp.block_table_stride = MP;
        dp.seq_lens = lens_d;
        dp.n_seqs = n;
        dp.n_heads = nh;
        dp.row_width = row;
        dp.value_width = lora;
        dp.scale = 1.0f / std::sqrt(static_cast<float>(qk));
        dp.out = m.lat;
        dp.out_seq_stride = nh * lora;
        dp.n_splits = cuda::MlaDecodeSplits(n, nh, bucket);
        while (cuda::MlaDecodeWorkspaceFloats(n, nh, lora, dp.n_splits) > m.mla_ws_floats && dp.n_splits > 1)
          --dp.n_splits;
        dp.workspace = m.mla_ws;
        // Flash attention on tensor cores over (row, head) pairs, f16 operands: a prefill chunk (one
        // sequence, one block table) of more than 16 rows, and with tc_mla_decode every step but the
        // exact prefill's. The per-row kernel (MlaDecode) is the exact path.
        const bool tc_attention =
            prefill_run ? (grouped || (options_.tc_mla_decode && !exact)) : options_.tc_mla_decode;
        if (tc_attention) {
          cuda::MlaPrefillParams pp;
          pp.q_row_stride = nh * row;
          pp.cache = layer_cache;
          pp.cache_type = dp.cache_type;
          pp.page_stride = page_elems;
          pp.row_stride = row;
          pp.page_size = options_.page_size;
          pp.n_heads = nh;
          pp.row_width = row;
          pp.value_width = lora;
          pp.max_len = bucket;
          pp.scale = dp.scale;
          pp.out_row_stride = nh * lora;
          pp.workspace = m.mla_ws;
          pp.wgmma = options_.wgmma_mla;
          // A run is one launch. A decode step is one launch of all its sequences (one row each, its
          // own block table) on an f16 cache, one launch per sequence on an f32 one (whose f16 copy
          // is of one sequence).
          const bool batched = !prefill_run && pp.cache_type == cuda::MlaCacheType::kF16;
          const int64_t launches = prefill_run || batched ? 1 : v.n_seqs, rows = prefill_run ? n : 1;
          pp.n_seqs = batched ? v.n_seqs : 1;
          pp.q_seq_stride = nh * row;
          pp.out_seq_stride = nh * lora;
          pp.block_table_stride = MP;
          for (int64_t i = 0; i < launches; ++i) {
            pp.q = m.qabs + i * nh * row;
            pp.block_table = bt_d + i * MP;
            pp.seq_lens = lens_d + i;
            pp.n_rows = rows;
            pp.out = m.lat + i * nh * lora;
            pp.n_splits = cuda::MlaPrefillSplits(rows, nh, bucket, pp.n_seqs);
            while (pp.n_splits > 1 && cuda::MlaPrefillWorkspaceBytes(pp.cache_type, bucket, pp.n_seqs * rows, nh, row,
                                                                     lora, pp.n_splits) > 4 * m.mla_ws_floats) {
              --pp.n_splits;
            }
            K3_CU(cuda::MlaPrefill(pp, s));
          }
        } else {
          K3_CU(cuda::MlaDecode(dp, s));
        }
        if (per_head_gemm) {
          for (int64_t hh = 0; hh < nh; ++hh) {
            K3_CU(Prod(Slice(w.v_b, hh), m.lat + hh * lora, nh * lora, m.mo + hh * vd, nh * vd, n));
          }
        } else {
          K3_CU(GemvStack(w.v_b, nullptr, nh, m.lat, nh * lora, lora, m.mo, nh * vd, vd, n, s));
        }
      }
      if (side) K3_CU(join_side());  // the gate (nothing else went to the side stream since)
      if (w.has_gate) {
        if (!side) K3_CU(Prod(w.gate, m.h, H, m.mgate, nh * vd, n));
        cuda::SigmoidGateMulParams gp{m.mo, m.mgate, n, nh * vd, nh * vd, nh * vd};
        K3_CU(cuda::SigmoidGateMul(gp, s));
      }
      if (attn_added) {  // x (+)= out·o; a banked layer restarts the stream
        K3_CU(residual_product(w.out, m.mo, nh * vd, nullptr, !banked));
      } else {
        K3_CU(Prod(w.out, m.mo, nh * vd, m.delta, H, n));
      }
    } else {
      K3_RETURN_IF_ERROR(mark(kKda));
      const DKda& w = lw.kda;
      const DMat* mats[3] = {&w.q, &w.k, &w.v};
      const float* convw[3] = {w.conv_q, w.conv_k, w.conv_v};
      float* proj[3] = {m.pq, m.pk, m.pv};
      float* outs[3] = {m.kq, m.kk, m.kv_};
      float* hist = m.conv_hist + ki * options_.max_seqs * conv_floats;
      // GEMV-sized steps read four projections of m.h (q | k | v | g) in one launch.
      // The stack has only its direct form: steps the GEMV or the tensor-core GEMV takes.
      const bool stacked = w.in_proj.direct != nullptr && !grouped;
      const int64_t Wp = w.in_proj.rows;
      // The gate (f_a, f_b) and beta chains read only m.h: in decode-sized steps they run on the
      // side stream while the q|k|v|g GEMV and the convs run here (joined before KdaDecode).
      auto gate_and_beta = [&](cudaStream_t st) -> cudaError_t {
        cudaError_t e = Prod(w.f_a, m.h, H, m.fa, hd, n, st);
        if (e == cudaSuccess) e = Prod(w.f_b, m.fa, hd, m.g, D, n, st);
        cuda::KdaGateParams gp{m.g, w.dt_bias, w.a, m.g, n, nh, hd, D, D, c.has_gate_lower_bound, c.gate_lower_bound};
        if (e == cudaSuccess) e = cuda::KdaGate(gp, st);
        if (e == cudaSuccess) e = Prod(w.beta, m.h, H, m.beta, nh, n, st);
        cuda::SigmoidParams sp{m.beta, m.beta, n * nh};
        if (e == cudaSuccess) e = cuda::Sigmoid(sp, st);
        return e;
      };
      if (side) {
        K3_CU(fork_side());
        K3_CU(gate_and_beta(side_stream_));
      }
      if (stacked) K3_CU(Prod(w.in_proj, m.h, H, m.in_proj, Wp, n));
      K3_CU(prefetch(w.out));  // during the convs, the recurrence and the gated norm
      // One token per sequence: the three convolutions and the L2 norms of q and k in one launch
      // (bit-identical to the five below).
      const bool conv_decode = v.run == 1 && hd <= cuda::kShortConvDecodeMaxGroup;
      if (conv_decode) {
        cuda::ShortConvDecodeParams cp;
        for (int which = 0; which < 3; ++which) {
          if (!stacked) K3_CU(Prod(*mats[which], m.h, H, proj[which], D, n));
          cp.weight[which] = convw[which];
          cp.history[which] = hist + which * (taps - 1) * D;
          cp.in[which] = stacked ? m.in_proj + which * D : proj[which];
          cp.out[which] = outs[which];
          cp.l2[which] = which < 2;
        }
        cp.history_slot_stride = static_cast<int64_t>(conv_floats);
        cp.slots = slots_d;
        cp.in_stride = stacked ? Wp : D;
        cp.out_stride = D;
        cp.n_seqs = v.n_seqs;
        cp.channels = D;
        cp.group_width = hd;
        cp.taps = taps;
        cp.eps = eps;
        K3_CU(cuda::ShortConvSiluDecode(cp, s));
      }
      for (int which = 0; which < 3 && !conv_decode; ++which) {
        if (!stacked) K3_CU(Prod(*mats[which], m.h, H, proj[which], D, n));
        cuda::ShortConvParams cp;
        cp.weight = convw[which];
        cp.history = hist + which * (taps - 1) * D;
        cp.history_slot_stride = static_cast<int64_t>(conv_floats);
        cp.slots = slots_d;
        cp.in = stacked ? m.in_proj + which * D : proj[which];
        cp.out = outs[which];
        cp.n_seqs = v.n_seqs;
        cp.n_tokens = v.run;
        cp.channels = D;
        cp.taps = taps;
        cp.in_stride = stacked ? Wp : D;
        cp.out_stride = D;
        K3_CU(cuda::ShortConvSilu(cp, s));
      }
      if (!conv_decode) {
        K3_CU(Rms(m.kq, m.kq, nullptr, n, hd, eps, s, nh, nullptr, cuda::NormKind::kL2));
        K3_CU(Rms(m.kk, m.kk, nullptr, n, hd, eps, s, nh, nullptr, cuda::NormKind::kL2));
      }
      if (side) {
        K3_CU(join_side());
      } else {
        K3_CU(gate_and_beta(s));
      }
      cuda::KdaDecodeParams kp;
      kp.state = m.kda_state + ki * options_.max_seqs * state_floats;
      kp.state_slot_stride = static_cast<int64_t>(state_floats);
      kp.slots = slots_d;
      kp.q = m.kq;
      kp.k = m.kk;
      kp.g = m.g;
      kp.v = m.kv_;
      kp.beta = m.beta;
      kp.out = m.o;
      kp.n_seqs = v.n_seqs;
      kp.n_tokens = v.run;
      kp.n_heads = nh;
      kp.dk = hd;
      kp.dv = hd;
      kp.qk_stride = D;
      kp.v_stride = D;
      kp.beta_stride = nh;
      kp.out_stride = D;
      kp.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      kp.chunked = options_.chunked_kda && !exact && v.run > 1 && c.has_gate_lower_bound &&
                   c.gate_lower_bound >= -cuda::kKdaChunkedMaxDecay;
      kp.pipelined = options_.pipelined_kda;
      kp.split_chains = options_.split_kda_chains;
      K3_CU(cuda::KdaDecode(kp, s));
      if (!stacked) K3_CU(Prod(w.g, m.h, H, m.gp, D, n));
      K3_CU(Rms(m.o, m.o, w.norm, n, hd, eps, s, nh, stacked ? m.in_proj + 3 * D : m.gp, cuda::NormKind::kRms,
                stacked ? Wp : 0));
      if (attn_added) {
        K3_CU(residual_product(w.out, m.o, D, nullptr, !banked));
      } else {
        K3_CU(Prod(w.out, m.o, D, m.delta, H, n));
      }
    }
    if (!attn_added) K3_RETURN_IF_ERROR(reduce(m.delta, n * H));  // the heads' partial sums
    K3_RETURN_IF_ERROR(mark(kMixNorm));
    if (fuse_residual) {  // a banked layer restarts the stream
      K3_CU(add_mix_norm(lw.ffn_res_score, lw.ffn_norm, m.delta, nullptr, banked, nullptr, m.h));
    } else {
      if (!attn_added) K3_CU(AddInto(m.x, m.delta, n * H, !banked, s));
      K3_CU(mix(lw.ffn_res_score, m.x, m.cur));
      K3_CU(Rms(m.cur, m.h, lw.ffn_norm, n, H, eps, s));
    }
    K3_CU(rounded_h());
    if (c.is_dense(il)) {
      K3_RETURN_IF_ERROR(mark(kDense));
      const DDense& w = lw.dense;
      const int64_t Fd = w.gate.rows;
      K3_CU(Prod(w.gate, m.h, H, m.dg, Fd, n));
      K3_CU(Prod(w.up, m.h, H, m.du, Fd, n));
      K3_CU(SituInto(m.dg, m.du, n, Fd, c, s));
      if (ffn_added) {
        K3_CU(residual_product(w.down, m.dg, Fd, nullptr, true));
      } else {
        K3_CU(Prod(w.down, m.dg, Fd, m.delta, H, n));
        K3_RETURN_IF_ERROR(reduce(m.delta, n * H));  // the FFN bands' partials
      }
    } else {
      K3_RETURN_IF_ERROR(mark(kMoe));
      const DMoe& w = lw.moe;
      const int64_t E = c.n_experts, K = c.n_experts_used, L = c.expert_latent, Fw = w.gate_exps.rows;
      // Decode-sized steps: the latent down-projection, then the shared experts, on the side
      // stream, concurrent with the router and routing, then the routed experts (disjoint buffers;
      // their GEMVs take no workspace). Larger steps keep one stream: their GEMMs share the GEMM
      // workspace.
      if (side) {
        K3_CU(fork_side());
        K3_CU(Prod(w.routed_down, m.h, H, m.r, L, n, side_stream_));
        K3_CU(cudaEventRecord(mid_event_, side_stream_));
        if (w.has_shared) K3_CU(SharedExperts(w, m.h, n, m.reduce + n * L, side_stream_));
      }
      K3_CU(ExactProduct(w.router, m.h, H, m.rlogits, E, n, gws, s, options_.tf32x3_router));
      cuda::MoeRouterParams rp;
      rp.logits = m.rlogits;
      rp.logits_stride = E;
      rp.selection_bias = w.selection_bias;
      rp.n_tokens = n;
      rp.n_experts = E;
      rp.k = K;
      rp.sigmoid = c.gating == model::GatingFunc::kSigmoid;
      rp.normalize = c.expert_weights_norm;
      rp.scale = c.expert_weights_scale;
      rp.ids = m.ids;
      rp.weights = m.wts;
      K3_CU(cuda::MoeRoute(rp, s));
      if (side) {
        K3_CU(cudaStreamWaitEvent(s, mid_event_, 0));  // m.r
      } else {
        K3_CU(Prod(w.routed_down, m.h, H, m.r, L, n));
      }
      float* mm = m.reduce;
      float* sh = m.reduce + n * L;
      const int64_t El = shard_.n_experts;
      // (token, choice) pairs grouped by local expert: position p runs over expert 0's pairs, ...
      auto group_tokens = [&](int32_t pass_rows) {
        cuda::MoeGroupParams gp;
        gp.ids = m.ids;
        gp.n_tokens = n;
        gp.k = K;
        gp.n_experts = El;
        gp.expert_begin = static_cast<int32_t>(shard_.expert_begin);
        gp.group_offsets = m.group_offsets;
        gp.x_rows = m.group_rows;
        gp.slot_of = m.group_slot;
        gp.workspace = m.group_ws;
        gp.pass_rows = pass_rows;
        gp.n_passes = m.pass_count;
        gp.pass_mat = m.pass_mat;
        gp.pass_row0 = m.pass_row0;
        gp.pass_n = m.pass_n;
        return cuda::MoeGroupTokens(gp, s);
      };
      auto combine_grouped = [&](bool choice_order) {
        cuda::MoeCombineParams cp;
        cp.y = m.ye;
        cp.y_stride = L;
        cp.slot_of = m.group_slot;
        cp.weights = m.wts;
        cp.n_tokens = n;
        cp.k = K;
        cp.cols = L;
        cp.out = mm;
        cp.out_stride = L;
        cp.choice_order = choice_order;
        return cuda::MoeCombineGrouped(cp, s);
      };
      // Decode steps of a few rows: the pairs grouped into passes of two positions of one expert
      // on the grouped GEMV (each expert's rows decoded once per pass). One-row steps too where this
      // rank holds only some experts: the per-pair GEMVs would run all K pairs, another rank's
      // experts as local expert 0 with weight 0 (LocalExperts), so ~K·(1 - 1/ranks) products for
      // nothing; the passes hold this rank's pairs only.
      const bool all_experts_here = shard_.expert_begin == 0 && shard_.n_experts == E;
      const bool rows_grouped = !moe_grouped && (n > 1 || !all_experts_here) && options_.int8_expert_x &&
                                options_.grouped_expert_gemv &&
                                m.group_offsets != nullptr &&
                                GemvStackGroupedSupports(w.gate_exps, w.up_exps, w.down_exps, m.r, m.ge);
      if (moe_grouped) {
        // Many rows: (token, choice) pairs grouped by local expert, each expert's weights read
        // once for all its rows (grouped tensor-core GEMMs), then a weighted combine per token.
        K3_CU(group_tokens(0));
        // Fused, situ may go straight to f16 for the down product's wgmma kernel, in m.ue (up's
        // f32 output, which the fused launch does not need; [n·K][Fw] floats hold the halves).
        bool half = false;
        K3_CU(GroupedGateUpSitu(w.gate_exps, w.up_exps, El, m.group_offsets, m.group_rows, n, m.r, L, m.ge, m.ue,
                                n * K, c, gws, s, options_.fused_gate_up,
                                GroupedTakesHalfX(w.down_exps) ? m.ue : nullptr, &half));
        K3_CU(GroupedProduct(w.down_exps, El, m.group_offsets, nullptr, 0, m.ge, Fw, m.ye, L, n * K, gws, s,
                             half ? m.ue : nullptr));
        K3_CU(combine_grouped(false));
      } else if (rows_grouped) {
        K3_CU(group_tokens(cuda::kQuantGemvPassRows));
        cuda::QuantGemvPasses g{m.pass_count, m.pass_mat, m.pass_row0, m.pass_n, m.group_rows, n * K};
        const bool fuse_gate_up = options_.fused_gate_up && n <= kFusedGateUpMaxRows;
        K3_CU(GemvStackGateUpGrouped(w.gate_exps, w.up_exps, g, m.r, L, m.ge, m.ue, Fw, n * K, c, s, fuse_gate_up));
        K3_CU(prefetch(w.routed_up));  // during the down-products, the combine and the norm
        g.x_rows = nullptr;  // the down products' x: the gate|up rows, by position
        K3_CU(GemvStackGrouped(w.down_exps, g, m.ge, Fw, m.ye, L, s));
        K3_CU(combine_grouped(true));  // the per-pair combine's order and arithmetic: its bits
      } else {
        // A rank holding every expert uses the router's ids and weights as they are; one token's
        // (token, expert) pairs all read its row of m.r (a shared x: no copy per pair).
        const int32_t* ids_l = all_experts_here ? m.ids : m.idloc;
        const float* wts_l = all_experts_here ? m.wts : m.wloc;
        if (!all_experts_here) {
          K3_CU(LocalExperts(m.ids, m.wts, n * K, shard_.expert_begin, shard_.n_experts, m.idloc, m.wloc, s));
        }
        const float* xe = n == 1 ? m.r : m.xe;
        const int64_t xe_mat = n == 1 ? 0 : L;
        if (n > 1) K3_CU(ExpandRows(m.r, n, K, L, m.xe, s));
        const bool i8 = options_.int8_expert_x;
        // The fused gate|up launch saves a launch and the Situ pass but puts the activation inside
        // the kernel's tile loop: a gain at batch 1, none at 16, a loss at 64 (H200, slice8).
        const bool fuse_gate_up = options_.fused_gate_up && n <= kFusedGateUpMaxRows;
        K3_CU(GemvStackGateUp(w.gate_exps, w.up_exps, ids_l, n * K, xe, L, xe_mat, m.ge, m.ue, Fw, Fw, c, s, i8,
                              fuse_gate_up));
        K3_CU(prefetch(w.routed_up));  // during the down-products, the combine and the norm
        K3_CU(GemvStack(w.down_exps, ids_l, n * K, m.ge, Fw, Fw, m.ye, L, L, 1, s, i8));
        K3_CU(CombineExperts(m.ye, wts_l, n, K, L, mm, s));
      }
      if (side) {
        K3_CU(join_side());
      } else if (w.has_shared) {
        K3_CU(SharedExperts(w, m.h, n, sh, s));
      }
      // [expert partials | shared partials] of the group in ONE all-reduce, before the routed norm.
      if (comm_ != nullptr) {
        K3_RETURN_IF_ERROR(reduce(m.reduce, n * (L + (w.has_shared ? H : 0))));
        K3_RETURN_IF_ERROR(mark(kMoe));
      }
      if (w.has_routed_norm) K3_CU(Rms(mm, mm, w.routed_norm, n, L, eps, s));
      if (ffn_added) {  // x += up·m + shared
        K3_CU(residual_product(w.routed_up, mm, L, w.has_shared ? sh : nullptr, true));
      } else {
        K3_CU(Prod(w.routed_up, mm, L, m.delta, H, n));
        if (fuse_residual) {
          pend1 = w.has_shared ? sh : nullptr;
        } else if (w.has_shared) {
          K3_CU(AddInto(m.delta, sh, n * H, true, s));
        }
      }
    }
    if (const DMat* next = first_product(il + 1)) K3_CU(prefetch(*next));  // during the mix and norm
    K3_RETURN_IF_ERROR(mark(kMixNorm));
    if (fuse_residual) {
      pend0 = m.delta;
      if (c.is_dense(il)) pend1 = nullptr;
    } else if (!ffn_added) {
      K3_CU(AddInto(m.x, m.delta, n * H, true, s));
    }
  }
  K3_RETURN_IF_ERROR(mark(kHead));
  // Only the rows whose logits are wanted (a prefill chunk: usually its last).
  const int64_t hr = v.head_rows;
  if (fuse_residual && hr == n) {
    K3_CU(add_mix_norm(m.output_res_score, m.output_norm, pend0, pend1, false, nullptr, m.y));
    K3_CU(HeadProd(m.y, hr));
  } else if (hr > 0) {
    if (pend0 != nullptr) {  // the last layer's delta(s), as the unfused path adds them: the head's rows only
      float* d0 = pend0 + v.head_row * H;
      if (pend1 != nullptr) K3_CU(AddInto(d0, pend1 + v.head_row * H, hr * H, true, s));
      K3_CU(AddInto(m.x + v.head_row * H, d0, hr * H, true, s));
    }
    float* yh = m.y + v.head_row * H;
    K3_CU(mix(m.output_res_score, m.x, m.y, v.head_row, hr));
    K3_CU(Rms(yh, yh, m.output_norm, hr, H, eps, s));
    K3_CU(HeadProd(yh, hr));
  }
  if (prefetched) {  // the prefetch stream back into s (a graph capture must end joined)
    K3_CU(cudaEventRecord(prefetch_join_, prefetch_stream_));
    K3_CU(cudaStreamWaitEvent(s, prefetch_join_, 0));
  }
  K3_RETURN_IF_ERROR(mark(kMarks));
  return absl::OkStatus();
}

absl::Status CudaEngine::LaunchDecode(std::span<const SeqId> ids, std::span<const int32_t> tokens) {
  StepView view;
  K3_RETURN_IF_ERROR(Prepare(ids, tokens, &view));
  const int64_t n = view.n;
  if (options_.use_graphs) {
    auto key = std::make_pair(n, view.bucket);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      K3_CU(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      absl::Status st = Enqueue(view, nullptr);
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
      K3_RETURN_IF_ERROR(st);
      K3_CU(end);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      K3_CU(inst);
      it = graphs_.emplace(key, exec).first;
    }
    K3_CU(cudaGraphLaunch(it->second, stream_));
  } else {
    K3_RETURN_IF_ERROR(Enqueue(view, nullptr));
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::SyncStream() {
  K3_CU(cudaStreamSynchronize(stream_));
  return comm_ != nullptr ? comm_->Health() : absl::OkStatus();
}

absl::Status CudaEngine::Decode(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* host_logits) {
  K3_RETURN_IF_ERROR(LaunchDecode(ids, tokens));
  const size_t n = ids.size(), band = static_cast<size_t>(shard_.vocab_width);
  if (host_logits != nullptr) {
    K3_CU(cudaMemcpyAsync(impl_->logits_h, impl_->logits, n * band * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }
  K3_RETURN_IF_ERROR(SyncStream());
  if (host_logits != nullptr) std::memcpy(host_logits, impl_->logits_h, n * band * sizeof(float));
  Commit(ids);
  return absl::OkStatus();
}

absl::StatusOr<StepProfile> CudaEngine::DecodeProfiled(std::span<const SeqId> ids, std::span<const int32_t> tokens) {
  StepView view;
  K3_RETURN_IF_ERROR(Prepare(ids, tokens, &view));
  std::vector<std::pair<int, cudaEvent_t>> marks;
  absl::Status st = Enqueue(view, &marks);
  K3_RETURN_IF_ERROR(SyncStream());
  K3_ASSIGN_OR_RETURN(StepProfile prof, Collect(marks));
  K3_RETURN_IF_ERROR(st);
  Commit(ids);
  return prof;
}

absl::StatusOr<StepProfile> CudaEngine::Collect(std::vector<std::pair<int, cudaEvent_t>>& marks) {
  StepProfile prof;
  double* slot[kMarks] = {&prof.embed, &prof.kda, &prof.mla, &prof.dense, &prof.moe, &prof.mix_norm, &prof.head, &prof.comm};
  for (size_t i = 0; i + 1 < marks.size(); ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, marks[i].second, marks[i + 1].second);
    if (marks[i].first < kMarks) *slot[marks[i].first] += ms;
    prof.total += ms;
  }
  for (auto& [k, ev] : marks) cudaEventDestroy(ev);
  marks.clear();
  return prof;
}

absl::Status CudaEngine::Prefill(SeqId id, std::span<const int32_t> tokens, bool all_logits, float* host_logits,
                                 StepProfile* profile) {
  if (tokens.empty()) return absl::InvalidArgumentError("empty prefill");
  if (!seqs_.contains(id)) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  if (Length(id) + static_cast<int64_t>(tokens.size()) > options_.max_context) {
    return absl::InvalidArgumentError("context length exceeded");
  }
  const int64_t total = static_cast<int64_t>(tokens.size()), band = shard_.vocab_width;
  if (profile != nullptr) *profile = StepProfile{};
  for (int64_t t0 = 0; t0 < total; t0 += options_.prefill_chunk) {
    const int64_t n = std::min(options_.prefill_chunk, total - t0);
    const bool last = t0 + n == total;
    StepView view;
    K3_RETURN_IF_ERROR(PreparePrefill(id, tokens.subspan(t0, n), &view));
    // Logits: every row (all_logits), else the prompt's last row only (none for earlier chunks).
    view.head_row = all_logits ? 0 : n - 1;
    view.head_rows = all_logits ? n : (last ? 1 : 0);
    std::vector<std::pair<int, cudaEvent_t>> marks;
    absl::Status st = Enqueue(view, profile != nullptr ? &marks : nullptr);
    if (st.ok() && host_logits != nullptr && view.head_rows > 0) {
      float* dst = host_logits + (all_logits ? t0 : 0) * band;
      st = CudaStatus(cudaMemcpyAsync(dst, impl_->logits, view.head_rows * band * sizeof(float), cudaMemcpyDeviceToHost, stream_),
              "logits download");
    }
    K3_RETURN_IF_ERROR(SyncStream());  // also frees the pinned metadata for the next chunk
    if (profile != nullptr) {
      K3_ASSIGN_OR_RETURN(StepProfile p, Collect(marks));
      profile->Add(p);
    }
    K3_RETURN_IF_ERROR(st);
    seqs_[id].length += n;
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::CheckBatch(std::span<const SeqInput> inputs) const {
  if (inputs.empty()) return absl::InvalidArgumentError("empty batch");
  std::unordered_set<SeqId> seen;
  for (const SeqInput& in : inputs) {
    if (!seqs_.contains(in.seq)) return absl::NotFoundError(absl::StrCat("unknown sequence ", in.seq));
    if (!seen.insert(in.seq).second) return absl::InvalidArgumentError("a sequence appears twice in one batch");
    if (in.tokens.empty()) return absl::InvalidArgumentError("empty run");
    if (Length(in.seq) + static_cast<int64_t>(in.tokens.size()) > options_.max_context) {
      return absl::InvalidArgumentError("context length exceeded");
    }
    for (int32_t t : in.tokens) {
      if (t < 0 || t >= config_.vocab) return absl::InvalidArgumentError("token id outside the vocabulary");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> CudaEngine::Forward(std::span<const SeqInput> inputs) {
  K3_RETURN_IF_ERROR(CheckBatch(inputs));
  ForwardResult result;
  result.vocab = config_.vocab;
  result.band_begin = shard_.vocab_begin;
  result.band_width = shard_.vocab_width;
  const int64_t band = shard_.vocab_width;
  int64_t rows = 0;
  for (const SeqInput& in : inputs) {
    result.first_row.push_back(rows);
    const int64_t nr = in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
    result.n_rows.push_back(nr);
    rows += nr;
  }
  result.logits.resize(static_cast<size_t>(rows) * band);
  // Runs of several tokens: chunked prefill, one sequence at a time. Single tokens: decode steps
  // of up to max_batch rows.
  std::vector<SeqId> ids;
  std::vector<int32_t> toks;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SeqInput& in = inputs[i];
    if (in.tokens.size() == 1) {
      ids.push_back(in.seq);
      toks.push_back(in.tokens[0]);
      which.push_back(i);
      continue;
    }
    K3_RETURN_IF_ERROR(Prefill(in.seq, in.tokens, in.all_logits,
                               result.logits.data() + result.first_row[i] * band));
  }
  std::vector<float> step_logits(static_cast<size_t>(options_.max_batch) * band);
  for (size_t b0 = 0; b0 < ids.size(); b0 += options_.max_batch) {
    const size_t nb = std::min<size_t>(options_.max_batch, ids.size() - b0);
    K3_RETURN_IF_ERROR(Decode(std::span<const SeqId>(ids.data() + b0, nb),
                              std::span<const int32_t>(toks.data() + b0, nb), step_logits.data()));
    for (size_t j = 0; j < nb; ++j) {
      const size_t i = which[b0 + j];
      std::copy(step_logits.data() + j * band, step_logits.data() + (j + 1) * band,
                result.logits.data() + result.first_row[i] * band);
    }
  }
  return result;
}

absl::Status CudaEngine::DownloadSummaries(int64_t rows, int32_t n, std::span<float* const> full) {
  Impl& m = *impl_;
  const int64_t band = shard_.vocab_width;
  cuda::BandTopParams p;
  p.logits = m.logits;
  p.logits_stride = band;
  p.rows = rows;
  p.band_width = band;
  p.band_begin = shard_.vocab_begin;
  p.n = n;
  p.top = m.top_d;
  p.logsumexp = m.lse_d;
  p.workspace = m.band_ws;
  p.workspace_bytes = m.band_ws_bytes;
  K3_CU(cuda::BandTop(p, stream_));
  K3_CU(cudaMemcpyAsync(m.top_h, m.top_d, rows * n * sizeof(cuda::BandTopCandidate), cudaMemcpyDeviceToHost, stream_));
  K3_CU(cudaMemcpyAsync(m.lse_h, m.lse_d, rows * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  for (int64_t j = 0; j < rows; ++j) {
    if (full[j] != nullptr) {
      K3_CU(cudaMemcpyAsync(full[j], m.logits + j * band, band * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    }
  }
  K3_RETURN_IF_ERROR(SyncStream());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BandSummary>> CudaEngine::ForwardSummaries(std::span<const SeqInput> inputs,
                                                                     std::span<const BandRequest> requests) {
  if (requests.size() != inputs.size()) return absl::InvalidArgumentError("one band request per input");
  for (const BandRequest& r : requests) {
    if (r.top_n < 1 || r.top_n > cuda::kBandTopMaxN) {
      return absl::InvalidArgumentError(absl::StrCat("top_n ", r.top_n, " outside 1..", cuda::kBandTopMaxN));
    }
  }
  K3_RETURN_IF_ERROR(CheckBatch(inputs));
  const int64_t band = shard_.vocab_width;
  std::vector<BandSummary> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t rows = inputs[i].all_logits ? static_cast<int64_t>(inputs[i].tokens.size()) : 1;
    out[i].top.resize(rows * requests[i].top_n);
    out[i].logsumexp.resize(rows);
    if (requests[i].full_logits) out[i].logits.resize(rows * band);
  }
  // Row j of the last download (n candidates each) is row `row` of input i.
  auto take = [&](int64_t j, int32_t n, size_t i, int64_t row) {
    const int32_t k = requests[i].top_n;  // a prefix of the n best is the k best
    std::copy(impl_->top_h + j * n, impl_->top_h + j * n + k, out[i].top.begin() + row * k);
    out[i].logsumexp[row] = impl_->lse_h[j];
  };
  // Runs of several tokens: prefill. With all_logits, one chunk per Prefill call, summarized
  // before the next chunk's rows overwrite it; otherwise the last row of the run.
  std::vector<size_t> single;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SeqInput& in = inputs[i];
    if (in.tokens.size() == 1) {
      single.push_back(i);
      continue;
    }
    const int64_t total = static_cast<int64_t>(in.tokens.size());
    const int64_t chunk = in.all_logits ? options_.prefill_chunk : total;
    for (int64_t t0 = 0; t0 < total; t0 += chunk) {
      const int64_t nt = std::min(chunk, total - t0);
      K3_RETURN_IF_ERROR(Prefill(in.seq, in.tokens.subspan(t0, nt), in.all_logits, nullptr));
      const int64_t rows = in.all_logits ? nt : 1, first = in.all_logits ? t0 : 0;
      std::vector<float*> full(rows, nullptr);
      for (int64_t j = 0; j < rows && requests[i].full_logits; ++j) full[j] = out[i].logits.data() + (first + j) * band;
      K3_RETURN_IF_ERROR(DownloadSummaries(rows, requests[i].top_n, full));
      for (int64_t j = 0; j < rows; ++j) take(j, requests[i].top_n, i, first + j);
    }
  }
  // Single tokens: decode steps of up to max_batch rows, summarized at the step's largest top_n.
  for (size_t b0 = 0; b0 < single.size(); b0 += options_.max_batch) {
    const size_t nb = std::min<size_t>(options_.max_batch, single.size() - b0);
    std::vector<SeqId> ids;
    std::vector<int32_t> toks;
    std::vector<float*> full;
    int32_t n = 1;
    for (size_t j = 0; j < nb; ++j) {
      const size_t i = single[b0 + j];
      ids.push_back(inputs[i].seq);
      toks.push_back(inputs[i].tokens[0]);
      full.push_back(requests[i].full_logits ? out[i].logits.data() : nullptr);
      n = std::max(n, requests[i].top_n);
    }
    K3_RETURN_IF_ERROR(LaunchDecode(ids, toks));
    K3_RETURN_IF_ERROR(DownloadSummaries(static_cast<int64_t>(nb), n, full));
    Commit(ids);
    for (size_t j = 0; j < nb; ++j) take(static_cast<int64_t>(j), n, single[b0 + j], 0);
  }
  return out;
}

}  // namespace k3::engine_cuda
