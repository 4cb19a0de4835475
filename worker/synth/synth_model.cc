#include "worker/synth/synth_model.h"

#include "absl/strings/str_cat.h"
#include "worker/common/status_macros.h"
#include "worker/synth/block_fill.h"
#include "worker/synth/counter_rng.h"
#include "worker/synth/k3_metadata.h"

namespace k3::synth {
namespace {

SynthTensor MakeTensor(const model::K3Config& config, const model::TensorSpec& spec, quant::GgmlType type,
                       uint64_t seed) {
  SynthTensor t;
  t.spec = spec;
  t.type = type;
  t.key = TensorKey(seed, spec.name);
  t.values = ValueSpecFor(config, spec);
  const quant::TypeTraits& traits = quant::Traits(type);
  t.block_elems = traits.block_elems;
  t.block_bytes = traits.block_bytes;
  t.blocks_per_row = static_cast<uint64_t>(spec.ne[0]) / traits.block_elems;
  t.n_blocks = spec.n_elems() / traits.block_elems;
  return t;
}

}  // namespace

absl::StatusOr<SynthModel> SynthModel::Create(model::K3Config config, const model::QuantMix& mix,
                                              const SynthOptions& options, std::optional<GgufVocab> vocab) {
  if (config.name.empty()) config.name = absl::StrCat("k3-synth-seed", options.seed);
  if (vocab && static_cast<int64_t>(vocab->tokens.size()) != config.vocab) {
    return absl::InvalidArgumentError(absl::StrCat("the vocabulary has ", vocab->tokens.size(),
                                                   " tokens; the model's vocab size is ", config.vocab));
  }
  SynthModel m;
  m.config_ = std::move(config);
  m.options_ = options;
  m.vocab_ = std::move(vocab);
  for (const model::TensorSpec& spec : model::ExpectedTensors(m.config_)) {
    if (spec.optional && !options.optional_tensors) continue;
    for (int64_t d : spec.ne) {
      if (d <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", spec.name, " would have a dimension of ", d,
                                                       ": the config has a zero size"));
      }
    }
    const quant::GgmlType type = mix.TypeFor(spec);
    if (!CanSynthesize(type)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", spec.name, ": no generator for type ",
                                                     std::string(quant::TypeName(type))));
    }
    if (spec.ne[0] % quant::Traits(type).block_elems != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", spec.name, ": ne[0] = ", spec.ne[0],
                                                     " is not a multiple of the block of ",
                                                     std::string(quant::TypeName(type))));
    }
    m.tensors_.push_back(MakeTensor(m.config_, spec, type, options.seed));
  }
  return m;
}

const SynthTensor* SynthModel::Find(std::string_view name) const {
  for (const SynthTensor& t : tensors_) {
    if (t.spec.name == name) return &t;
  }
  return nullptr;
}

uint64_t SynthModel::data_bytes() const {
  uint64_t n = 0;
  for (const SynthTensor& t : tensors_) n += t.n_bytes();
  return n;
}

absl::Status SynthModel::Declare(gguf::GgufWriter& w) const {
  K3_RETURN_IF_ERROR(SetK3Metadata(config_, vocab_ ? &*vocab_ : nullptr, w));
  for (const SynthTensor& t : tensors_) K3_RETURN_IF_ERROR(w.AddTensor(t.spec.name, t.spec.ne, t.type));
  return absl::OkStatus();
}

void SynthModel::FillBlocks(const SynthTensor& t, uint64_t first_block, uint64_t n_blocks, uint8_t* out) const {
  synth::FillBlocks(t.type, t.values, t.key, first_block, n_blocks, out);
}

void SynthModel::FillRows(const SynthTensor& t, int64_t first_row, int64_t n_rows, uint8_t* out) const {
  FillBlocks(t, static_cast<uint64_t>(first_row) * t.blocks_per_row, static_cast<uint64_t>(n_rows) * t.blocks_per_row,
             out);
}

absl::Status SynthModel::FillColumns(const SynthTensor& t, int64_t first_row, int64_t n_rows, int64_t first_col,
                                     int64_t n_cols, uint8_t* out) const {
  const int64_t be = t.block_elems;
  if (first_col < 0 || n_cols < 0 || first_col + n_cols > t.spec.ne[0] || first_col % be != 0 || n_cols % be != 0 ||
      first_row < 0 || n_rows < 0 || first_row + n_rows > t.n_rows()) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.spec.name, ": columns [", first_col, ", ", first_col + n_cols, ") of rows [", first_row, ", ",
        first_row + n_rows, ") are not a block-aligned window of ", t.spec.ne[0], " x ", t.n_rows(), " (block ", be,
        ")"));
  }
  const uint64_t blocks = static_cast<uint64_t>(n_cols / be);
  for (int64_t r = 0; r < n_rows; ++r) {
    FillBlocks(t, static_cast<uint64_t>(first_row + r) * t.blocks_per_row + static_cast<uint64_t>(first_col / be),
               blocks, out + static_cast<uint64_t>(r) * blocks * t.block_bytes);
  }
  return absl::OkStatus();
}

void FillTensorBytes(const model::K3Config& config, const model::TensorSpec& spec, quant::GgmlType type,
                     uint64_t seed, uint64_t first_block, uint64_t n_blocks, uint8_t* out) {
  synth::FillBlocks(type, ValueSpecFor(config, spec), TensorKey(seed, spec.name), first_block, n_blocks, out);
}

}  // namespace k3::synth
