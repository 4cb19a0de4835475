// A synthetic kimi-k3 model: every tensor of ExpectedTensors(config) with the type a QuantMix
// gives it, every metadata key the config parser needs, and random values (value_spec.h) that
// are a pure function of (seed, tensor name, block index). Nothing is held in memory: any
// byte range of any tensor is computed on demand, so a writer can stream and parallelize, and a
// rank can fill its own shard directly, bit-identical to the file's bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quant/ggml_type.h"
#include "worker/gguf/gguf_writer.h"
#include "worker/model/k3_config.h"
#include "worker/model/quant_mix.h"
#include "worker/model/tensor_manifest.h"
#include "worker/synth/tiktoken_vocab.h"
#include "worker/synth/value_spec.h"

namespace k3::synth {

struct SynthOptions {
  uint64_t seed = 1;
  bool optional_tensors = true;  // write attn_gate and ffn_routed_norm (real files have them)
};

struct SynthTensor {
  model::TensorSpec spec;
  quant::GgmlType type = quant::GgmlType::kF32;
  uint64_t key = 0;            // TensorKey(seed, name)
  ValueSpec values;
  uint64_t n_blocks = 0;       // blocks along the whole tensor (a plain type: elements)
  uint64_t blocks_per_row = 0;  // ne[0] / block size
  uint32_t block_bytes = 0;
  uint32_t block_elems = 0;
  uint64_t n_bytes() const { return n_blocks * block_bytes; }
  // Rows of ne[0] elements: ne[1] * ne[2] * ...
  int64_t n_rows() const { return static_cast<int64_t>(n_blocks / blocks_per_row); }
  uint64_t row_bytes() const { return blocks_per_row * block_bytes; }
};

class SynthModel {
 public:
  // config.name empty: "k3-synth-seed<N>". A vocabulary must have config.vocab tokens.
  static absl::StatusOr<SynthModel> Create(model::K3Config config, const model::QuantMix& mix,
                                           const SynthOptions& options,
                                           std::optional<GgufVocab> vocab = std::nullopt);

  const model::K3Config& config() const { return config_; }
  const SynthOptions& options() const { return options_; }
  const std::vector<SynthTensor>& tensors() const { return tensors_; }
  const SynthTensor* Find(std::string_view name) const;
  uint64_t data_bytes() const;  // sum of the tensors' bytes, padding excluded

  // Sets the metadata and declares every tensor, in file order.
  absl::Status Declare(gguf::GgufWriter& w) const;

  // Blocks [first_block, first_block + n_blocks) of `t` (within its n_blocks) into `out`.
  void FillBlocks(const SynthTensor& t, uint64_t first_block, uint64_t n_blocks, uint8_t* out) const;
  // Rows [first_row, first_row + n_rows): n_rows * row_bytes() bytes.
  void FillRows(const SynthTensor& t, int64_t first_row, int64_t n_rows, uint8_t* out) const;
  // A column band of rows: elements [first_col, first_col + n_cols) of each row, packed row
  // after row (a rank's share of a weight split along ne[0]). Columns must fall on block
  // boundaries: InvalidArgument otherwise.
  absl::Status FillColumns(const SynthTensor& t, int64_t first_row, int64_t n_rows, int64_t first_col,
                           int64_t n_cols, uint8_t* out) const;

 private:
  model::K3Config config_;
  SynthOptions options_;
  std::optional<GgufVocab> vocab_;
  std::vector<SynthTensor> tensors_;
};

// The building block without a SynthModel: blocks of one tensor of (config, seed), stored as
// `type`. Same bytes as SynthModel::FillBlocks and as the file.
void FillTensorBytes(const model::K3Config& config, const model::TensorSpec& spec, quant::GgmlType type,
                     uint64_t seed, uint64_t first_block, uint64_t n_blocks, uint8_t* out);

}  // namespace k3::synth
