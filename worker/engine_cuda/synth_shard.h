// One rank's shard of a synthetic model, filled from the generator without a file: a binder for
// engine::BindGlobals / BindLayer (worker/engine/bind_shard.h), so the same slices as
// engine::BindWeights takes from a GGUF — rows, column
// bands, stacks of heads or experts (with a band of each), vectors — only this rank's bytes
// computed, weight tensors on the GPU when the device generator supports their type.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/quant/dequantize.h"
#include "worker/common/status_macros.h"
#include "worker/engine/model_weights.h"
#include "worker/engine_cuda/device_weights.h"
#include "worker/model/k3_config.h"
#include "worker/model/shard_rules.h"
#include "worker/synth/synth_model.h"
#include "worker/synth_cuda/synth_fill_device.h"

namespace k3::engine_cuda {

// ---- synthetic weights: one layer's host shard filled from the generator ---------------------
// The same slices as engine::BindWeights (worker/engine/model_weights.cc) takes from a file, filled
// directly from the generator (only this rank's bytes are computed): rows, column bands, stacks
// of heads or experts (with a band of each), vectors.

class SynthHost {
 public:
  // With `device`, the weight tensors the GPU generator supports are filled straight into device
  // buffers owned by `device` (synth_cuda: the same bytes); the rest (and f32 vectors) on the host.
  explicit SynthHost(const synth::SynthModel& m, DeviceArena* device = nullptr) : m_(m), device_(device) {}

  // The window filled on the GPU into a new device buffer, or nullptr when this tensor is filled
  // on the host.
  absl::StatusOr<uint8_t*> OnDevice(const synth::SynthTensor& t, const synth::SynthTensorWindow& w) {
    if (device_ == nullptr || !synth::SynthFillDeviceSupports(t.type, t.values)) return nullptr;
    synth::SynthFillParams p;
    if (!synth::SynthWindowParams(t, w, nullptr, &p)) {
      return absl::InvalidArgumentError(absl::StrCat(t.spec.name, ": window outside the tensor"));
    }
    K3_ASSIGN_OR_RETURN(uint8_t* buf, device_->Alloc<uint8_t>(synth::SynthFillBytes(p)));
    K3_CU(synth::SynthFillTensorWindow(t, w, buf, nullptr));
    ++device_fills_;
    return buf;
  }
  int64_t device_fills() const { return device_fills_; }

  // Runs fill(i0, i1) over [0, n) on up to 32 threads.
  template <class F>
  static void Parallel(int64_t n, F&& fill) {
    const int n_threads = std::max(1, std::min<int>(static_cast<int>(std::thread::hardware_concurrency()), 32));
    const int64_t per = (n + n_threads - 1) / n_threads;
    std::vector<std::thread> th;
    for (int i = 0; i < n_threads; ++i) {
      const int64_t i0 = i * per, i1 = std::min(n, i0 + per);
      if (i0 >= i1) break;
      th.emplace_back([&fill, i0, i1] { fill(i0, i1); });
    }
    for (auto& x : th) x.join();
  }

  absl::StatusOr<const synth::SynthTensor*> Find(const std::string& name) const {
    const synth::SynthTensor* t = m_.Find(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat("synthetic tensor ", name, " is missing"));
    return t;
  }
  uint8_t* Buffer(size_t n) {
    store_.push_back(std::make_unique<std::vector<uint8_t>>(std::max<size_t>(n, 1)));
    return store_.back()->data();
  }
  static size_t Bytes(quant::GgmlType type, int64_t n) { return quant::BytesFor(type, n).value(); }

  // Rows [begin, begin + n) of the tensor's rows (ne[0] elements each).
  absl::StatusOr<quant::QuantMatrix> Rows(const std::string& name, int64_t begin, int64_t n) {
    K3_ASSIGN_OR_RETURN(const synth::SynthTensor* t, Find(name));
    if (begin < 0 || n < 0 || begin + n > t->n_rows()) return absl::InvalidArgumentError(absl::StrCat(name, ": rows out of range"));
    const size_t rb = t->row_bytes();
    K3_ASSIGN_OR_RETURN(uint8_t* dev, OnDevice(*t, synth::SynthTensorWindow{0, 1, begin, n, 0, -1}));
    if (dev != nullptr) return quant::QuantMatrix{t->type, dev, n, t->spec.ne[0], rb};
    uint8_t* buf = Buffer(n * rb);
    Parallel(n, [&](int64_t r0, int64_t r1) { m_.FillRows(*t, begin + r0, r1 - r0, buf + r0 * rb); });
    return quant::QuantMatrix{t->type, buf, n, t->spec.ne[0], rb};
  }
  absl::StatusOr<quant::QuantMatrix> Matrix(const std::string& name) {
    K3_ASSIGN_OR_RETURN(const synth::SynthTensor* t, Find(name));
    return Rows(name, 0, t->n_rows());
  }
  // Columns [begin, begin + n) of every row (block-aligned).
  absl::StatusOr<quant::QuantMatrix> Cols(const std::string& name, int64_t begin, int64_t n) {
    K3_ASSIGN_OR_RETURN(const synth::SynthTensor* t, Find(name));
    if (begin == 0 && n == t->spec.ne[0]) return Matrix(name);
    K3_RETURN_IF_ERROR(m_.FillColumns(*t, 0, 0, begin, n, nullptr));  // checks the window
    const int64_t rows = t->n_rows();
    const size_t rb = Bytes(t->type, n);
    K3_ASSIGN_OR_RETURN(uint8_t* dev, OnDevice(*t, synth::SynthTensorWindow{0, 1, 0, -1, begin, n}));
    if (dev != nullptr) return quant::QuantMatrix{t->type, dev, rows, n, rb};
    uint8_t* buf = Buffer(rows * rb);
    Parallel(rows, [&](int64_t r0, int64_t r1) { (void)m_.FillColumns(*t, r0, r1 - r0, begin, n, buf + r0 * rb); });
    return quant::QuantMatrix{t->type, buf, rows, n, rb};
  }
  // Matrices [begin, begin + count) of a stack {cols, rows, n}, rows [row_begin, +row_n) of each.
  absl::StatusOr<engine::MatrixStack> Stack(const std::string& name, int64_t begin, int64_t count,
                                            int64_t row_begin = 0, int64_t row_n = -1) {
    K3_ASSIGN_OR_RETURN(const synth::SynthTensor* t, Find(name));
    const int64_t rows = t->spec.ne.size() > 1 ? t->spec.ne[1] : 1;
    const int64_t total = t->spec.ne.size() > 2 ? t->spec.ne[2] : 1;
    if (row_n < 0) row_n = rows;
    if (begin < 0 || begin + count > total || row_begin < 0 || row_begin + row_n > rows) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": stack slice out of range"));
    }
    const size_t rb = t->row_bytes(), per = row_n * rb;
    K3_ASSIGN_OR_RETURN(uint8_t* dev, OnDevice(*t, synth::SynthTensorWindow{begin, count, row_begin, row_n, 0, -1}));
    uint8_t* buf = dev != nullptr ? dev : Buffer(count * per);
    if (dev == nullptr) {
      Parallel(count, [&](int64_t e0, int64_t e1) {
        for (int64_t e = e0; e < e1; ++e) m_.FillRows(*t, (begin + e) * rows + row_begin, row_n, buf + e * per);
      });
    }
    engine::MatrixStack s;
    s.type = t->type;
    s.data = buf;
    s.cols = t->spec.ne[0];
    s.rows = row_n;
    s.count = count;
    s.row_bytes = rb;
    s.matrix_stride = per;
    return s;
  }
  // Matrices [begin, begin + count) of a stack, columns [col_begin, +col_n) of each.
  absl::StatusOr<engine::MatrixStack> StackCols(const std::string& name, int64_t begin, int64_t count,
                                                int64_t col_begin, int64_t col_n) {
    K3_ASSIGN_OR_RETURN(const synth::SynthTensor* t, Find(name));
    if (col_begin == 0 && col_n == t->spec.ne[0]) return Stack(name, begin, count);
    K3_RETURN_IF_ERROR(m_.FillColumns(*t, 0, 0, col_begin, col_n, nullptr));
    const int64_t rows = t->spec.ne.size() > 1 ? t->spec.ne[1] : 1;
    const int64_t total = t->spec.ne.size() > 2 ? t->spec.ne[2] : 1;
    if (begin < 0 || begin + count > total) return absl::InvalidArgumentError(absl::StrCat(name, ": stack slice out of range"));
    const size_t rb = Bytes(t->type, col_n), per = rows * rb;
    K3_ASSIGN_OR_RETURN(uint8_t* dev, OnDevice(*t, synth::SynthTensorWindow{begin, count, 0, -1, col_begin, col_n}));
    uint8_t* buf = dev != nullptr ? dev : Buffer(count * per);
    if (dev == nullptr) {
      Parallel(count, [&](int64_t e0, int64_t e1) {
        for (int64_t e = e0; e < e1; ++e) (void)m_.FillColumns(*t, (begin + e) * rows, rows, col_begin, col_n, buf + e * per);
      });
    }
    engine::MatrixStack s;
    s.type = t->type;
    s.data = buf;
    s.cols = col_n;
    s.rows = rows;
    s.count = count;
    s.row_bytes = rb;
    s.matrix_stride = per;
    return s;
  }
  // Elements [begin, begin + n) of a vector (n < 0: all), decoded to f32.
  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t begin = 0, int64_t n = -1) {
    K3_ASSIGN_OR_RETURN(const synth::SynthTensor* t, Find(name));
    const int64_t all = static_cast<int64_t>(t->spec.n_elems());
    if (n < 0) n = all;
    const int64_t be = t->block_elems;
    if (begin < 0 || begin + n > all || begin % be != 0 || n % be != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": elements [", begin, ", ", begin + n, ") not block-aligned"));
    }
    std::vector<uint8_t> raw(Bytes(t->type, n));
    m_.FillBlocks(*t, static_cast<uint64_t>(begin / be), static_cast<uint64_t>(n / be), raw.data());
    std::vector<float> v(n);
    quant::DequantizeRow(t->type, raw.data(), v.data(), n);
    return v;
  }
  bool Has(const std::string& name) const { return m_.Find(name) != nullptr; }
  void Clear() { store_.clear(); }

 private:
  const synth::SynthModel& m_;
  DeviceArena* device_;
  int64_t device_fills_ = 0;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> store_;
};

}  // namespace k3::engine_cuda
