// The kimi-k3 forward pass on one GPU (spec section 4), decode-first: every Forward step runs
// one token per sequence through the k3_kernels_cuda kernels, layer by layer, with the same math
// as the CPU engine (worker/engine). Per-sequence state lives on the device: MLA cache pages
// (f32 or f16) with block tables, KDA recurrent state and short-conv history in slots (the
// semantics of engine::SequenceCache, without forks). A step takes no host synchronization
// until its logits are copied back; its per-step metadata (tokens, lengths, slots, block
// tables) is uploaded into fixed device arrays first, so the step is captured once per
// (batch size, MLA split bucket) as a CUDA graph and replayed.
// Prompts run as prefill chunks (up to prefill_chunk tokens of one sequence per forward): every
// row of the chunk goes through the same layer code at once, the KDA recurrence runs the chunk's
// tokens in order inside one kernel (state in registers), MLA attends each row over its own
// causal length through the same paged cache, and the big products take the many-token path.
//
// Several ranks (one GPU each): each binds its RankShard exactly as the CPU engine does (heads,
// FFN and shared-expert bands, expert groups x FFN bands, vocabulary band) and the all-reduces
// sit where the CPU engine has them (embedding band; after each attention; dense FFN; the MoE's
// fused [latent partial | shared partial] before the routed norm): 1 + 2 x n_layers per step,
// enqueued in place on the step's stream through a device communicator (NCCL), so they are
// captured in the step's CUDA graph. Every rank must run the same steps in the same order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "kernels/cuda/band_top/band_top.h"
#include "kernels/quant/ggml_type.h"
#include "worker/engine/engine.h"
#include "worker/model/k3_config.h"
#include "worker/model/quant_mix.h"
#include "worker/model/shard_rules.h"

namespace k3::engine_cuda {

using engine::ForwardResult;
using engine::SeqId;
using engine::SeqInput;

struct CudaEngineOptions {
  model::RankPlan plan;       // this process is `rank` of plan.ranks
  int rank = 0;
  // Several ranks: a communicator over DEVICE memory that enqueues on `stream` (the NCCL one,
  // coll::MakeNcclCommunicator with NcclOptions{stream}); nullptr is valid for one rank only.
  coll::Communicator* comm = nullptr;
  // The stream every step runs on (the communicator's); nullptr: the engine makes its own.
  cudaStream_t stream = nullptr;
  int device = 0;             // CUDA device ordinal
  int64_t max_seqs = 8;       // KDA state slots
  int64_t max_batch = 8;      // rows of one decode step
  int64_t prefill_chunk = 512;  // tokens of one prefill forward; activation buffers hold
                                // max(max_batch, prefill_chunk) rows
  int64_t cache_tokens = 0;   // MLA cache capacity over all sequences; 0 = max_seqs x min(context, 64k)
  int64_t max_context = 0;    // longest sequence; 0 = min(context_length, cache_tokens)
  int64_t page_size = 64;
  // MLA cache rows in f16 (the reference's; half the bytes) instead of f32. The tensor-core MLA
  // attention (tc_mla_decode, prefill chunks) rounds the rows it reads to f16 anyway: over an f32
  // cache it first converts every row of the sequence to an f16 copy, each step (at 128k, 302 MB
  // read and 151 MB written per MLA layer). f32: the exact path (with tc_mla_decode off).
  bool cache_f16 = true;
  bool use_graphs = true;     // capture each step shape once and replay it
  // Steps of more than 16 rows (prefill chunks, large decode batches) run their products on
  // tensor cores (weights and activations rounded to f16, f32 accumulation: ~3e-4 relative per
  // product); exact_prefill keeps them on the f32 GEMV (exact up to summation order, slow).
  bool exact_prefill = false;
  // Prefill runs (more than one token per sequence) compute the KDA recurrence in chunks of 16
  // tokens on tensor cores (cuda::KdaChunked: 3xTF32, ~f32 accuracy; another summation order than
  // the token-by-token kernel) where the model's gate keeps every log decay >= -8 (K3: >= -5) and
  // not with exact_prefill. The default: on the golden model it stays within the bars of two fast
  // paths' summation orders (relL2 1.2e-3, top-1 0.995 against token by token); H100, real-width
  // 8-layer slice, PP4096: KDA (6 layers) 66.8 -> 59.7 ms, 16285 -> 16658 tokens/s
  // (bench/results/2026-12-07-chunked-kda-default-prefill-pp4096-decode-b1-b64-4k-k3slice8-ud-iq1s-
  // h100x1-bbc2b1a.md). Off: the token-by-token kernel.
  bool chunked_kda = true;
  // With chunked_kda, the chunked kernel software-pipelined (cuda::KdaDecodeParams::pipelined: the
  // next chunk's exponentials, A, Mq and T beside this chunk's state products; the same bits).
  // H100, slice8 PP4096, three alternating rounds: 17516 -> 17684 tok/s; the kernel 2.44-2.49 ->
  // 2.20-2.30 ms a layer (ncu) (bench/results/2026-12-07-pipelined-kda-fused-prefill-residual-*).
  // Off: the one-chunk-at-a-time kernel.
  bool pipelined_kda = true;
  // With chunked_kda, the chunked kernel's 3xTF32 products in three accumulators each
  // (cuda::KdaDecodeParams::split_chains: independent mma chains; another summation order). Built to
  // cut the kernel's fixed-latency stalls (session 50); not yet run on a GPU, so off.
  bool split_kda_chains = false;
  // Decode-sized products on the direct-load GEMV (kernels/cuda/quant_gemv/gemv_direct.h): Q8_0
  // matrices get a repacked copy at load (1.0625 bytes per weight more on the device; the block
  // layout stays for the GEMM and the expert stacks), F32/F16/BF16 are read as they are.
  bool direct_gemv = true;
  // Steps of more rows than this run their Q8_0 products (those with a direct form) on the
  // tensor-core GEMV (f16 operands, each weight read once per 16 rows; up to kMmaMaxRows rows, the
  // tile GEMM beyond) instead of f32 GEMV passes of up to 8 rows (from ~8 rows FMA-bound). H200,
  // slice8, int8 experts: LM head at batch 16 2.67 -> 0.82 ms, dense FFN 1.72 -> 0.54; with the
  // rest of bc25b6e batch 16 559.2 -> 834.8 tok/s. Batches of up to 8 keep the exact f32 GEMV. 1..16.
  int64_t dense_gemv_max_rows = 8;
  // Decode steps run MLA attention on tensor cores too (MlaPrefill, one launch of all sequences on an
  // f16 cache, one per sequence on an f32 one: q, cache rows and
  // softmax weights rounded to f16, ~1e-3 relative per output vector) instead of the exact f32
  // flash-decoding kernel (MlaDecode), which is compute-bound: MLA 3.1 ms per layer at 128k on an
  // H200 against 0.45; real-width slice, int8 experts: 4k, batch 1, 245.4 -> 257.3 tok/s; 8k,
  // batch 16, 469.4 -> 535.5. The default: on the golden model it stays within the exact path's bars (relL2 1.3e-4,
  // top-1 1.000; engine test TensorCoreMlaDecodeStaysClose). Off: the exact kernel.
  bool tc_mla_decode = true;
  // That tensor-core attention on Hopper's warpgroup instructions (MlaPrefillParams::wgmma: blocks
  // of 64 pairs, both products read from shared memory by wgmma; the same roundings, another
  // summation order), taken where it can be: an sm_90a build and K3's MLA widths (cache row 576,
  // kv_lora 512); the mma.sync kernel elsewhere and with this off. H100, 128k batch 1: the kernel
  // 166.5 -> 131.1 us, the step 266.5 -> 274.3 tok/s (kernels/cuda/README.md).
  bool wgmma_mla = true;
  // Decode steps' routed-expert products (IQ1_S) round their inputs to int8 per 32 values and
  // multiply in integers (QuantGemvParams::int8_x; ~2x faster expert GEMVs). Not exact: on the
  // golden model held to llama.cpp's closeness (which rounds every product's input so).
  bool int8_expert_x = false;
  // The routed experts' IQ1_S stacks held in their ternary form (2-bit fields g + 1,
  // kernels/cuda/quant_gemv/iq1s_ternary.h) instead of the ggml rows (made on the GPU at load, the
  // rows then given back), read by the int8-input decode GEMVs (per pair, gate|up, expert-grouped)
  // and the grouped tile GEMMs of prefill and large steps (the IQ1_S wgmma kernel): no grid lookups,
  // the same values, so the same logits bit for bit (engine test TernaryExpertsChangeNoValue);
  // 1.44x the experts' bytes. Needs int8_expert_x, no exact_prefill and the wgmma kernel (an sm_90
  // GPU, an sm_90a build): the paths that read only the ggml rows (f32-input GEMVs, the mma.sync
  // GEMM) are off then; Open refuses it otherwise. Measured (H100, 4 layers of the slice, session
  // 43): decode batch 1 unchanged, 64 +8%, PP4096 +3%; off by default.
  bool ternary_experts = false;
  // With int8_expert_x, the routed gate and up products and their activation of decode steps of
  // up to kFusedGateUpMaxRows (4) rows run as one launch (cuda::QuantGemvGateUpSitu: the same bits
  // as the two GEMVs and the Situ launch; H200, slice8, batch 1: 325.5 -> 332.8 tok/s with the L2
  // prefetch on against off; base 3.10 -> 3.03 ms without the prefetch). Prefill chunks' grouped
  // expert products likewise (cuda::QuantGemmGateUpSitu, the IQ1_S wgmma kernel's gate|up form:
  // the same bits; slice8 MoE layers at 8192 tokens 360.9 -> 356.7 ms). Off: three launches (the
  // A/B switch of the benchmarks).
  bool fused_gate_up = true;
  // With int8_expert_x, decode steps of 2..moe_gemv_max_rows rows group the (token, expert) pairs by
  // expert (MoeGroupTokens, cut into passes of two positions) and run the routed products on the
  // expert-grouped GEMV (cuda::QuantGemvGrouped: each expert's rows read and decoded once per pass
  // for both positions, each position's values those of its per-pair GEMV), then combine them in
  // choice order with the per-pair combine's arithmetic (the same logits: engine tests
  // GroupedExpertGemvMatchesPerPair and ...Past64Rows, passed on an H100 in session 37). H200,
  // slice8, 4k (session 36): batch 16 1219.9 -> 1254.4 tok/s. Off: one GEMV per (token, expert)
  // pair (k3_cuda_decode_bench --per-pair-experts).
  bool grouped_expert_gemv = true;
  // Steps of up to this many rows run the routed experts as GEMVs (one per (token, expert) pair, or
  // expert-grouped); larger ones group the pairs by expert for the tile GEMMs. -1: 256 where the
  // expert-grouped GEMV runs (int8_expert_x and grouped_expert_gemv: H100, slice8, 4k, MoE eager
  // 58.7 -> 36.3 ms at batch 128, 73.4 -> 67.0 at 256), else 64 (the per-pair GEMVs; H200, batch
  // 64: the grouped GEMMs took 59.5 ms of MoE per step where batch 16's per-pair GEMVs took 10.7 ms
  // for a quarter of the pairs). k3_cuda_decode_bench --moe-gemv-max-rows.
  int64_t moe_gemv_max_rows = -1;
  // Decode steps whose products take GEMMs (more than mma_max_rows rows) run the MLA per-head
  // absorption products (q·W_UK per head, then latent·W_UV) as one stacked GEMV launch over all
  // heads (GemvStack, passes of 16 rows: each head's weights read once per pass) up to this many
  // rows, and as one cuBLAS/tile GEMM per head (2 x n_heads launches per MLA layer) past it. H200,
  // slice8, batch 64 (27632a6): MLA 4.17 ms eager, mostly 192 per-head launches of 16 + 6.8 us;
  // H100, batch 128: 5.14 -> 3.42 ms stacked. k3_cuda_decode_bench --mla-head-gemv-max-rows.
  int64_t mla_head_gemv_max_rows = 128;
  // Decode steps' tensor-core GEMV (9..mma_max_rows rows) in its second form (cuda::QuantGemvMma
  // with QuantGemvDirectParams::mma_shared_x: x staged once per 4 warps in shared memory, the
  // columns split over a thread-block cluster, passes of up to 64 rows as 4 tiles of 16 sharing
  // each weight; the first form re-reads x from L2 per 32 rows, which at 16 tokens outweighs the
  // weights, and passes 16 rows). The same products, the sums in another order (engine test
  // MmaSharedXAtLeastAsCloseAsLlamaCpp). H200, slice8, 4k: batch 16 +3.8%, batch 32 +4.7% with
  // passes of 16; H100, batch 32 with one pass of 32: 1092.0 -> 1421.4 tok/s. Off:
  // k3_cuda_decode_bench --mma-per-warp-x.
  bool mma_shared_x = true;
  // Decode steps of more than 32 (kMmaMaxRows) and up to this many rows (<= 256) run their Q8_0
  // products on the tensor-core GEMV too (with mma_shared_x: passes of 64 rows, each weight read
  // and converted once per pass), the small other products on the f32 GEMV, and keep the side
  // streams and the stacked KDA projections; larger steps take cuBLAS / the tile GEMM, whose f16
  // path costs ~5 bytes per weight (a decode pass writing f16 weights, then the GEMM reading them).
  // H100, slice8, batch 64: KDA layers 8.36 -> 5.70 ms eager, dense 1.68 -> 0.93; at 128 (two
  // passes) KDA 10.59 -> 11.41, hence 64 (engine test WideMmaDecodeStepsAtLeastAsCloseAsLlamaCpp).
  // k3_cuda_decode_bench --mma-max-rows.
  int64_t mma_max_rows = 64;
  // With mma_shared_x: each tensor-core GEMV first rounds its x to f16 A fragments once, into a
  // scratch (QuantGemvDirectParams::x_half), which its blocks copy by cp.async a chunk ahead, instead
  // of every block rounding its f32 x from L2 (H100, batch 64: the KDA q|k|v|g product 402 us against
  // an HBM floor of 112, ~700 MB of f32 x through L2 beside 374 MB of weights). The same values, the
  // same logits bit for bit (kernel test MmaSmallBatches, engine test MmaStagedXChangesNoValue).
  // H100, slice8, int8 experts, 4k, against off in one call (two rounds each): batch 16
  // 1152.7 / 1122.6 -> 1156.7 / 1166.0 tok/s, 32 1440.9 / 1352.9 -> 1476.7 / 1490.4, 64
  // 1752.1 / 1647.6 -> 1811.3 / 1816.5. k3_cuda_decode_bench --mma-unstaged-x turns it off.
  bool mma_staged_x = true;
  // Decode steps of up to 16 rows prefetch into L2 up to this many MiB of a product's weights
  // where HBM would otherwise idle before it: a KDA layer's output projection during the convs,
  // the recurrence and the gated norm; a MoE layer's latent up-projection during the expert
  // down-products and the combine; the next layer's first product during the residual mix and
  // norm. The prefetch (cuda::L2Prefetch) runs on its own stream and changes no value. 0: off.
  // H200, slice8, int8 experts, 4k, against off in one call: batch 1 325.5 -> 332.8 tok/s, batch
  // 16 1005 -> 1032-1043 (KDA layers 2.62 -> 2.28 ms in an eager step); 8 and 40 MiB no better.
  int64_t l2_prefetch_mb = 24;
  // Decode-sized steps run each residual step (the delta's add, the bank copy, the cross-layer
  // mix, the RMS norm) as one launch (kernels/cuda/residual_mix/add_mix_norm.h, a cluster of 8
  // blocks per token) instead of four or five. Not bit-identical to the unfused path (the mix's
  // sums in another order). Off by default: it saves its launches in an eager step (H200, slice8,
  // int8 experts, batch 1: mixes+norms+adds 0.294 -> 0.243 ms) but not in the graph, where PDL
  // already hides them (3.097 -> 3.090 ms at batch 1, 15.49 -> 15.54 at 16, 30.47 -> 30.60 at 32):
  // the fused kernel is one long dependent chain on 8 SMs (~9 us under ncu).
  bool fused_residual = false;
  // The same fused residual step in prefill chunks (steps whose products take the tile GEMM or
  // cuBLAS; AddMixNorm's one-block-per-token kernel there): one read of x, the deltas and the
  // checkpoints and one write of x and the norm per step, where the separate AddInto, ResidualMix
  // (two passes over x and every checkpoint) and RMS norm launches move ~10 rows of the stream per
  // token. Not bit-identical to the unfused path (the mix's sums in another order; golden logits
  // relL2 1.2e-3 from the unfused). H100, PP4096 slice8: mixes+norms+adds 11.1 -> 7.9 ms, 16971 ->
  // 17135 tok/s (bench/results/2026-12-07-kda-integer-split-fused-prefill-residual-*). With exact
  // products the fused step is exact (golden logits relL2 1.1e-6 to 1.7e-6 from ref-a, the 374-row
  // kernel included); in the fast prefill it moves routing near-ties (the token-by-token KDA form
  // 3.06e-2 -> 3.89e-2 from ref-a, llama.cpp 1.33e-1). The default since session 49 (H100, with
  // pipelined_kda: PP4096 17684 -> 18014 tok/s; bench/results/2026-12-07-pipelined-kda-*).
  bool fused_prefill_residual = true;
  // Prefill chunks' MoE router (F32 weights, kept ~exact: a rounded logit may change the chosen
  // experts) on the tensor cores in 3xTF32 (cuda::F32GemmTf32x3: split operands, ~f32 accuracy)
  // instead of cuBLAS's f32 GEMM on the FP32 pipes (1.04 ms a MoE layer at 4096 tokens, H100).
  // Its max error 3.98e-6 of L2 at K = 7168 (cuBLAS f32: 4.34e-6); H100, PP4096: 947 us a MoE
  // layer against cuBLAS's 1030 (bench/results/2026-12-07-resident-f16-weights-*).
  bool tf32x3_router = true;
  // On one rank (no all-reduce between a layer's output product and the residual stream), the
  // output products that run on the direct-load or the tensor-core GEMV add into the stream in
  // their epilogue (ResidualProduct: x += W·o for attention and the dense FFN, x += W·m + shared
  // for the MoE's latent up-projection) instead of writing a delta that one or two AddInto
  // launches add: the same bits, two or three launches fewer per layer (H200, slice8, int8
  // experts, batch 1: 332.2 -> 333.9 tok/s). Off: the separate adds (the A/B switch of the tests).
  bool residual_epilogue = true;
  // Decode-sized steps run independent branches of a layer (KDA's gate and beta, MLA's kv_a and
  // output gate, MoE's latent projection and shared experts) on a second stream, forked and joined
  // by events. Off: one stream (the A/B switch of the benchmarks).
  bool side_streams = true;
  // Steps of at least this many rows (prefill chunks, decode batches past the tensor-core GEMV's
  // kMmaMaxRows) run their plain products on cuBLAS's f16 GEMM (kernels/cuda/quant_gemm/blas_gemm.h:
  // the tile GEMM's operands, ~3x its rate on the K3 projections; the weights are decoded to f16 a
  // block of rows at a time into a 64 MiB scratch, which pays already at 48 rows: H200, slice8, 4k,
  // batch 48 / 64: 964.7 / 1096.6 -> 1224.7 / 1350.7 tok/s against 512; KDA layers 12.0 -> 7.1 ms,
  // MLA 7.0 -> 4.2), except the LM head below kHeadBlasMinRows rows (products.h). 0: never (the
  // tile GEMM). Unused with exact_prefill. The MoE's grouped expert products stay on the tile GEMM.
  int64_t blas_min_rows = 33;
  // Those cuBLAS products read resident f16 copies of their weights, made at load
  // (half_weights.h), instead of decoding them per call: up to this many MiB of copies, and only
  // while the device keeps kHalfWeightsReserveBytes (4 GiB) free after them (0: off, every call decodes).
  // Costs memory (2 bytes a weight beside the quantized rows: the slice's 8 layers ~9 GB), saves a
  // pass over the weights per product and call. Needs blas_min_rows. H100, PP4096 slice8: 17623 ->
  // 17976 tok/s with 6.9 GB of copies (bench/results/2026-12-07-resident-f16-weights-*).
  int64_t prefill_f16_weights_mb = 16384;
  // Prefill chunks of at least this many rows run MLA attention in the decompressed form
  // (kernels/cuda/mla/mla_prefill_mha.h: per head K = k_bᵀ·latent | k_pe and V = v_b·latent,
  // decompressed once per chunk on cuBLAS, then 192 + 128 multiply-adds per (row, head, key)
  // instead of the absorbed form's 576 + 512). Needs the cuBLAS handle (blas_min_rows in
  // 1..max(max_batch, prefill_chunk)), K3's MLA widths and attn_k_b / attn_v_b types with blocks of
  // at most 128; otherwise, or at 0, the absorbed tensor-core attention. Its workspace holds the
  // K and V of as many heads as fit in 1 GiB at max_context (the dense f16 cache rows and f16
  // k_b, v_b beside them).
  int64_t mla_mha_min_rows = 512;
  bool verbose = true;        // progress lines while uploading
};

// A synthetic model filled in memory from k3::synth (no file): the same bytes as the GGUF the
// generator would write for (config, quant mix, seed).
struct SynthSource {
  model::K3Config config;
  std::string quant = "UD-IQ1_S";
  uint64_t seed = 1;
  // Fill the weight tensors on the GPU (synth_cuda: the same bytes, ~100x faster than the
  // host); vectors and types the GPU generator lacks are filled on the host either way.
  bool fill_on_device = true;
};

// Device time per layer kind of one profiled step (CUDA events), milliseconds.
struct StepProfile {
  double embed = 0, kda = 0, mla = 0, dense = 0, moe = 0, mix_norm = 0, head = 0, comm = 0, total = 0;
  void Add(const StepProfile& o) {
    embed += o.embed, kda += o.kda, mla += o.mla, dense += o.dense, moe += o.moe;
    mix_norm += o.mix_norm, head += o.head, comm += o.comm, total += o.total;
  }
};

// Bytes one decode step must move per layer kind (StepProfile's kinds): each weight once, per MoE
// layer min(n_seqs x K, experts) distinct experts, the MLA cache rows attended to, and each
// sequence's KDA states read and written once per KDA layer (2 x heads x dk x dv f32: 12.6 MB a
// layer and sequence at K3's 96 heads, so 4.8 GB a step at batch 64 over 6 layers). Over the HBM
// rate they are each kind's floor.
struct StepBytes {
  uint64_t embed = 0, kda = 0, kda_state = 0, mla_weights = 0, mla_cache = 0, dense = 0, moe = 0, head = 0;
  uint64_t weights() const { return embed + kda + mla_weights + dense + moe + head; }
  uint64_t state() const { return mla_cache + kda_state; }  // what grows with the sequences
};

// ForwardSummaries' request for one input, and what it returns for it: per output row (one, or
// every token with all_logits), the band's best top_n (cuda::BandTop's order and padding: the
// same as runtime::SummarizeBand), the band's logsumexp, and the band's logits if asked for.
struct BandRequest {
  int32_t top_n = 1;  // 1..cuda::kBandTopMaxN
  bool full_logits = false;
};
struct BandSummary {
  std::vector<cuda::BandTopCandidate> top;  // [rows][top_n]
  std::vector<float> logsumexp;             // [rows]
  std::vector<float> logits;                // [rows][band] with full_logits, else empty
};

class CudaEngine {
 public:
  static absl::StatusOr<std::unique_ptr<CudaEngine>> Open(const std::string& path,
                                                          const CudaEngineOptions& options = {});
  static absl::StatusOr<std::unique_ptr<CudaEngine>> OpenSynth(const SynthSource& source,
                                                               const CudaEngineOptions& options = {});
  ~CudaEngine();

  const model::K3Config& config() const { return config_; }
  const model::RankShard& shard() const { return shard_; }
  int ranks() const { return options_.plan.ranks; }
  // All-reduces one decode step enqueues (none on one rank): the embedding, then per layer one
  // after attention and one for the FFN (the MoE fuses its expert and shared partials).
  int64_t CollectivesPerStep() const { return ranks() > 1 ? 1 + 2 * config_.n_layers : 0; }
  // Bytes of weights resident on the device (this rank's shard).
  uint64_t weight_bytes() const { return weight_bytes_; }
  // The resident f16 copies made at load (prefill_f16_weights_mb): matrices and device bytes.
  int64_t half_weight_matrices() const { return half_weight_matrices_; }
  uint64_t half_weight_bytes() const { return half_weight_bytes_; }
  // Bytes of weights one decode step of n_seqs rows reads at least (each weight once; per MoE
  // layer min(n_seqs x K, experts) distinct experts).
  uint64_t step_weight_bytes(int64_t n_seqs) const { return step_bytes(n_seqs, 0).weights(); }
  // The same bytes by layer kind, with the cache of n_seqs sequences of ctx cached rows each.
  StepBytes step_bytes(int64_t n_seqs, int64_t ctx) const;
  // Bytes per cached MLA row (all MLA layers), for the cache term of the floor.
  uint64_t cache_bytes_per_token() const;
  // Multiply-adds of one token's forward on this rank without the LM head (the prefill floor):
  // every projection once, its share of K experts, the KDA recurrence; plus, per cached row it
  // attends to, attention_macs_per_row(chunk) (MLA scores and values in the form a prefill chunk of
  // `chunk` rows runs: decompressed, 192 + 128 per head, or absorbed, 576 + 512; the decompression
  // itself, 2·512·128 per head and cached row once per chunk, is not counted).
  uint64_t linear_macs_per_token() const;
  uint64_t attention_macs_per_row(int64_t chunk) const;
  // Whether a prefill chunk of n rows runs MLA attention decompressed (mla_mha_min_rows).
  bool MlaDecompressed(int64_t n) const;
  // The MoE's GEMV limit (CudaEngineOptions::moe_gemv_max_rows, -1 resolved).
  int64_t MoeGemvMaxRows() const;
  // Whether MLA attention runs on the warpgroup kernel (CudaEngineOptions::wgmma_mla, where it can).
  bool MlaOnWgmma() const { return options_.wgmma_mla; }

  // Sequences (SequenceCache semantics: Add = zero state; Free releases pages and slot).
  absl::Status Add(SeqId id);
  absl::Status Free(SeqId id);
  bool Contains(SeqId id) const { return seqs_.contains(id); }
  int64_t Length(SeqId id) const;
  // Capacity, for the coordinator's admission (the worker's GetInfo).
  int64_t page_size() const { return options_.page_size; }
  int64_t cache_capacity_tokens() const { return cache_pages_ * options_.page_size; }
  int64_t free_slot_count() const { return static_cast<int64_t>(free_slots_.size()); }
  int64_t free_cache_tokens() const { return static_cast<int64_t>(free_pages_.size()) * options_.page_size; }

  // The CPU engine's Forward contract: runs of several tokens go through Prefill, single tokens
  // through decode steps of up to max_batch rows.
  absl::StatusOr<ForwardResult> Forward(std::span<const SeqInput> batch);
  // Forward's steps, each output row's band summarized on the device (kernels/cuda/band_top), so
  // only the summaries come back, plus the band of the inputs whose request wants full_logits.
  absl::StatusOr<std::vector<BandSummary>> ForwardSummaries(std::span<const SeqInput> batch,
                                                            std::span<const BandRequest> requests);

  // One decode step: token[i] appended to seqs[i] (each once, at most max_batch). Logits of
  // the vocabulary band go to host_logits ([n][band]) when not null.
  absl::Status Decode(std::span<const SeqId> seqs, std::span<const int32_t> tokens, float* host_logits);
  // The same step run eagerly with CUDA events around each part: device ms per layer kind.
  absl::StatusOr<StepProfile> DecodeProfiled(std::span<const SeqId> seqs, std::span<const int32_t> tokens);
  // Appends `tokens` to `seq` in chunks of at most prefill_chunk, one eager forward per chunk.
  // Logits of the band go to host_logits when not null: [tokens][band] with all_logits, else
  // the last token's [band]. With `profile`, device ms per layer kind summed over the chunks.
  absl::Status Prefill(SeqId seq, std::span<const int32_t> tokens, bool all_logits, float* host_logits,
                       StepProfile* profile = nullptr);
  int64_t prefill_chunk() const { return options_.prefill_chunk; }

  cudaStream_t stream() const { return stream_; }
  int64_t graphs_captured() const { return static_cast<int64_t>(graphs_.size()); }

  struct Impl;  // device buffers and weights (cuda_engine.cc)

 private:
  CudaEngine();
  absl::Status Init(const CudaEngineOptions& options);
  static absl::Status CheckRanks(const CudaEngineOptions& options);
  // ternary_experts' conditions (on the current device): every product that reads the experts takes the form.
  static absl::Status CheckTernary(const CudaEngineOptions& options);
  absl::Status AllReduce(float* data, int64_t n);
  // The rows of one forward and where their per-row metadata lives on the device.
  struct StepView {
    int64_t n = 0;                  // activation rows
    int64_t n_seqs = 0;             // sequences: rows are [n_seqs][run]
    int64_t run = 1;                // tokens per sequence (1: decode; a prefill chunk: n)
    const int32_t* tokens = nullptr;        // [n]
    const int32_t* lens = nullptr;          // [n] sequence length with the row's token included
    const int32_t* slots = nullptr;         // [n_seqs] KDA / conv state slot
    const int32_t* block_tables = nullptr;  // [n][block_table_stride] (stride 0: one shared table)
    int64_t block_table_stride = 0;
    int bucket = 256;               // MLA split bucket (power of two >= the longest length)
    int64_t kv_len = 0;             // prefill runs: the sequence's length after the run (host-known); 0 in decode steps
    int64_t head_row = 0, head_rows = 0;  // rows [head_row, +head_rows) get logits
  };
  static int MlaBucket(int64_t max_len);
  bool MlaMhaFits() const;  // K3's MLA widths, and attn_k_b / attn_v_b types MlaPrefillMha takes
  absl::Status Prepare(std::span<const SeqId> seqs, std::span<const int32_t> tokens, StepView* view);
  absl::Status CheckBatch(std::span<const SeqInput> batch) const;  // Forward's checks
  // Prepares a decode step and launches it (its graph, or eagerly) on the stream; no wait.
  absl::Status LaunchDecode(std::span<const SeqId> seqs, std::span<const int32_t> tokens);
  // After a step on the stream: BandTop over its head rows [0, rows) of the logits into the
  // pinned top_h [rows][n] and lse_h [rows], the band of row j to full[j] where not null; waits.
  absl::Status DownloadSummaries(int64_t rows, int32_t n, std::span<float* const> full);
  absl::Status PreparePrefill(SeqId seq, std::span<const int32_t> tokens, StepView* view);
  absl::Status Enqueue(const StepView& view, std::vector<std::pair<int, cudaEvent_t>>* marks);
  // Waits for the stream, then asks the communicator whether its collectives failed on the GPU
  // meanwhile (Communicator::Health): a step whose all-reduce timed out is an error, not logits.
  absl::Status SyncStream();
  absl::StatusOr<StepProfile> Collect(std::vector<std::pair<int, cudaEvent_t>>& marks);
  void Commit(std::span<const SeqId> seqs);

  struct Sequence {
    int64_t length = 0;
    int64_t slot = -1;
    std::vector<int32_t> pages;
  };

  model::K3Config config_;
  model::RankShard shard_;
  CudaEngineOptions options_;
  std::unique_ptr<Impl> impl_;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  // Decode steps run independent branches on side_stream_ (forked from and joined back to stream_
  // by events, so a graph capture takes both): a MoE layer's latent down-projection and shared
  // experts beside the router, routing and routed experts (the GEMVs stream weights at HBM speed
  // while the routing's small latency-bound kernels would leave it idle; mid_event_ hands the
  // latent rows over), a KDA layer's gate and beta chains beside its q|k|v|g GEMV and convs.
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr, mid_event_ = nullptr;
  // With l2_prefetch_mb, L2 prefetches of the next products' weights run on prefetch_stream_,
  // each forked from stream_ where a latency-bound stretch starts (prefetch_event_), and the
  // stream is joined back at the step's end (prefetch_join_).
  cudaStream_t prefetch_stream_ = nullptr;
  cudaEvent_t prefetch_event_ = nullptr, prefetch_join_ = nullptr;
  coll::Communicator* comm_ = nullptr;  // several ranks only
  uint64_t weight_bytes_ = 0;
  int64_t half_weight_matrices_ = 0;
  uint64_t half_weight_bytes_ = 0;
  std::unordered_map<SeqId, Sequence> seqs_;
  std::vector<int32_t> free_pages_;
  int64_t cache_pages_ = 0;  // pages in the pool
  std::vector<int64_t> free_slots_;
  std::map<std::pair<int64_t, int>, cudaGraphExec_t> graphs_;
};

}  // namespace k3::engine_cuda
