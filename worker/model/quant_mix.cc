#include "worker/model/quant_mix.h"

#include <fnmatch.h>

#include "absl/strings/str_cat.h"

namespace k3::model {

using quant::GgmlType;

absl::StatusOr<QuantMix> QuantMix::Preset(std::string_view name) {
  QuantMix m;
  m.name_ = std::string(name);
  if (name == "UD-IQ1_S") {
    m.experts_ = GgmlType::kIQ1_S;
  } else if (name == "UD-Q2_K_XL") {
    m.experts_ = GgmlType::kIQ2_XS;
  } else if (name == "Q8_0") {
    m.experts_ = m.matrices_ = GgmlType::kQ8_0;
  } else if (name == "F32") {
    m.experts_ = m.matrices_ = GgmlType::kF32;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown quant mix '", std::string(name), "'; known: UD-IQ1_S, UD-Q2_K_XL, Q8_0, F32"));
  }
  return m;
}

std::vector<std::string> QuantMix::PresetNames() { return {"UD-IQ1_S", "UD-Q2_K_XL", "Q8_0", "F32"}; }

absl::Status QuantMix::AddOverride(std::string_view spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("quant override '", std::string(spec), "' is not of the form PATTERN=TYPE"));
  }
  const std::string_view type_name = spec.substr(eq + 1);
  std::optional<GgmlType> type = quant::TypeFromName(type_name);
  if (!type || !quant::Traits(*type).must_have) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quant override '", std::string(spec), "': '", std::string(type_name),
        "' is not a type this engine computes with (F32 F16 BF16 Q8_0 Q2_K..Q6_K IQ2_XXS IQ2_XS "
        "IQ1_S)"));
  }
  overrides_.push_back(Override{std::string(spec.substr(0, eq)), *type});
  return absl::OkStatus();
}

GgmlType QuantMix::TypeFor(const TensorSpec& spec) const {
  GgmlType t;
  switch (spec.role) {
    case TensorRole::kVector:
    case TensorRole::kConv:
      t = GgmlType::kF32;
      break;
    case TensorRole::kExperts:
      t = experts_;
      break;
    case TensorRole::kHeadStack:
      t = matrices_;
      break;
    case TensorRole::kMatrix:
      t = (spec.base == "ffn_gate_inp" || spec.base == "ssm_f_a" || spec.base == "ssm_beta")
              ? f32_matrices_
              : matrices_;
      break;
  }
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    if (fnmatch(it->pattern.c_str(), spec.name.c_str(), 0) == 0) {
      t = it->type;
      break;
    }
  }
  if (spec.role == TensorRole::kVector || spec.role == TensorRole::kConv) {
    if (!TypeAllowed(spec.role, t)) t = GgmlType::kF32;
  }
  // Blocks run along ne[0]; a width they do not divide cannot use them.
  if (spec.ne[0] % quant::Traits(t).block_elems != 0) {
    t = spec.ne[0] % 32 == 0 ? GgmlType::kQ8_0 : GgmlType::kF32;
  }
  return t;
}

}  // namespace k3::model
