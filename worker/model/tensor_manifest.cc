#include "worker/model/tensor_manifest.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/gguf/gguf_file.h"

namespace k3::model {
namespace {

// Builds the list; one helper per tensor family keeps each shape next to its name.
class ManifestBuilder {
 public:
  explicit ManifestBuilder(const K3Config& c) : c_(c) {}

  std::vector<TensorSpec> Build() {
    const int64_t H = c_.hidden, V = c_.vocab;
    Global("token_embd.weight", "token_embd", {H, V}, TensorRole::kMatrix);
    Global("output_norm.weight", "output_norm", {H}, TensorRole::kVector);
    Global("output.weight", "output", {H, V}, TensorRole::kMatrix);
    Global("output_res_score.weight", "output_res_score", {H}, TensorRole::kVector);
    for (int64_t il = 0; il < c_.n_layers; ++il) {
      Layer(il, "attn_norm", ".weight", {H}, TensorRole::kVector);
      Layer(il, "ffn_norm", ".weight", {H}, TensorRole::kVector);
      Layer(il, "attn_res_score", ".weight", {H}, TensorRole::kVector);
      Layer(il, "ffn_res_score", ".weight", {H}, TensorRole::kVector);
      if (c_.is_mla(il)) {
        Mla(il);
      } else {
        Kda(il);
      }
      if (c_.is_dense(il)) {
        Dense(il);
      } else {
        Moe(il);
      }
    }
    return std::move(out_);
  }

 private:
  void Kda(int64_t il) {
    const int64_t H = c_.hidden, D = c_.kda_inner(), hd = c_.kda_head_dim, nh = c_.n_heads;
    for (const char* p : {"attn_q", "attn_k", "attn_v"}) Layer(il, p, ".weight", {H, D}, TensorRole::kMatrix);
    for (const char* p : {"ssm_conv1d_q", "ssm_conv1d_k", "ssm_conv1d_v"}) {
      Layer(il, p, ".weight", {c_.conv_kernel, 1, D}, TensorRole::kConv);
    }
    Layer(il, "ssm_f_a", ".weight", {H, hd}, TensorRole::kMatrix);
    Layer(il, "ssm_f_b", ".weight", {hd, D}, TensorRole::kMatrix);
    Layer(il, "ssm_beta", ".weight", {H, nh}, TensorRole::kMatrix);
    Layer(il, "ssm_a", "", {nh}, TensorRole::kVector);  // no ".weight" suffix in the file
    Layer(il, "ssm_dt", ".bias", {D}, TensorRole::kVector);
    Layer(il, "ssm_g", ".weight", {H, D}, TensorRole::kMatrix);
    Layer(il, "ssm_norm", ".weight", {hd}, TensorRole::kVector);
    Layer(il, "attn_output", ".weight", {D, H}, TensorRole::kMatrix);
  }

  void Mla(int64_t il) {
    const int64_t H = c_.hidden, nh = c_.n_heads;
    Layer(il, "attn_q_a", ".weight", {H, c_.q_lora_rank}, TensorRole::kMatrix);
    Layer(il, "attn_q_a_norm", ".weight", {c_.q_lora_rank}, TensorRole::kVector);
    Layer(il, "attn_q_b", ".weight", {c_.q_lora_rank, nh * c_.mla_qk_head_dim()}, TensorRole::kMatrix);
    Layer(il, "attn_kv_a_mqa", ".weight", {H, c_.mla_row}, TensorRole::kMatrix);
    Layer(il, "attn_kv_a_norm", ".weight", {c_.kv_lora_rank}, TensorRole::kVector);
    Layer(il, "attn_k_b", ".weight", {c_.qk_nope_dim, c_.kv_lora_rank, nh}, TensorRole::kHeadStack);
    Layer(il, "attn_v_b", ".weight", {c_.kv_lora_rank, c_.v_head_dim, nh}, TensorRole::kHeadStack);
    Layer(il, "attn_gate", ".weight", {H, nh * c_.v_head_dim}, TensorRole::kMatrix, /*optional=*/true);
    Layer(il, "attn_output", ".weight", {nh * c_.v_head_dim, H}, TensorRole::kMatrix);
  }

  void Dense(int64_t il) {
    const int64_t H = c_.hidden, F = c_.dense_ffn;
    Layer(il, "ffn_gate", ".weight", {H, F}, TensorRole::kMatrix);
    Layer(il, "ffn_up", ".weight", {H, F}, TensorRole::kMatrix);
    Layer(il, "ffn_down", ".weight", {F, H}, TensorRole::kMatrix);
  }

  void Moe(int64_t il) {
    const int64_t H = c_.hidden, E = c_.n_experts, L = c_.expert_latent, F = c_.expert_ffn;
    const int64_t S = c_.shared_ffn();
    Layer(il, "ffn_gate_inp", ".weight", {H, E}, TensorRole::kMatrix);
    Layer(il, "exp_probs_b", ".bias", {E}, TensorRole::kVector);
    Layer(il, "ffn_routed_down", ".weight", {H, L}, TensorRole::kMatrix);
    Layer(il, "ffn_gate_exps", ".weight", {L, F, E}, TensorRole::kExperts);
    Layer(il, "ffn_up_exps", ".weight", {L, F, E}, TensorRole::kExperts);
    Layer(il, "ffn_down_exps", ".weight", {F, L, E}, TensorRole::kExperts);
    Layer(il, "ffn_routed_norm", ".weight", {L}, TensorRole::kVector, /*optional=*/true);
    Layer(il, "ffn_routed_up", ".weight", {L, H}, TensorRole::kMatrix);
    if (S > 0) {
      Layer(il, "ffn_gate_shexp", ".weight", {H, S}, TensorRole::kMatrix);
      Layer(il, "ffn_up_shexp", ".weight", {H, S}, TensorRole::kMatrix);
      Layer(il, "ffn_down_shexp", ".weight", {S, H}, TensorRole::kMatrix);
    }
  }

  void Global(std::string name, std::string base, std::vector<int64_t> ne, TensorRole role) {
    out_.push_back(TensorSpec{std::move(name), std::move(base), -1, std::move(ne), role, false});
  }
  void Layer(int64_t il, const char* base, const char* suffix, std::vector<int64_t> ne,
             TensorRole role, bool optional = false) {
    out_.push_back(TensorSpec{absl::StrCat("blk.", il, ".", base, suffix), base, il,
                              std::move(ne), role, optional});
  }

  const K3Config& c_;
  std::vector<TensorSpec> out_;
};

std::vector<int64_t> StripTrailingOnes(std::vector<int64_t> ne) {
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

std::string ShapeString(const std::vector<int64_t>& ne) {
  return absl::StrCat("{", absl::StrJoin(ne, ", "), "}");
}

}  // namespace

uint64_t TensorSpec::n_elems() const {
  uint64_t n = 1;
  for (int64_t d : ne) n *= static_cast<uint64_t>(d);
  return n;
}

std::vector<TensorSpec> ExpectedTensors(const K3Config& config) {
  return ManifestBuilder(config).Build();
}

bool TypeAllowed(TensorRole role, quant::GgmlType type) {
  using quant::GgmlType;
  switch (role) {
    case TensorRole::kVector:
    case TensorRole::kConv:
      return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
    case TensorRole::kMatrix:
    case TensorRole::kExperts:
    case TensorRole::kHeadStack:
      return quant::Traits(type).must_have;
  }
  return false;
}

absl::Status ValidateManifest(const K3Config& config, const gguf::GgufFile& file) {
  std::vector<std::string> problems;
  std::unordered_set<std::string> expected_names;
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    expected_names.insert(spec.name);
    const gguf::TensorInfo* t = file.FindTensor(spec.name);
    if (t == nullptr) {
      if (!spec.optional) {
        problems.push_back(absl::StrCat("missing ", spec.name, " ", ShapeString(spec.ne)));
      }
      continue;
    }
    if (StripTrailingOnes(t->ne) != StripTrailingOnes(spec.ne)) {
      problems.push_back(absl::StrCat(spec.name, " has shape ", ShapeString(t->ne), ", expected ",
                                      ShapeString(spec.ne)));
    }
    if (!TypeAllowed(spec.role, t->type)) {
      problems.push_back(absl::StrCat(spec.name, " has type ", std::string(quant::TypeName(t->type)),
                                      ", which this engine does not compute with"));
    }
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!expected_names.contains(t.name)) {
      problems.push_back(absl::StrCat("unexpected tensor ", t.name, " (not part of kimi-k3 with ",
                                      "this config)"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  const size_t shown = std::min<size_t>(problems.size(), 40);
  std::string msg = absl::StrCat(file.shard_paths()[0], ": ", problems.size(),
                                 " tensor problem(s): ",
                                 absl::StrJoin(problems.begin(), problems.begin() + shown, "; "));
  if (shown < problems.size()) absl::StrAppend(&msg, "; ... and ", problems.size() - shown, " more");
  return absl::InvalidArgumentError(msg);
}

}  // namespace k3::model
