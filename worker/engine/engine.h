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
#include "worker/model/k3_config.h"

namespace k3::gguf { class GgufFile; }

namespace k3::engine {

struct EngineOptions {
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

struct ForwardResult {
  int64_t vocab = 0;
  std::vector<float> logits;       // [n_rows][vocab]
  std::vector<int64_t> first_row;  // per SeqInput: its first row in `logits`
  std::vector<int64_t> n_rows;     // per SeqInput: 1, or its token count with all_logits
  const float* row(size_t input, int64_t i = 0) const {
    return logits.data() + (first_row[input] + i) * vocab;
  }
};

class Engine {
 public:
  // Opens, validates (config, manifest) and binds a kimi-k3 GGUF.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& path,
                                                      const EngineOptions& options = {});
  ~Engine();

  const model::K3Config& config() const { return config_; }
  SequenceCache& cache() { return *cache_; }

  // Runs the batch; each sequence must exist in the cache and appear at most once. Errors:
  // InvalidArgument for bad token ids, empty runs or a context overflow; ResourceExhausted when
  // the cache cannot hold the new tokens (no state changes then).
  absl::StatusOr<ForwardResult> Forward(std::span<const SeqInput> batch);

 private:
  Engine() = default;
  void Embed(const TokenBatch& batch, float* x) const;

  std::unique_ptr<gguf::GgufFile> file_;
  model::K3Config config_;
  ModelWeights weights_;
  EngineOptions options_;
  std::unique_ptr<SequenceCache> cache_;
};

}  // namespace k3::engine
