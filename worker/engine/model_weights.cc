#include "worker/engine/model_weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/quant/dequantize.h"
#include "worker/common/status_macros.h"
#include "worker/gguf/gguf_file.h"

namespace k3::engine {
namespace {

size_t Bytes(quant::GgmlType type, int64_t n) { return quant::BytesFor(type, n).value(); }

// Binds tensors by name, slicing them to this rank's shard.
class Binder {
 public:
  Binder(const gguf::GgufFile& f, ModelWeights& w) : f_(f), w_(w) {}

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

  // Rows [begin, begin + n): contiguous, so a view into the mapping.
  absl::StatusOr<QuantMatrix> Rows(const std::string& name, int64_t begin, int64_t n) {
    K3_ASSIGN_OR_RETURN(QuantMatrix m, Matrix(name));
    m.data = static_cast<const uint8_t*>(m.data) + begin * m.row_bytes;
    m.rows = n;
    return m;
  }

  // Columns [begin, begin + n) of every row: copied out (begin and n are whole blocks).
  absl::StatusOr<QuantMatrix> Cols(const std::string& name, int64_t begin, int64_t n) {
    K3_ASSIGN_OR_RETURN(QuantMatrix m, Matrix(name));
    if (begin == 0 && n == m.cols) return m;
    const size_t off = Bytes(m.type, begin), rb = Bytes(m.type, n);
    auto buf = std::make_unique<std::vector<uint8_t>>(rb * m.rows);
    for (int64_t r = 0; r < m.rows; ++r) {
      std::memcpy(buf->data() + r * rb, static_cast<const uint8_t*>(m.data) + r * m.row_bytes + off, rb);
    }
    QuantMatrix out{m.type, buf->data(), m.rows, n, rb};
    w_.owned.push_back(std::move(buf));
    return out;
  }

  // Matrices [begin, begin + count) of a stack {cols, rows, n}, rows [row_begin, +row_n) of each.
  absl::StatusOr<MatrixStack> Stack(const std::string& name, int64_t begin, int64_t count,
                                    int64_t row_begin = 0, int64_t row_n = -1) {
    K3_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name));
    MatrixStack s;
    s.type = t->type;
    s.cols = t->ne[0];
    const int64_t rows = t->ne.size() > 1 ? t->ne[1] : 1;
    s.row_bytes = Bytes(t->type, s.cols);
    s.matrix_stride = rows * s.row_bytes;
    s.rows = row_n < 0 ? rows : row_n;
    s.count = count;
    s.data = t->data + begin * s.matrix_stride + row_begin * s.row_bytes;
    return s;
  }

  // Matrices [begin, begin + count) of a stack, columns [col_begin, +col_n) of each: copied.
  absl::StatusOr<MatrixStack> StackCols(const std::string& name, int64_t begin, int64_t count,
                                        int64_t col_begin, int64_t col_n) {
    K3_ASSIGN_OR_RETURN(MatrixStack full, Stack(name, begin, count));
    if (col_begin == 0 && col_n == full.cols) return full;
    const size_t off = Bytes(full.type, col_begin), rb = Bytes(full.type, col_n);
    auto buf = std::make_unique<std::vector<uint8_t>>(rb * full.rows * count);
    uint8_t* dst = buf->data();
    for (int64_t i = 0; i < count; ++i) {
      const uint8_t* src = full.data + i * full.matrix_stride;
      for (int64_t r = 0; r < full.rows; ++r, dst += rb) std::memcpy(dst, src + r * full.row_bytes + off, rb);
    }
    MatrixStack s = full;
    s.data = buf->data();
    s.cols = col_n;
    s.row_bytes = rb;
    s.matrix_stride = rb * full.rows;
    w_.owned.push_back(std::move(buf));
    return s;
  }

  // Elements [begin, begin + n) of a vector (n < 0: all), decoded to f32.
  absl::StatusOr<Vec> Vector(const std::string& name, int64_t begin = 0, int64_t n = -1) {
    K3_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name));
    if (n < 0) n = static_cast<int64_t>(t->n_elems);
    Vec v(n);
    quant::DequantizeRow(t->type, t->data + Bytes(t->type, begin), v.data(), n);
    return v;
  }

  bool Has(const std::string& name) const { return f_.FindTensor(name) != nullptr; }

 private:
  const gguf::GgufFile& f_;
  ModelWeights& w_;
};

std::string Blk(int64_t il, const char* rest) { return absl::StrCat("blk.", il, ".", rest); }

absl::Status BindKda(Binder& b, const model::K3Config& c, const model::RankShard& s, int64_t il,
                     KdaWeights& w) {
  const int64_t hd = c.kda_head_dim, c0 = s.head_begin * hd, cn = s.n_heads * hd;
  const int64_t taps = c.conv_kernel;
  K3_ASSIGN_OR_RETURN(w.q, b.Rows(Blk(il, "attn_q.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.k, b.Rows(Blk(il, "attn_k.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.v, b.Rows(Blk(il, "attn_v.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.conv_q, b.Vector(Blk(il, "ssm_conv1d_q.weight"), c0 * taps, cn * taps));
  K3_ASSIGN_OR_RETURN(w.conv_k, b.Vector(Blk(il, "ssm_conv1d_k.weight"), c0 * taps, cn * taps));
  K3_ASSIGN_OR_RETURN(w.conv_v, b.Vector(Blk(il, "ssm_conv1d_v.weight"), c0 * taps, cn * taps));
  K3_ASSIGN_OR_RETURN(w.f_a, b.Matrix(Blk(il, "ssm_f_a.weight")));
  K3_ASSIGN_OR_RETURN(w.f_b, b.Rows(Blk(il, "ssm_f_b.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.beta, b.Rows(Blk(il, "ssm_beta.weight"), s.head_begin, s.n_heads));
  K3_ASSIGN_OR_RETURN(w.a, b.Vector(Blk(il, "ssm_a"), s.head_begin, s.n_heads));
  K3_ASSIGN_OR_RETURN(w.dt_bias, b.Vector(Blk(il, "ssm_dt.bias"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.g, b.Rows(Blk(il, "ssm_g.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.norm, b.Vector(Blk(il, "ssm_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.out, b.Cols(Blk(il, "attn_output.weight"), c0, cn));
  return absl::OkStatus();
}

absl::Status BindMla(Binder& b, const model::K3Config& c, const model::RankShard& s, int64_t il,
                     MlaWeights& w) {
  const int64_t qk = c.mla_qk_head_dim(), vd = c.v_head_dim;
  K3_ASSIGN_OR_RETURN(w.q_a, b.Matrix(Blk(il, "attn_q_a.weight")));
  K3_ASSIGN_OR_RETURN(w.q_a_norm, b.Vector(Blk(il, "attn_q_a_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.q_b, b.Rows(Blk(il, "attn_q_b.weight"), s.head_begin * qk, s.n_heads * qk));
  K3_ASSIGN_OR_RETURN(w.kv_a, b.Matrix(Blk(il, "attn_kv_a_mqa.weight")));
  K3_ASSIGN_OR_RETURN(w.kv_a_norm, b.Vector(Blk(il, "attn_kv_a_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.k_b, b.Stack(Blk(il, "attn_k_b.weight"), s.head_begin, s.n_heads));
  K3_ASSIGN_OR_RETURN(w.v_b, b.Stack(Blk(il, "attn_v_b.weight"), s.head_begin, s.n_heads));
  w.has_gate = b.Has(Blk(il, "attn_gate.weight"));
  if (w.has_gate) {
    K3_ASSIGN_OR_RETURN(w.gate, b.Rows(Blk(il, "attn_gate.weight"), s.head_begin * vd, s.n_heads * vd));
  }
  K3_ASSIGN_OR_RETURN(w.out, b.Cols(Blk(il, "attn_output.weight"), s.head_begin * vd, s.n_heads * vd));
  return absl::OkStatus();
}

absl::Status BindDense(Binder& b, const model::RankShard& s, int64_t il, DenseFfnWeights& w) {
  K3_ASSIGN_OR_RETURN(w.gate, b.Rows(Blk(il, "ffn_gate.weight"), s.dense_begin, s.dense_width));
  K3_ASSIGN_OR_RETURN(w.up, b.Rows(Blk(il, "ffn_up.weight"), s.dense_begin, s.dense_width));
  K3_ASSIGN_OR_RETURN(w.down, b.Cols(Blk(il, "ffn_down.weight"), s.dense_begin, s.dense_width));
  return absl::OkStatus();
}

absl::Status BindMoe(Binder& b, const model::RankShard& s, int64_t il, MoeWeights& w) {
  K3_ASSIGN_OR_RETURN(w.router, b.Matrix(Blk(il, "ffn_gate_inp.weight")));
  K3_ASSIGN_OR_RETURN(w.selection_bias, b.Vector(Blk(il, "exp_probs_b.bias")));
  K3_ASSIGN_OR_RETURN(w.routed_down, b.Matrix(Blk(il, "ffn_routed_down.weight")));
  const int64_t e0 = s.expert_begin, ne = s.n_experts, f0 = s.expert_ffn_begin, fw = s.expert_ffn_width;
  K3_ASSIGN_OR_RETURN(w.gate_exps, b.Stack(Blk(il, "ffn_gate_exps.weight"), e0, ne, f0, fw));
  K3_ASSIGN_OR_RETURN(w.up_exps, b.Stack(Blk(il, "ffn_up_exps.weight"), e0, ne, f0, fw));
  K3_ASSIGN_OR_RETURN(w.down_exps, b.StackCols(Blk(il, "ffn_down_exps.weight"), e0, ne, f0, fw));
  w.has_routed_norm = b.Has(Blk(il, "ffn_routed_norm.weight"));
  if (w.has_routed_norm) {
    K3_ASSIGN_OR_RETURN(w.routed_norm, b.Vector(Blk(il, "ffn_routed_norm.weight")));
  }
  K3_ASSIGN_OR_RETURN(w.routed_up, b.Matrix(Blk(il, "ffn_routed_up.weight")));
  w.has_shared = b.Has(Blk(il, "ffn_gate_shexp.weight"));
  if (w.has_shared) {
    K3_ASSIGN_OR_RETURN(w.shared_gate, b.Rows(Blk(il, "ffn_gate_shexp.weight"), s.shared_begin, s.shared_width));
    K3_ASSIGN_OR_RETURN(w.shared_up, b.Rows(Blk(il, "ffn_up_shexp.weight"), s.shared_begin, s.shared_width));
    K3_ASSIGN_OR_RETURN(w.shared_down, b.Cols(Blk(il, "ffn_down_shexp.weight"), s.shared_begin, s.shared_width));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> BindWeights(const model::K3Config& c, const gguf::GgufFile& f,
                                         const model::RankShard& s) {
  ModelWeights w;
  Binder b(f, w);
  K3_ASSIGN_OR_RETURN(w.token_embd, b.Rows("token_embd.weight", s.vocab_begin, s.vocab_width));
  K3_ASSIGN_OR_RETURN(w.output, b.Rows("output.weight", s.vocab_begin, s.vocab_width));
  K3_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight"));
  K3_ASSIGN_OR_RETURN(w.output_res_score, b.Vector("output_res_score.weight"));
  w.layers.resize(c.n_layers);
  for (int64_t il = 0; il < c.n_layers; ++il) {
    LayerWeights& l = w.layers[il];
    K3_ASSIGN_OR_RETURN(l.attn_norm, b.Vector(Blk(il, "attn_norm.weight")));
    K3_ASSIGN_OR_RETURN(l.ffn_norm, b.Vector(Blk(il, "ffn_norm.weight")));
    K3_ASSIGN_OR_RETURN(l.attn_res_score, b.Vector(Blk(il, "attn_res_score.weight")));
    K3_ASSIGN_OR_RETURN(l.ffn_res_score, b.Vector(Blk(il, "ffn_res_score.weight")));
    K3_RETURN_IF_ERROR(c.is_mla(il) ? BindMla(b, c, s, il, l.mla) : BindKda(b, c, s, il, l.kda));
    K3_RETURN_IF_ERROR(c.is_dense(il) ? BindDense(b, s, il, l.dense) : BindMoe(b, s, il, l.moe));
  }
  return w;
}

}  // namespace k3::engine
