// The kimi-k3 forward pass on one GPU (spec section 4), decode-first: every Forward step runs
// one token per sequence through the k3_kernels_cuda kernels, layer by layer, with the same math
// as the CPU engine (worker/engine). Per-sequence state lives on the device: MLA cache pages
// (f32 or f16) with block tables, KDA recurrent state and short-conv history in slots (the
// semantics of engine::SequenceCache, without forks). A step takes no host synchronization
// until its logits are copied back; its per-step metadata (tokens, lengths, slots, block
// tables) is uploaded into fixed device arrays first, so the step is captured once per
// (batch size, MLA split bucket) as a CUDA graph and replayed.
// Prompts run token by token through the decode step (no chunked prefill yet).
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
  int64_t cache_tokens = 0;   // MLA cache capacity over all sequences; 0 = max_seqs x min(context, 64k)
  int64_t max_context = 0;    // longest sequence; 0 = min(context_length, cache_tokens)
  int64_t page_size = 64;
  bool cache_f16 = false;     // MLA cache rows in f16 (the reference's) instead of f32
  bool use_graphs = true;     // capture each step shape once and replay it
  bool verbose = true;        // progress lines while uploading
};

// A synthetic model filled in memory from k3::synth (no file): the same bytes as the GGUF the
// generator would write for (config, quant mix, seed).
struct SynthSource {
  model::K3Config config;
  std::string quant = "UD-IQ1_S";
  uint64_t seed = 1;
};

// Device time per layer kind of one profiled step (CUDA events), milliseconds.
struct StepProfile {
  double embed = 0, kda = 0, mla = 0, dense = 0, moe = 0, mix_norm = 0, head = 0, comm = 0, total = 0;
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
  // Bytes of weights one decode step of n_seqs rows reads at least (each weight once; per MoE
  // layer min(n_seqs x K, experts) distinct experts).
  uint64_t step_weight_bytes(int64_t n_seqs) const;
  // Bytes per cached MLA row (all MLA layers), for the cache term of the floor.
  uint64_t cache_bytes_per_token() const;

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

  // The CPU engine's Forward contract; runs are fed token by token through the decode step.
  absl::StatusOr<ForwardResult> Forward(std::span<const SeqInput> batch);

  // One decode step: token[i] appended to seqs[i] (each once, at most max_batch). Logits of
  // the vocabulary band go to host_logits ([n][band]) when not null.
  absl::Status Decode(std::span<const SeqId> seqs, std::span<const int32_t> tokens, float* host_logits);
  // The same step run eagerly with CUDA events around each part: device ms per layer kind.
  absl::StatusOr<StepProfile> DecodeProfiled(std::span<const SeqId> seqs, std::span<const int32_t> tokens);

  cudaStream_t stream() const { return stream_; }
  int64_t graphs_captured() const { return static_cast<int64_t>(graphs_.size()); }

  struct Impl;  // device buffers and weights (cuda_engine.cc)

 private:
  CudaEngine();
  absl::Status Init(const CudaEngineOptions& options);
  static absl::Status CheckRanks(const CudaEngineOptions& options);
  absl::Status AllReduce(float* data, int64_t n);
  absl::Status Prepare(std::span<const SeqId> seqs, std::span<const int32_t> tokens, int* bucket);
  absl::Status Enqueue(int64_t n, int bucket, std::vector<std::pair<int, cudaEvent_t>>* marks);
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
  coll::Communicator* comm_ = nullptr;  // several ranks only
  uint64_t weight_bytes_ = 0;
  std::unordered_map<SeqId, Sequence> seqs_;
  std::vector<int32_t> free_pages_;
  int64_t cache_pages_ = 0;  // pages in the pool
  std::vector<int64_t> free_slots_;
  std::map<std::pair<int64_t, int>, cudaGraphExec_t> graphs_;
};

}  // namespace k3::engine_cuda
