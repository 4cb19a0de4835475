#include "worker/engine/model_weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/quant/dequantize.h"
#include "worker/common/status_macros.h"
#include "worker/engine/bind_shard.h"
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

}  // namespace

absl::StatusOr<ModelWeights> BindWeights(const model::K3Config& c, const gguf::GgufFile& f,
                                         const model::RankShard& s) {
  ModelWeights w;
  Binder b(f, w);
  K3_RETURN_IF_ERROR(BindGlobals(b, s, w));
  w.layers.resize(c.n_layers);
  for (int64_t il = 0; il < c.n_layers; ++il) K3_RETURN_IF_ERROR(BindLayer(b, c, s, il, w.layers[il]));
  return w;
}

}  // namespace k3::engine
