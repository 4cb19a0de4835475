// Helpers for the synthetic-model tests: a temp directory and writing a preset to it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/quant_mix.h"
#include "worker/synth/presets.h"
#include "worker/synth/synth_model.h"
#include "worker/synth/synth_writer.h"
#include "tests/common/temp_files.h"

namespace k3::synth::testing {

// Temporary directories (named k3-synth-test-XXXXXX), whole-file reads, status messages: tests/common.
class TempDir : public k3::testing::TempDir {
 public:
  TempDir() : k3::testing::TempDir("k3-synth-test") {}
};
using k3::testing::Msg;
using k3::testing::ReadAll;

inline absl::StatusOr<SynthModel> PresetModel(const std::string& preset, uint64_t seed = 1,
                                              const std::string& quant = "UD-IQ1_S",
                                              const std::vector<std::string>& overrides = {},
                                              bool optional_tensors = true) {
  absl::StatusOr<model::K3Config> c = PresetConfig(preset);
  if (!c.ok()) return c.status();
  absl::StatusOr<model::QuantMix> mix = model::QuantMix::Preset(quant);
  if (!mix.ok()) return mix.status();
  for (const std::string& o : overrides) {
    if (absl::Status s = mix->AddOverride(o); !s.ok()) return s;
  }
  SynthOptions so;
  so.seed = seed;
  so.optional_tensors = optional_tensors;
  return SynthModel::Create(*c, *mix, so);
}

// Writes `model` to dir/name; returns the first (or only) file.
inline absl::StatusOr<std::string> WriteTo(const SynthModel& model, const TempDir& dir, const std::string& name,
                                           WriteOptions options = {}) {
  absl::StatusOr<WriteReport> r = WriteModel(model, dir.File(name), options);
  if (!r.ok()) return r.status();
  return r->paths.front();
}

}  // namespace k3::synth::testing
