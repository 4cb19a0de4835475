// Which ggml type each tensor gets, by rule: the presets mirror the published UD quants,
// and "PATTERN=TYPE" overrides (shell globs on the tensor name) come first.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quant/ggml_type.h"
#include "worker/model/tensor_manifest.h"

namespace k3::model {

class QuantMix {
 public:
  // "UD-IQ1_S" (experts IQ1_S, other 2-D weights Q8_0, vectors/router/ssm_f_a/ssm_beta F32),
  // "UD-Q2_K_XL" (experts IQ2_XS), "Q8_0" (all 2-D weights Q8_0), "F32" (everything F32).
  static absl::StatusOr<QuantMix> Preset(std::string_view name);
  static std::vector<std::string> PresetNames();

  // "blk.*.ffn_down_exps.weight=IQ2_XXS"; later overrides win over earlier ones.
  absl::Status AddOverride(std::string_view spec);

  // The type for `spec`. A type whose block does not divide ne[0] falls back to Q8_0, then F32.
  quant::GgmlType TypeFor(const TensorSpec& spec) const;
  const std::string& name() const { return name_; }

 private:
  struct Override {
    std::string pattern;
    quant::GgmlType type;
  };
  std::string name_;
  quant::GgmlType experts_ = quant::GgmlType::kIQ1_S;
  quant::GgmlType matrices_ = quant::GgmlType::kQ8_0;
  quant::GgmlType f32_matrices_ = quant::GgmlType::kF32;  // router, ssm_f_a, ssm_beta
  std::vector<Override> overrides_;
};

}  // namespace k3::model
