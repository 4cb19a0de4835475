#include "worker/engine/model_weights.h"

#include "absl/strings/str_cat.h"
#include "kernels/quant/dequantize.h"
#include "worker/common/status_macros.h"
#include "worker/gguf/gguf_file.h"

namespace k3::engine {
namespace {

class Binder {
 public:
  explicit Binder(const gguf::GgufFile& f) : f_(f) {}

  absl::StatusOr<const gguf::TensorInfo*> Find(const std::string& name) {
    const gguf::TensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat("tensor ", name, " is missing"));
    if (t->data == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("tensor ", name, " has no data (header-only file)"));
    }
    if (!quant::CanDequantize(t->type)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has type ",
                                                     std::string(quant::TypeName(t->type)),
                                                     ", which this engine does not compute with"));
    }
    return t;
  }

  absl::StatusOr<QuantMatrix> Matrix(const std::string& name) {
    K3_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name));
    const int64_t cols = t->ne[0];
    const int64_t rows = static_cast<int64_t>(t->n_elems / cols);
    return QuantMatrix{t->type, t->data, rows, cols, static_cast<size_t>(t->n_bytes / rows)};
  }

  absl::StatusOr<MatrixStack> Stack(const std::string& name) {
    K3_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name));
    MatrixStack s;
    s.type = t->type;
    s.data = t->data;
    s.cols = t->ne[0];
    s.rows = t->ne.size() > 1 ? t->ne[1] : 1;
    s.count = t->ne.size() > 2 ? t->ne[2] : 1;
    s.row_bytes = static_cast<size_t>(t->n_bytes / (s.rows * s.count));
    return s;
  }

  absl::StatusOr<Vec> Vector(const std::string& name) {
    K3_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name));
    Vec v(t->n_elems);
    quant::DequantizeRow(t->type, t->data, v.data(), static_cast<int64_t>(t->n_elems));
    return v;
  }

  bool Has(const std::string& name) const { return f_.FindTensor(name) != nullptr; }

 private:
  const gguf::GgufFile& f_;
};

std::string Blk(int64_t il, const char* rest) { return absl::StrCat("blk.", il, ".", rest); }

absl::Status BindKda(Binder& b, int64_t il, KdaWeights& w) {
  K3_ASSIGN_OR_RETURN(w.q, b.Matrix(Blk(il, "attn_q.weight")));
  K3_ASSIGN_OR_RETURN(w.k, b.Matrix(Blk(il, "attn_k.weight")));
  K3_ASSIGN_OR_RETURN(w.v, b.Matrix(Blk(il, "attn_v.weight")));
  K3_ASSIGN_OR_RETURN(w.conv_q, b.Vector(Blk(il, "ssm_conv1d_q.weight")));
  K3_ASSIGN_OR_RETURN(w.conv_k, b.Vector(Blk(il, "ssm_conv1d_k.weight")));
  K3_ASSIGN_OR_RETURN(w.conv_v, b.Vector(Blk(il, "ssm_conv1d_v.weight")));
  K3_ASSIGN_OR_RETURN(w.f_a, b.Matrix(Blk(il, "ssm_f_a.weight")));
  K3_ASSIGN_OR_RETURN(w.f_b, b.Matrix(Blk(il, "ssm_f_b.weight")));
  K3_ASSIGN_OR_RETURN(w.beta, b.Matrix(Blk(il, "ssm_beta.weight")));
  K3_ASSIGN_OR_RETURN(w.a, b.Vector(Blk(il, "ssm_a")));
  K3_ASSIGN_OR_RETURN(w.dt_bias, b.Vector(Blk(il, "ssm_dt.bias")));
  K3_ASSIGN_OR_RETURN(w.g, b.Matrix(Blk(il, "ssm_g.weight")));
  K3_ASSIGN_OR_RETURN(w.norm, b.Vector(Blk(il, "ssm_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.out, b.Matrix(Blk(il, "attn_output.weight")));
  return absl::OkStatus();
}

absl::Status BindMla(Binder& b, int64_t il, MlaWeights& w) {
  K3_ASSIGN_OR_RETURN(w.q_a, b.Matrix(Blk(il, "attn_q_a.weight")));
  K3_ASSIGN_OR_RETURN(w.q_a_norm, b.Vector(Blk(il, "attn_q_a_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.q_b, b.Matrix(Blk(il, "attn_q_b.weight")));
  K3_ASSIGN_OR_RETURN(w.kv_a, b.Matrix(Blk(il, "attn_kv_a_mqa.weight")));
  K3_ASSIGN_OR_RETURN(w.kv_a_norm, b.Vector(Blk(il, "attn_kv_a_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.k_b, b.Stack(Blk(il, "attn_k_b.weight")));
  K3_ASSIGN_OR_RETURN(w.v_b, b.Stack(Blk(il, "attn_v_b.weight")));
  w.has_gate = b.Has(Blk(il, "attn_gate.weight"));
  if (w.has_gate) {
    K3_ASSIGN_OR_RETURN(w.gate, b.Matrix(Blk(il, "attn_gate.weight")));
  }
  K3_ASSIGN_OR_RETURN(w.out, b.Matrix(Blk(il, "attn_output.weight")));
  return absl::OkStatus();
}

absl::Status BindDense(Binder& b, int64_t il, DenseFfnWeights& w) {
  K3_ASSIGN_OR_RETURN(w.gate, b.Matrix(Blk(il, "ffn_gate.weight")));
  K3_ASSIGN_OR_RETURN(w.up, b.Matrix(Blk(il, "ffn_up.weight")));
  K3_ASSIGN_OR_RETURN(w.down, b.Matrix(Blk(il, "ffn_down.weight")));
  return absl::OkStatus();
}

absl::Status BindMoe(Binder& b, int64_t il, MoeWeights& w) {
  K3_ASSIGN_OR_RETURN(w.router, b.Matrix(Blk(il, "ffn_gate_inp.weight")));
  K3_ASSIGN_OR_RETURN(w.selection_bias, b.Vector(Blk(il, "exp_probs_b.bias")));
  K3_ASSIGN_OR_RETURN(w.routed_down, b.Matrix(Blk(il, "ffn_routed_down.weight")));
  K3_ASSIGN_OR_RETURN(w.gate_exps, b.Stack(Blk(il, "ffn_gate_exps.weight")));
  K3_ASSIGN_OR_RETURN(w.up_exps, b.Stack(Blk(il, "ffn_up_exps.weight")));
  K3_ASSIGN_OR_RETURN(w.down_exps, b.Stack(Blk(il, "ffn_down_exps.weight")));
  w.has_routed_norm = b.Has(Blk(il, "ffn_routed_norm.weight"));
  if (w.has_routed_norm) {
    K3_ASSIGN_OR_RETURN(w.routed_norm, b.Vector(Blk(il, "ffn_routed_norm.weight")));
  }
  K3_ASSIGN_OR_RETURN(w.routed_up, b.Matrix(Blk(il, "ffn_routed_up.weight")));
  w.has_shared = b.Has(Blk(il, "ffn_gate_shexp.weight"));
  if (w.has_shared) {
    K3_ASSIGN_OR_RETURN(w.shared_gate, b.Matrix(Blk(il, "ffn_gate_shexp.weight")));
    K3_ASSIGN_OR_RETURN(w.shared_up, b.Matrix(Blk(il, "ffn_up_shexp.weight")));
    K3_ASSIGN_OR_RETURN(w.shared_down, b.Matrix(Blk(il, "ffn_down_shexp.weight")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> BindWeights(const model::K3Config& c, const gguf::GgufFile& f) {
  Binder b(f);
  ModelWeights w;
  K3_ASSIGN_OR_RETURN(w.token_embd, b.Matrix("token_embd.weight"));
  K3_ASSIGN_OR_RETURN(w.output, b.Matrix("output.weight"));
  K3_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight"));
  K3_ASSIGN_OR_RETURN(w.output_res_score, b.Vector("output_res_score.weight"));
  w.layers.resize(c.n_layers);
  for (int64_t il = 0; il < c.n_layers; ++il) {
    LayerWeights& l = w.layers[il];
    K3_ASSIGN_OR_RETURN(l.attn_norm, b.Vector(Blk(il, "attn_norm.weight")));
    K3_ASSIGN_OR_RETURN(l.ffn_norm, b.Vector(Blk(il, "ffn_norm.weight")));
    K3_ASSIGN_OR_RETURN(l.attn_res_score, b.Vector(Blk(il, "attn_res_score.weight")));
    K3_ASSIGN_OR_RETURN(l.ffn_res_score, b.Vector(Blk(il, "ffn_res_score.weight")));
    K3_RETURN_IF_ERROR(c.is_mla(il) ? BindMla(b, il, l.mla) : BindKda(b, il, l.kda));
    K3_RETURN_IF_ERROR(c.is_dense(il) ? BindDense(b, il, l.dense) : BindMoe(b, il, l.moe));
  }
  return w;
}

}  // namespace k3::engine
