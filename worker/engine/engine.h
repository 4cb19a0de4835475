// The kimi-k3 forward pass on the CPU for a batch of sequences at different positions
// (spec section 4): prompt chunks (prefill) and single tokens (decode) in one call.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model_weights.h"
#include "worker/engine/sequence_cache.h"
#include "worker/engine/token_batch.h"
#include "collectives/communicator.h"
#include "worker/common/trace.h"
#include "worker/model/k3_config.h"
#include "worker/model/shard_rules.h"

namespace k3::gguf { class GgufFile; }

namespace k3::engine {

struct EngineOptions {
  // The worker group: this process is `rank` of plan.ranks; comm connects them (nullptr: a
  // local communicator, valid only for a 1-rank plan).
  model::RankPlan plan;
  int rank = 0;
  coll::Communicator* comm = nullptr;
  Tracer* tracer = nullptr;  // per-rank timeline (spans per step, layer, collective), or off
  int64_t max_seqs = 8;             // KDA state slots (sequences resident at once)
  int64_t cache_tokens = 0;         // MLA cache capacity in tokens over all sequences; 0 = max_seqs x context_length (capped at 1M)
  int64_t page_size = 64;           // MLA cache rows per page
  int64_t kda_chunk = 16;           // chunk of the chunked KDA form in prefill
};

// One sequence's share of a forward call: its next tokens, appended at its current length.
struct SeqInput {
  SeqId seq = 0;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits of every token of the run, else only of the last
};

// Logits of this rank's vocabulary band [band_begin, band_begin + band_width); the full
// vocabulary on one rank.
struct ForwardResult {
  int64_t vocab = 0;               // the model's full vocabulary
  int64_t band_begin = 0;
  int64_t band_width = 0;
  std::vector<float> logits;       // [n_rows][band_width]
  std::vector<int64_t> first_row;  // per SeqInput: its first row in `logits`
  std::vector<int64_t> n_rows;     // per SeqInput: 1, or its token count with all_logits
  const float* row(size_t input, int64_t i = 0) const {
    return logits.data() + (first_row[input] + i) * band_width;
  }
};

class Engine {
 public:
  // Opens, validates (config, manifest) and binds a kimi-k3 GGUF.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& path,
                                                      const EngineOptions& options = {});
  ~Engine();

  const model::K3Config& config() const { return config_; }
  const model::RankShard& shard() const { return shard_; }
  coll::Communicator& comm() { return *comm_; }
  // Collectives one Forward call issues: the embedding, then per layer one after attention and
  // one for the FFN (the MoE fuses its expert and shared partials into one).
  int64_t CollectivesPerStep() const { return 1 + 2 * config_.n_layers; }
  SequenceCache& cache() { return *cache_; }

  // Runs the batch; each sequence must exist in the cache and appear at most once. Errors:
  // InvalidArgument for bad token ids, empty runs or a context overflow; ResourceExhausted when
  // the cache cannot hold the new tokens (no state changes then).
  absl::StatusOr<ForwardResult> Forward(std::span<const SeqInput> batch);

 private:
  Engine() = default;
  absl::Status Embed(const TokenBatch& batch, float* x);

  std::unique_ptr<gguf::GgufFile> file_;
  model::K3Config config_;
  model::RankShard shard_;
  std::unique_ptr<coll::Communicator> own_comm_;
  coll::Communicator* comm_ = nullptr;
  ModelWeights weights_;
  EngineOptions options_;
  std::unique_ptr<SequenceCache> cache_;
};

}  // namespace k3::engine
