#include "worker/engine_cuda/cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/kda/kda.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/cuda/moe/moe_router.h"
#include "kernels/cuda/norm/norm.h"
#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/quant_gemv/quant_gemv.h"
#include "kernels/cuda/residual_mix/residual_mix.h"
#include "kernels/cuda/short_conv/short_conv.h"
#include "kernels/quant/dequantize.h"
#include "worker/common/status_macros.h"
#include "worker/engine/model_weights.h"
#include "worker/engine_cuda/engine_kernels.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/tensor_manifest.h"
#include "worker/synth/synth_model.h"
#include "worker/synth_cuda/synth_fill_device.h"

namespace k3::engine_cuda {
namespace {

absl::Status Cu(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}
#define K3_CU(expr) K3_RETURN_IF_ERROR(Cu((expr), #expr))

// Device views of the weights.
struct DMat {
  quant::GgmlType type = quant::GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  // The direct-load GEMV's copy (Q8_0 repacked into quant and scale planes; F32/F16/BF16: data
  // itself), or nullptr: decode steps then use the block-layout GEMV.
  const void* direct = nullptr;
};
struct DStack {
  quant::GgmlType type = quant::GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0, count = 0;
  size_t row_bytes = 0, matrix_stride = 0;
};
using DVec = const float*;

struct DKda { DMat q, k, v, f_a, f_b, beta, g, out; DVec conv_q, conv_k, conv_v, a, dt_bias, norm; };
struct DMla { DMat q_a, q_b, kv_a, gate, out; DVec q_a_norm, kv_a_norm; DStack k_b, v_b; bool has_gate = false; };
struct DDense { DMat gate, up, down; };
struct DMoe {
  DMat router, routed_down, routed_up, shared_gate, shared_up, shared_down;
  DVec selection_bias, routed_norm;
  DStack gate_exps, up_exps, down_exps;
  bool has_routed_norm = false, has_shared = false;
};
struct DLayer { DVec attn_norm, ffn_norm, attn_res_score, ffn_res_score; DKda kda; DMla mla; DDense dense; DMoe moe; };

}  // namespace

struct CudaEngine::Impl {
  std::vector<void*> allocs;
  DMat token_embd, output;
  bool embd_f32 = false;
  DVec output_norm = nullptr, output_res_score = nullptr;
  std::vector<DLayer> layers;
  // state
  float* kda_state = nullptr;  // [n_kda][max_seqs][state_floats]
  float* conv_hist = nullptr;  // [n_kda][max_seqs][3][taps-1][D]
  void* mla_cache = nullptr;   // [n_pages][n_mla][page_size][row]
  int64_t n_pages = 0, pages_per_seq = 0;
  // per-step metadata: [tokens B][seq_lens B][slots B][block tables B x pages_per_seq]
  int32_t* meta_h = nullptr;
  int32_t* meta_d = nullptr;
  size_t meta_ints = 0;
  // prefill metadata: [tokens R][seq_lens R][slot 1][block table pages_per_seq], R = rows
  int32_t* pmeta_h = nullptr;
  int32_t* pmeta_d = nullptr;
  size_t pmeta_ints = 0;
  int64_t rows = 0;  // rows every activation buffer holds: max(max_batch, prefill_chunk)
  // activations
  std::vector<float*> bank;
  float *x, *cur, *h, *delta, *mix_ws, *y, *logits;
  float *kq, *kk, *kv_, *pq, *pk, *pv, *fa, *g, *beta, *o, *gp;
  float *qa, *qf, *mkv, *qabs, *lat, *mo, *mgate, *mla_ws;
  int64_t mla_ws_floats = 0;
  float *rlogits, *wts, *wloc, *r, *xe, *ge, *ue, *ye, *reduce, *sg, *su, *dg, *du;
  int32_t *ids, *idloc;
  // MoE grouped by expert (steps of more than kGemvMaxRows rows): offsets, rows, slots, scratch
  int32_t *group_offsets = nullptr, *group_rows = nullptr, *group_slot = nullptr;
  void* group_ws = nullptr;
  void* gemm_ws = nullptr;  // the GEMM's f16 copy of its activations
  size_t gemm_ws_bytes = 0;
  float* logits_h = nullptr;  // pinned [B][band]

  ~Impl() {
    for (void* p : allocs) cudaFree(p);
    if (meta_h) cudaFreeHost(meta_h);
    if (pmeta_h) cudaFreeHost(pmeta_h);
    if (logits_h) cudaFreeHost(logits_h);
  }
  template <class T>
  absl::StatusOr<T*> Alloc(size_t n) {
    void* p = nullptr;
    K3_CU(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    allocs.push_back(p);
    return static_cast<T*>(p);
  }
};

namespace {

// Uploads host views of one rank's shard (engine::ModelWeights), tensor by tensor.
class Uploader {
 public:
  Uploader(CudaEngine::Impl& impl, uint64_t& bytes, bool direct) : impl_(impl), bytes_(bytes), direct_(direct) {}

  // Gives d its direct-GEMV form where the type has one (Q8_0: a repacked copy, made on the GPU).
  absl::Status AddDirect(DMat& d) {
    if (!direct_ || !cuda::QuantGemvDirectSupports(d.type)) return absl::OkStatus();
    if (d.type == quant::GgmlType::kQ8_0) {
      if (d.cols % 32 != 0) return absl::OkStatus();
      K3_ASSIGN_OR_RETURN(uint8_t* dst, impl_.Alloc<uint8_t>(cuda::RepackedQ8_0Bytes(d.rows, d.cols)));
      K3_CU(cuda::RepackQ8_0(d.data, d.rows, d.cols, dst, nullptr));
      d.direct = dst;
      direct_bytes_ += cuda::RepackedQ8_0Bytes(d.rows, d.cols);
    } else if (d.cols % 8 == 0) {
      d.direct = d.data;
    }
    return absl::OkStatus();
  }
  uint64_t direct_bytes() const { return direct_bytes_; }

  absl::StatusOr<DMat> Mat(const quant::QuantMatrix& m) {
    if (!cuda::QuantGemvSupports(m.type)) {
      return absl::InvalidArgumentError(absl::StrCat("no GPU GEMV for type ", std::string(quant::TypeName(m.type))));
    }
    const size_t n = static_cast<size_t>(m.rows) * m.row_bytes;
    if (OnDevice(m.data)) {  // filled in place on the GPU (synthetic weights): adopt it
      bytes_ += n;
      DMat d{m.type, m.data, m.rows, m.cols, m.row_bytes};
      K3_RETURN_IF_ERROR(AddDirect(d));
      return d;
    }
    K3_ASSIGN_OR_RETURN(uint8_t* d, impl_.Alloc<uint8_t>(n));
    K3_CU(cudaMemcpy(d, m.data, n, cudaMemcpyHostToDevice));
    bytes_ += n;
    DMat dm{m.type, d, m.rows, m.cols, m.row_bytes};
    K3_RETURN_IF_ERROR(AddDirect(dm));
    return dm;
  }
  absl::StatusOr<DStack> Stack(const engine::MatrixStack& s) {
    const size_t per = static_cast<size_t>(s.rows) * s.row_bytes;
    if (OnDevice(s.data) && s.matrix_stride == per) {
      bytes_ += per * s.count;
      return DStack{s.type, s.data, s.rows, s.cols, s.count, s.row_bytes, per};
    }
    K3_ASSIGN_OR_RETURN(uint8_t* d, impl_.Alloc<uint8_t>(per * s.count));
    for (int64_t i = 0; i < s.count; ++i) {
      K3_CU(cudaMemcpy(d + i * per, s.data + i * s.matrix_stride, per, cudaMemcpyHostToDevice));
    }
    bytes_ += per * s.count;
    return DStack{s.type, d, s.rows, s.cols, s.count, s.row_bytes, per};
  }
  absl::StatusOr<DVec> Vec(const std::vector<float>& v) {
    K3_ASSIGN_OR_RETURN(float* d, impl_.Alloc<float>(v.size()));
    K3_CU(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    bytes_ += v.size() * sizeof(float);
    return d;
  }

  absl::Status Layer(const model::K3Config& c, int64_t il, const engine::LayerWeights& l, DLayer& d) {
    K3_ASSIGN_OR_RETURN(d.attn_norm, Vec(l.attn_norm));
    K3_ASSIGN_OR_RETURN(d.ffn_norm, Vec(l.ffn_norm));
    K3_ASSIGN_OR_RETURN(d.attn_res_score, Vec(l.attn_res_score));
    K3_ASSIGN_OR_RETURN(d.ffn_res_score, Vec(l.ffn_res_score));
    if (c.is_mla(il)) {
      const engine::MlaWeights& w = l.mla;
      DMla& m = d.mla;
      K3_ASSIGN_OR_RETURN(m.q_a, Mat(w.q_a));
      K3_ASSIGN_OR_RETURN(m.q_a_norm, Vec(w.q_a_norm));
      K3_ASSIGN_OR_RETURN(m.q_b, Mat(w.q_b));
      K3_ASSIGN_OR_RETURN(m.kv_a, Mat(w.kv_a));
      K3_ASSIGN_OR_RETURN(m.kv_a_norm, Vec(w.kv_a_norm));
      K3_ASSIGN_OR_RETURN(m.k_b, Stack(w.k_b));
      K3_ASSIGN_OR_RETURN(m.v_b, Stack(w.v_b));
      m.has_gate = w.has_gate;
      if (w.has_gate) { K3_ASSIGN_OR_RETURN(m.gate, Mat(w.gate)); }
      K3_ASSIGN_OR_RETURN(m.out, Mat(w.out));
    } else {
      const engine::KdaWeights& w = l.kda;
      DKda& k = d.kda;
      K3_ASSIGN_OR_RETURN(k.q, Mat(w.q));
      K3_ASSIGN_OR_RETURN(k.k, Mat(w.k));
      K3_ASSIGN_OR_RETURN(k.v, Mat(w.v));
      K3_ASSIGN_OR_RETURN(k.conv_q, Vec(w.conv_q));
      K3_ASSIGN_OR_RETURN(k.conv_k, Vec(w.conv_k));
      K3_ASSIGN_OR_RETURN(k.conv_v, Vec(w.conv_v));
      K3_ASSIGN_OR_RETURN(k.f_a, Mat(w.f_a));
      K3_ASSIGN_OR_RETURN(k.f_b, Mat(w.f_b));
      K3_ASSIGN_OR_RETURN(k.beta, Mat(w.beta));
      K3_ASSIGN_OR_RETURN(k.a, Vec(w.a));
      K3_ASSIGN_OR_RETURN(k.dt_bias, Vec(w.dt_bias));
      K3_ASSIGN_OR_RETURN(k.g, Mat(w.g));
      K3_ASSIGN_OR_RETURN(k.norm, Vec(w.norm));
      K3_ASSIGN_OR_RETURN(k.out, Mat(w.out));
    }
    if (c.is_dense(il)) {
      K3_ASSIGN_OR_RETURN(d.dense.gate, Mat(l.dense.gate));
      K3_ASSIGN_OR_RETURN(d.dense.up, Mat(l.dense.up));
      K3_ASSIGN_OR_RETURN(d.dense.down, Mat(l.dense.down));
    } else {
      const engine::MoeWeights& w = l.moe;
      DMoe& m = d.moe;
      K3_ASSIGN_OR_RETURN(m.router, Mat(w.router));
      K3_ASSIGN_OR_RETURN(m.selection_bias, Vec(w.selection_bias));
      K3_ASSIGN_OR_RETURN(m.routed_down, Mat(w.routed_down));
      K3_ASSIGN_OR_RETURN(m.gate_exps, Stack(w.gate_exps));
      K3_ASSIGN_OR_RETURN(m.up_exps, Stack(w.up_exps));
      K3_ASSIGN_OR_RETURN(m.down_exps, Stack(w.down_exps));
      m.has_routed_norm = w.has_routed_norm;
      if (w.has_routed_norm) { K3_ASSIGN_OR_RETURN(m.routed_norm, Vec(w.routed_norm)); }
      K3_ASSIGN_OR_RETURN(m.routed_up, Mat(w.routed_up));
      m.has_shared = w.has_shared;
      if (w.has_shared) {
        K3_ASSIGN_OR_RETURN(m.shared_gate, Mat(w.shared_gate));
        K3_ASSIGN_OR_RETURN(m.shared_up, Mat(w.shared_up));
        K3_ASSIGN_OR_RETURN(m.shared_down, Mat(w.shared_down));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Globals(const model::K3Config& c, const engine::ModelWeights& w) {
    const quant::QuantMatrix& e = w.token_embd;
    if (EmbedSupports(e.type)) {
      const size_t n = static_cast<size_t>(e.rows) * e.row_bytes;
      K3_ASSIGN_OR_RETURN(uint8_t* d, impl_.Alloc<uint8_t>(n));
      K3_CU(cudaMemcpy(d, e.data, n, cudaMemcpyHostToDevice));
      impl_.token_embd = DMat{e.type, d, e.rows, e.cols, e.row_bytes};
      bytes_ += n;
    } else {  // IQ types: decoded once to f32 rows
      std::vector<float> rows(static_cast<size_t>(e.rows) * c.hidden);
      for (int64_t r = 0; r < e.rows; ++r) {
        quant::DequantizeRow(e.type, static_cast<const uint8_t*>(e.data) + r * e.row_bytes, &rows[r * c.hidden], c.hidden);
      }
      K3_ASSIGN_OR_RETURN(DVec d, Vec(rows));
      impl_.token_embd = DMat{quant::GgmlType::kF32, d, e.rows, c.hidden, static_cast<size_t>(c.hidden) * 4};
    }
    K3_ASSIGN_OR_RETURN(impl_.output, Mat(w.output));
    K3_ASSIGN_OR_RETURN(impl_.output_norm, Vec(w.output_norm));
    K3_ASSIGN_OR_RETURN(impl_.output_res_score, Vec(w.output_res_score));
    return absl::OkStatus();
  }

 private:
  static bool OnDevice(const void* p) {
    cudaPointerAttributes a{};
    return p != nullptr && cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
  }
  CudaEngine::Impl& impl_;
  uint64_t& bytes_;
  bool direct_;
  uint64_t direct_bytes_ = 0;
};

// ---- synthetic weights: one layer's host shard filled from the generator ---------------------
// The same slices as engine::BindWeights (worker/engine/model_weights.cc) takes from a file, filled
// directly from the generator (only this rank's bytes are computed): rows, column bands, stacks
// of heads or experts (with a band of each), vectors.

class SynthHost {
 public:
  // With `device`, the weight tensors the GPU generator supports are filled straight into device
  // buffers owned by `device` (synth_cuda: the same bytes); the rest (and f32 vectors) on the host.
  explicit SynthHost(const synth::SynthModel& m, CudaEngine::Impl* device = nullptr) : m_(m), device_(device) {}

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
  CudaEngine::Impl* device_;
  int64_t device_fills_ = 0;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> store_;
};

std::string Blk(int64_t il, const char* rest) { return absl::StrCat("blk.", il, ".", rest); }

// One layer of this rank's shard: the slices of BindKda / BindMla / BindDense / BindMoe.
absl::Status SynthLayer(SynthHost& b, const model::K3Config& c, const model::RankShard& s, int64_t il,
                        engine::LayerWeights& l) {
  K3_ASSIGN_OR_RETURN(l.attn_norm, b.Vector(Blk(il, "attn_norm.weight")));
  K3_ASSIGN_OR_RETURN(l.ffn_norm, b.Vector(Blk(il, "ffn_norm.weight")));
  K3_ASSIGN_OR_RETURN(l.attn_res_score, b.Vector(Blk(il, "attn_res_score.weight")));
  K3_ASSIGN_OR_RETURN(l.ffn_res_score, b.Vector(Blk(il, "ffn_res_score.weight")));
  if (c.is_mla(il)) {
    engine::MlaWeights& w = l.mla;
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
  } else {
    engine::KdaWeights& w = l.kda;
    const int64_t hd = c.kda_head_dim, c0 = s.head_begin * hd, cn = s.n_heads * hd, taps = c.conv_kernel;
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
  }
  if (c.is_dense(il)) {
    K3_ASSIGN_OR_RETURN(l.dense.gate, b.Rows(Blk(il, "ffn_gate.weight"), s.dense_begin, s.dense_width));
    K3_ASSIGN_OR_RETURN(l.dense.up, b.Rows(Blk(il, "ffn_up.weight"), s.dense_begin, s.dense_width));
    K3_ASSIGN_OR_RETURN(l.dense.down, b.Cols(Blk(il, "ffn_down.weight"), s.dense_begin, s.dense_width));
  } else {
    engine::MoeWeights& w = l.moe;
    const int64_t e0 = s.expert_begin, ne = s.n_experts, f0 = s.expert_ffn_begin, fw = s.expert_ffn_width;
    K3_ASSIGN_OR_RETURN(w.router, b.Matrix(Blk(il, "ffn_gate_inp.weight")));
    K3_ASSIGN_OR_RETURN(w.selection_bias, b.Vector(Blk(il, "exp_probs_b.bias")));
    K3_ASSIGN_OR_RETURN(w.routed_down, b.Matrix(Blk(il, "ffn_routed_down.weight")));
    K3_ASSIGN_OR_RETURN(w.gate_exps, b.Stack(Blk(il, "ffn_gate_exps.weight"), e0, ne, f0, fw));
    K3_ASSIGN_OR_RETURN(w.up_exps, b.Stack(Blk(il, "ffn_up_exps.weight"), e0, ne, f0, fw));
    K3_ASSIGN_OR_RETURN(w.down_exps, b.StackCols(Blk(il, "ffn_down_exps.weight"), e0, ne, f0, fw));
    w.has_routed_norm = b.Has(Blk(il, "ffn_routed_norm.weight"));
    if (w.has_routed_norm) { K3_ASSIGN_OR_RETURN(w.routed_norm, b.Vector(Blk(il, "ffn_routed_norm.weight"))); }
    K3_ASSIGN_OR_RETURN(w.routed_up, b.Matrix(Blk(il, "ffn_routed_up.weight")));
    w.has_shared = b.Has(Blk(il, "ffn_gate_shexp.weight"));
    if (w.has_shared) {
      K3_ASSIGN_OR_RETURN(w.shared_gate, b.Rows(Blk(il, "ffn_gate_shexp.weight"), s.shared_begin, s.shared_width));
      K3_ASSIGN_OR_RETURN(w.shared_up, b.Rows(Blk(il, "ffn_up_shexp.weight"), s.shared_begin, s.shared_width));
      K3_ASSIGN_OR_RETURN(w.shared_down, b.Cols(Blk(il, "ffn_down_shexp.weight"), s.shared_begin, s.shared_width));
    }
  }
  return absl::OkStatus();
}

// GEMV helpers.
cudaError_t Gemv(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                 cudaStream_t s) {
  if (w.direct != nullptr) {  // the direct-load kernel (decode-sized steps)
    cuda::QuantGemvDirectParams d;
    d.type = w.type;
    d.weight = w.direct;
    d.rows = w.rows;
    d.cols = w.cols;
    d.x = x;
    d.x_stride = x_stride;
    d.y = y;
    d.y_stride = y_stride;
    d.n_tokens = n;
    return cuda::QuantGemvDirect(d, s);
  }
  cuda::QuantGemvParams p;
  p.type = w.type;
  p.weight = w.data;
  p.rows = w.rows;
  p.cols = w.cols;
  p.row_bytes = w.row_bytes;
  p.x = x;
  p.x_stride = x_stride;
  p.y = y;
  p.y_stride = y_stride;
  p.n_tokens = n;
  return cuda::QuantGemv(p, s);
}

// Batched: slot i uses matrix ids[i] (or i), its x at x + i*x_mat, y at y + i*y_mat.
cudaError_t GemvStack(const DStack& w, const int32_t* ids, int64_t n_mats, const float* x, int64_t x_stride,
                      int64_t x_mat, float* y, int64_t y_stride, int64_t y_mat, int64_t n_tokens, cudaStream_t s) {
  cuda::QuantGemvParams p;
  p.type = w.type;
  p.weight = w.data;
  p.rows = w.rows;
  p.cols = w.cols;
  p.row_bytes = w.row_bytes;
  p.n_mats = n_mats;
  p.mat_stride_bytes = static_cast<int64_t>(w.matrix_stride);
  p.mat_ids = ids;
  p.x = x;
  p.x_stride = x_stride;
  p.x_mat_stride = x_mat;
  p.y = y;
  p.y_stride = y_stride;
  p.y_mat_stride = y_mat;
  p.n_tokens = n_tokens;
  return cuda::QuantGemv(p, s);
}

// Steps of more rows than this take the tensor-core GEMM (f16 operands, f32 accumulation) for
// their products; up to it, the f32 GEMV (exact up to summation order, batch-invariant).
constexpr int64_t kGemvMaxRows = cuda::kQuantGemvMaxTokens;

// Scratch of the tensor-core GEMM (its f16 copy of the activations).
struct GemmScratch {
  void* data = nullptr;
  size_t bytes = 0;
};

// y = W x for n rows: GEMV or GEMM by row count (exact_only: always the GEMV).
cudaError_t Product(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                    bool exact_only, GemmScratch ws, cudaStream_t s) {
  if (exact_only || n <= kGemvMaxRows || !cuda::QuantGemmSupports(w.type) || w.cols % 32 != 0) {
    return Gemv(w, x, x_stride, y, y_stride, n, s);
  }
  cuda::QuantGemmParams p;
  p.type = w.type;
  p.weight = w.data;
  p.rows = w.rows;
  p.cols = w.cols;
  p.row_bytes = w.row_bytes;
  p.x = x;
  p.x_stride = x_stride;
  p.y = y;
  p.y_stride = y_stride;
  p.n_tokens = n;
  p.workspace = ws.data;
  p.workspace_bytes = ws.bytes;
  return cuda::QuantGemm(p, s);
}

// Matrix i of a stack as a plain matrix.
DMat Slice(const DStack& w, int64_t i) {
  return DMat{w.type, static_cast<const uint8_t*>(w.data) + i * w.matrix_stride, w.rows, w.cols, w.row_bytes};
}

// Grouped expert product: rows [offsets[g], offsets[g+1]) of the grouped sequence through expert g.
// x_rows (when set) names rows of x, which has x_src_rows rows.
cudaError_t GroupedProduct(const DStack& w, int64_t n_groups, const int32_t* offsets, const int32_t* x_rows,
                           int64_t x_src_rows, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                           int64_t n_rows, GemmScratch ws, cudaStream_t s) {
  cuda::QuantGemmParams p;
  p.type = w.type;
  p.weight = w.data;
  p.rows = w.rows;
  p.cols = w.cols;
  p.row_bytes = w.row_bytes;
  p.mat_stride_bytes = static_cast<int64_t>(w.matrix_stride);
  p.x = x;
  p.x_stride = x_stride;
  p.x_rows = x_rows;
  p.y = y;
  p.y_stride = y_stride;
  p.n_tokens = n_rows;
  p.n_groups = n_groups;
  p.group_offsets = offsets;
  p.x_src_rows = x_src_rows;
  p.workspace = ws.data;
  p.workspace_bytes = ws.bytes;
  return cuda::QuantGemm(p, s);
}

cudaError_t Rms(const float* x, float* y, const float* w, int64_t n, int64_t width, float eps, cudaStream_t s,
                int64_t groups = 1, const float* gate = nullptr, cuda::NormKind kind = cuda::NormKind::kRms) {
  cuda::RowNormParams p;
  p.x = x;
  p.y = y;
  p.weight = w;
  p.gate = gate;
  p.n_tokens = n;
  p.n_groups = groups;
  p.width = width;
  p.x_stride = groups * width;
  p.y_stride = groups * width;
  p.gate_stride = groups * width;
  p.eps = eps;
  p.kind = kind;
  return cuda::RowNorm(p, s);
}

cudaError_t SituInto(float* g, const float* u, int64_t rows, int64_t width, const model::K3Config& c,
                     cudaStream_t s) {
  cuda::SituParams p;
  p.g = g;
  p.u = u;
  p.out = g;
  p.n_tokens = rows;
  p.width = width;
  p.g_stride = width;
  p.u_stride = width;
  p.out_stride = width;
  p.beta = c.situ_beta;
  p.lambda = c.situ_linear_beta;
  return cuda::Situ(p, s);
}

uint64_t MatBytes(const DMat& m) { return static_cast<uint64_t>(m.rows) * m.row_bytes; }

}  // namespace

CudaEngine::CudaEngine() : impl_(std::make_unique<Impl>()) {}

CudaEngine::~CudaEngine() {
  for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g);
  impl_.reset();
  if (stream_ && own_stream_) cudaStreamDestroy(stream_);
}

absl::Status CudaEngine::CheckRanks(const CudaEngineOptions& o) {
  if (o.rank < 0 || o.rank >= o.plan.ranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", o.rank, " outside the plan's ", o.plan.ranks, " ranks"));
  }
  if (o.plan.ranks > 1 && o.comm == nullptr) {
    return absl::InvalidArgumentError("a plan of several ranks needs a device communicator (NCCL)");
  }
  if (o.plan.ranks > 1 && o.stream == nullptr) {
    return absl::InvalidArgumentError("a plan of several ranks needs the communicator's stream in the options");
  }
  if (o.comm != nullptr && (o.comm->size() != o.plan.ranks || o.comm->rank() != o.rank)) {
    return absl::InvalidArgumentError(absl::StrCat("communicator is rank ", o.comm->rank(), " of ", o.comm->size(),
                                                   ", the plan says rank ", o.rank, " of ", o.plan.ranks));
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::AllReduce(float* data, int64_t n) {
  if (comm_ == nullptr) return absl::OkStatus();
  return comm_->AllReduceSum(data, n);
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Open(const std::string& path,
                                                             const CudaEngineOptions& options) {
  std::unique_ptr<CudaEngine> e(new CudaEngine());
  K3_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  K3_ASSIGN_OR_RETURN(e->config_, model::ParseK3Config(*file));
  K3_RETURN_IF_ERROR(model::ValidateManifest(e->config_, *file));
  K3_RETURN_IF_ERROR(model::CheckPlan(e->config_, options.plan));
  K3_RETURN_IF_ERROR(CheckRanks(options));
  e->shard_ = model::ShardFor(e->config_, options.plan, options.rank);
  K3_RETURN_IF_ERROR(Cu(cudaSetDevice(options.device), "cudaSetDevice"));
  K3_ASSIGN_OR_RETURN(engine::ModelWeights w, engine::BindWeights(e->config_, *file, e->shard_));
  Uploader up(*e->impl_, e->weight_bytes_, options.direct_gemv);
  K3_RETURN_IF_ERROR(up.Globals(e->config_, w));
  e->impl_->layers.resize(e->config_.n_layers);
  for (int64_t il = 0; il < e->config_.n_layers; ++il) {
    K3_RETURN_IF_ERROR(up.Layer(e->config_, il, w.layers[il], e->impl_->layers[il]));
    if (options.verbose && (il + 1 == e->config_.n_layers || (il + 1) % 8 == 0)) {
      std::fprintf(stderr, "[cuda_engine] uploaded %lld/%lld layers, %.2f GB\n", static_cast<long long>(il + 1),
                   static_cast<long long>(e->config_.n_layers), e->weight_bytes_ / 1e9);
    }
  }
  K3_RETURN_IF_ERROR(e->Init(options));
  return e;
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::OpenSynth(const SynthSource& source,
                                                                  const CudaEngineOptions& options) {
  std::unique_ptr<CudaEngine> e(new CudaEngine());
  K3_RETURN_IF_ERROR(CheckRanks(options));
  K3_ASSIGN_OR_RETURN(model::QuantMix mix, model::QuantMix::Preset(source.quant));
  synth::SynthOptions so;
  so.seed = source.seed;
  K3_ASSIGN_OR_RETURN(synth::SynthModel m, synth::SynthModel::Create(source.config, mix, so));
  e->config_ = m.config();
  K3_RETURN_IF_ERROR(model::CheckPlan(e->config_, options.plan));
  e->shard_ = model::ShardFor(e->config_, options.plan, options.rank);
  K3_RETURN_IF_ERROR(Cu(cudaSetDevice(options.device), "cudaSetDevice"));
  SynthHost host(m, source.fill_on_device ? e->impl_.get() : nullptr);
  Uploader up(*e->impl_, e->weight_bytes_, options.direct_gemv);
  {
    engine::ModelWeights w;
    const model::RankShard& s = e->shard_;
    K3_ASSIGN_OR_RETURN(w.token_embd, host.Rows("token_embd.weight", s.vocab_begin, s.vocab_width));
    K3_ASSIGN_OR_RETURN(w.output, host.Rows("output.weight", s.vocab_begin, s.vocab_width));
    K3_ASSIGN_OR_RETURN(w.output_norm, host.Vector("output_norm.weight"));
    K3_ASSIGN_OR_RETURN(w.output_res_score, host.Vector("output_res_score.weight"));
    K3_RETURN_IF_ERROR(up.Globals(e->config_, w));
    host.Clear();
  }
  e->impl_->layers.resize(e->config_.n_layers);
  for (int64_t il = 0; il < e->config_.n_layers; ++il) {
    engine::LayerWeights lw;
    K3_RETURN_IF_ERROR(SynthLayer(host, e->config_, e->shard_, il, lw));
    K3_RETURN_IF_ERROR(up.Layer(e->config_, il, lw, e->impl_->layers[il]));
    host.Clear();
    if (options.verbose) {
      std::fprintf(stderr, "[cuda_engine] rank %d/%d: synthetic layer %lld/%lld filled, %.2f GB (%lld tensors on the GPU)\n",
                   options.rank, options.plan.ranks, static_cast<long long>(il + 1),
                   static_cast<long long>(e->config_.n_layers), e->weight_bytes_ / 1e9,
                   static_cast<long long>(host.device_fills()));
    }
  }
  K3_RETURN_IF_ERROR(e->Init(options));
  return e;
}

absl::Status CudaEngine::Init(const CudaEngineOptions& options) {
  options_ = options;
  const model::K3Config& c = config_;
  Impl& m = *impl_;
  if (options.max_seqs < 1 || options.max_batch < 1 || options.page_size < 1) {
    return absl::InvalidArgumentError("max_seqs, max_batch, page_size must be >= 1");
  }
  if (options.stream != nullptr) {
    stream_ = options.stream;
  } else {
    K3_CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    own_stream_ = true;
  }
  comm_ = options.plan.ranks > 1 ? options.comm : nullptr;
  if (options.prefill_chunk < 1) return absl::InvalidArgumentError("prefill_chunk must be >= 1");
  const int64_t H = c.hidden, nh = shard_.n_heads, hd = c.kda_head_dim;
  const int64_t D = nh * hd, taps = c.conv_kernel;
  // Activation buffers hold the larger of a decode batch and a prefill chunk.
  const int64_t B = std::max(options.max_batch, options.prefill_chunk);
  m.rows = B;
  int64_t cache_tokens = options.cache_tokens;
  if (cache_tokens <= 0) cache_tokens = options.max_seqs * std::min<int64_t>(c.context_length, 1 << 16);
  int64_t max_ctx = options.max_context > 0 ? options.max_context : std::min(c.context_length, cache_tokens);
  max_ctx = std::min(max_ctx, c.context_length);
  options_.max_context = max_ctx;
  m.pages_per_seq = (max_ctx + options.page_size - 1) / options.page_size;
  m.n_pages = (cache_tokens + options.page_size - 1) / options.page_size;
  const int64_t n_kda = c.n_kda_layers(), n_mla = c.n_mla_layers();
  const int64_t state_floats = nh * hd * hd, conv_floats = 3 * (taps - 1) * D;
  K3_ASSIGN_OR_RETURN(m.kda_state, m.Alloc<float>(static_cast<size_t>(n_kda) * options.max_seqs * state_floats));
  K3_ASSIGN_OR_RETURN(m.conv_hist, m.Alloc<float>(static_cast<size_t>(n_kda) * options.max_seqs * conv_floats));
  const size_t elem = options.cache_f16 ? 2 : 4;
  K3_ASSIGN_OR_RETURN(uint8_t* cache, m.Alloc<uint8_t>(static_cast<size_t>(m.n_pages) * n_mla * options.page_size * c.mla_row * elem));
  m.mla_cache = cache;
  for (int64_t p = m.n_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  cache_pages_ = m.n_pages;
  for (int64_t s = options.max_seqs - 1; s >= 0; --s) free_slots_.push_back(s);

  const int64_t MB = options.max_batch;
  m.meta_ints = static_cast<size_t>(3 * MB + MB * m.pages_per_seq);
  K3_CU(cudaMallocHost(&m.meta_h, m.meta_ints * sizeof(int32_t)));
  K3_ASSIGN_OR_RETURN(m.meta_d, m.Alloc<int32_t>(m.meta_ints));
  m.pmeta_ints = static_cast<size_t>(2 * options.prefill_chunk + 1 + m.pages_per_seq);
  K3_CU(cudaMallocHost(&m.pmeta_h, m.pmeta_ints * sizeof(int32_t)));
  K3_ASSIGN_OR_RETURN(m.pmeta_d, m.Alloc<int32_t>(m.pmeta_ints));
  K3_CU(cudaMallocHost(&m.logits_h, static_cast<size_t>(MB) * shard_.vocab_width * sizeof(float)));

  auto F = [&](size_t n) { return m.Alloc<float>(n); };
  for (int64_t i = 0; i < c.max_checkpoints(); ++i) {
    K3_ASSIGN_OR_RETURN(float* b, F(B * H));
    m.bank.push_back(b);
  }
  K3_ASSIGN_OR_RETURN(m.x, F(B * H));
  K3_ASSIGN_OR_RETURN(m.cur, F(B * H));
  K3_ASSIGN_OR_RETURN(m.h, F(B * H));
  K3_ASSIGN_OR_RETURN(m.delta, F(B * H));
  K3_ASSIGN_OR_RETURN(m.y, F(B * H));
  K3_ASSIGN_OR_RETURN(m.mix_ws, F(cuda::ResidualMixWorkspaceFloats(B, H)));
  K3_ASSIGN_OR_RETURN(m.logits, F(B * shard_.vocab_width));
  // KDA
  K3_ASSIGN_OR_RETURN(m.pq, F(B * D));
  K3_ASSIGN_OR_RETURN(m.pk, F(B * D));
  K3_ASSIGN_OR_RETURN(m.pv, F(B * D));
  K3_ASSIGN_OR_RETURN(m.kq, F(B * D));
  K3_ASSIGN_OR_RETURN(m.kk, F(B * D));
  K3_ASSIGN_OR_RETURN(m.kv_, F(B * D));
  K3_ASSIGN_OR_RETURN(m.fa, F(B * hd));
  K3_ASSIGN_OR_RETURN(m.g, F(B * D));
  K3_ASSIGN_OR_RETURN(m.beta, F(B * nh));
  K3_ASSIGN_OR_RETURN(m.o, F(B * D));
  K3_ASSIGN_OR_RETURN(m.gp, F(B * D));
  // MLA
  const int64_t qk = c.mla_qk_head_dim(), row = c.mla_row, lora = c.kv_lora_rank;
  K3_ASSIGN_OR_RETURN(m.qa, F(B * c.q_lora_rank));
  K3_ASSIGN_OR_RETURN(m.qf, F(B * nh * qk));
  K3_ASSIGN_OR_RETURN(m.mkv, F(B * row));
  K3_ASSIGN_OR_RETURN(m.qabs, F(B * nh * row));
  K3_ASSIGN_OR_RETURN(m.lat, F(B * nh * lora));
  K3_ASSIGN_OR_RETURN(m.mo, F(B * nh * c.v_head_dim));
  K3_ASSIGN_OR_RETURN(m.mgate, F(B * nh * c.v_head_dim));
  // Splits fill the GPU for a decode batch; a prefill chunk's many rows need few (bounded below).
  const int max_splits = cuda::MlaDecodeSplits(1, nh, max_ctx) * 2 + 8;
  m.mla_ws_floats = std::max(cuda::MlaDecodeWorkspaceFloats(MB, nh, lora, max_splits),
                             cuda::MlaDecodeWorkspaceFloats(B, nh, lora, 2));
  K3_ASSIGN_OR_RETURN(m.mla_ws, F(m.mla_ws_floats));
  // MoE / dense
  const int64_t E = c.n_experts, K = c.n_experts_used, L = c.expert_latent, Fw = shard_.expert_ffn_width;
  K3_ASSIGN_OR_RETURN(m.rlogits, F(B * std::max<int64_t>(E, 1)));
  K3_ASSIGN_OR_RETURN(m.wts, F(B * K));
  K3_ASSIGN_OR_RETURN(m.wloc, F(B * K));
  K3_ASSIGN_OR_RETURN(m.ids, m.Alloc<int32_t>(B * K));
  K3_ASSIGN_OR_RETURN(m.idloc, m.Alloc<int32_t>(B * K));
  if (B > kGemvMaxRows && c.n_experts > 0) {
    const int64_t El = std::max<int64_t>(shard_.n_experts, 1);
    K3_ASSIGN_OR_RETURN(m.group_offsets, m.Alloc<int32_t>(El + 1));
    K3_ASSIGN_OR_RETURN(m.group_rows, m.Alloc<int32_t>(B * K));
    K3_ASSIGN_OR_RETURN(m.group_slot, m.Alloc<int32_t>(B * K));
    K3_ASSIGN_OR_RETURN(uint8_t* ws, m.Alloc<uint8_t>(cuda::MoeGroupWorkspaceBytes(B, K, El)));
    m.group_ws = ws;
  }
  if (B > kGemvMaxRows) {
    // The widest activations a GEMM of this engine reads, as f16: B rows of the widest input,
    // or the B*K grouped expert rows.
    const int64_t widest = std::max({H, D, c.q_lora_rank, nh * c.v_head_dim, L, shard_.dense_width,
                                     shard_.shared_width, c.kv_lora_rank, qk});
    m.gemm_ws_bytes = (static_cast<size_t>(std::max(B * widest, B * K * std::max<int64_t>(Fw, 1))) * 2 + 255) / 256 * 256;
    K3_ASSIGN_OR_RETURN(uint8_t* gws, m.Alloc<uint8_t>(m.gemm_ws_bytes));
    m.gemm_ws = gws;
  }
  K3_ASSIGN_OR_RETURN(m.r, F(B * L));
  K3_ASSIGN_OR_RETURN(m.xe, F(B * K * L));
  K3_ASSIGN_OR_RETURN(m.ge, F(B * K * Fw));
  K3_ASSIGN_OR_RETURN(m.ue, F(B * K * Fw));
  K3_ASSIGN_OR_RETURN(m.ye, F(B * K * L));
  K3_ASSIGN_OR_RETURN(m.reduce, F(B * (L + H)));
  K3_ASSIGN_OR_RETURN(m.sg, F(B * std::max<int64_t>(shard_.shared_width, 1)));
  K3_ASSIGN_OR_RETURN(m.su, F(B * std::max<int64_t>(shard_.shared_width, 1)));
  K3_ASSIGN_OR_RETURN(m.dg, F(B * std::max<int64_t>(shard_.dense_width, 1)));
  K3_ASSIGN_OR_RETURN(m.du, F(B * std::max<int64_t>(shard_.dense_width, 1)));
  K3_CU(cudaDeviceSynchronize());
  if (comm_ != nullptr) {
    // Eager all-reduces of every size a step uses at 1 and B rows, before any capture: NCCL
    // connects its peers on first use, which must not happen inside a graph capture.
    K3_CU(cudaMemsetAsync(m.reduce, 0, B * (L + H) * sizeof(float), stream_));
    for (int64_t n : {int64_t{1}, MB}) {
      K3_RETURN_IF_ERROR(AllReduce(m.reduce, n * H));
      K3_RETURN_IF_ERROR(AllReduce(m.reduce, n * L));
      K3_RETURN_IF_ERROR(AllReduce(m.reduce, n * (L + H)));
    }
    K3_CU(cudaStreamSynchronize(stream_));
    comm_->ResetStats();
  }
  return absl::OkStatus();
}

uint64_t CudaEngine::step_weight_bytes(int64_t n_seqs) const {
  const model::K3Config& c = config_;
  const Impl& m = *impl_;
  uint64_t b = MatBytes(m.output) + m.token_embd.row_bytes;
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const DLayer& l = m.layers[il];
    if (c.is_mla(il)) {
      const DMla& w = l.mla;
      b += MatBytes(w.q_a) + MatBytes(w.q_b) + MatBytes(w.kv_a) + MatBytes(w.out) + (w.has_gate ? MatBytes(w.gate) : 0);
      b += w.k_b.matrix_stride * w.k_b.count + w.v_b.matrix_stride * w.v_b.count;
    } else {
      const DKda& w = l.kda;
      b += MatBytes(w.q) + MatBytes(w.k) + MatBytes(w.v) + MatBytes(w.f_a) + MatBytes(w.f_b) + MatBytes(w.beta) +
           MatBytes(w.g) + MatBytes(w.out);
    }
    if (c.is_dense(il)) {
      b += MatBytes(l.dense.gate) + MatBytes(l.dense.up) + MatBytes(l.dense.down);
    } else {
      const DMoe& w = l.moe;
      b += MatBytes(w.router) + MatBytes(w.routed_down) + MatBytes(w.routed_up);
      if (w.has_shared) b += MatBytes(w.shared_gate) + MatBytes(w.shared_up) + MatBytes(w.shared_down);
      b += static_cast<uint64_t>(std::min<int64_t>(n_seqs * c.n_experts_used, shard_.n_experts)) *
           (w.gate_exps.matrix_stride + w.up_exps.matrix_stride + w.down_exps.matrix_stride);
    }
  }
  return b;
}

uint64_t CudaEngine::linear_macs_per_token() const {
  const model::K3Config& c = config_;
  const Impl& m = *impl_;
  auto macs = [](const DMat& w) { return static_cast<uint64_t>(w.rows) * w.cols; };
  auto stack = [](const DStack& w, int64_t count) { return static_cast<uint64_t>(w.rows) * w.cols * count; };
  uint64_t t = 0;
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const DLayer& l = m.layers[il];
    if (c.is_mla(il)) {
      const DMla& w = l.mla;
      t += macs(w.q_a) + macs(w.q_b) + macs(w.kv_a) + macs(w.out) + (w.has_gate ? macs(w.gate) : 0);
      t += stack(w.k_b, w.k_b.count) + stack(w.v_b, w.v_b.count);
    } else {
      const DKda& w = l.kda;
      t += macs(w.q) + macs(w.k) + macs(w.v) + macs(w.f_a) + macs(w.f_b) + macs(w.beta) + macs(w.g) + macs(w.out);
      t += static_cast<uint64_t>(shard_.n_heads) * 4 * c.kda_head_dim * c.kda_head_dim;  // the recurrence
    }
    if (c.is_dense(il)) {
      t += macs(l.dense.gate) + macs(l.dense.up) + macs(l.dense.down);
    } else {
      const DMoe& w = l.moe;
      t += macs(w.router) + macs(w.routed_down) + macs(w.routed_up);
      if (w.has_shared) t += macs(w.shared_gate) + macs(w.shared_up) + macs(w.shared_down);
      // K experts per token, of which this rank holds its share (groups x bands split them evenly).
      const double share = static_cast<double>(shard_.n_experts) / c.n_experts;
      t += static_cast<uint64_t>(share * c.n_experts_used *
                                 (stack(w.gate_exps, 1) + stack(w.up_exps, 1) + stack(w.down_exps, 1)));
    }
  }
  return t;
}

uint64_t CudaEngine::attention_macs_per_row() const {
  const model::K3Config& c = config_;
  // Absorbed MLA: per head a 576-wide score and a 512-wide value product per cached row.
  return static_cast<uint64_t>(c.n_mla_layers()) * shard_.n_heads * (c.mla_row + c.kv_lora_rank);
}

uint64_t CudaEngine::cache_bytes_per_token() const {
  return static_cast<uint64_t>(config_.n_mla_layers()) * config_.mla_row * (options_.cache_f16 ? 2 : 4);
}

absl::Status CudaEngine::Add(SeqId id) {
  if (seqs_.contains(id)) return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " exists"));
  if (free_slots_.empty()) return absl::ResourceExhaustedError("no free sequence slot");
  Sequence s;
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  const model::K3Config& c = config_;
  const int64_t nh = shard_.n_heads, hd = c.kda_head_dim, D = nh * hd;
  const size_t state_floats = nh * hd * hd, conv_floats = 3 * (c.conv_kernel - 1) * D;
  for (int64_t l = 0; l < c.n_kda_layers(); ++l) {
    K3_CU(cudaMemsetAsync(impl_->kda_state + (l * options_.max_seqs + s.slot) * state_floats, 0,
                          state_floats * sizeof(float), stream_));
    K3_CU(cudaMemsetAsync(impl_->conv_hist + (l * options_.max_seqs + s.slot) * conv_floats, 0,
                          conv_floats * sizeof(float), stream_));
  }
  seqs_[id] = std::move(s);
  return absl::OkStatus();
}

absl::Status CudaEngine::Free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  for (int32_t p : it->second.pages) free_pages_.push_back(p);
  free_slots_.push_back(it->second.slot);
  seqs_.erase(it);
  return absl::OkStatus();
}

int64_t CudaEngine::Length(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? -1 : it->second.length;
}

// Checks the step, reserves pages, fills the metadata and uploads it (async).
absl::Status CudaEngine::Prepare(std::span<const SeqId> ids, std::span<const int32_t> tokens, StepView* view) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 1 || n > options_.max_batch || tokens.size() != ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("decode step of ", n, " rows (max_batch ", options_.max_batch, ")"));
  }
  std::unordered_set<SeqId> seen;
  int64_t need = 0, max_len = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto it = seqs_.find(ids[i]);
    if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", ids[i]));
    if (!seen.insert(ids[i]).second) return absl::InvalidArgumentError("a sequence appears twice in one step");
    if (tokens[i] < 0 || tokens[i] >= config_.vocab) return absl::InvalidArgumentError("token id outside the vocabulary");
    const int64_t len = it->second.length;
    if (len + 1 > options_.max_context) return absl::InvalidArgumentError("context length exceeded");
    if (len % options_.page_size == 0 && static_cast<int64_t>(it->second.pages.size()) * options_.page_size <= len) ++need;
    max_len = std::max(max_len, len + 1);
  }
  if (need > static_cast<int64_t>(free_pages_.size())) return absl::ResourceExhaustedError("MLA cache pages exhausted");
  const int64_t B = options_.max_batch, MP = impl_->pages_per_seq;
  int32_t* meta = impl_->meta_h;
  std::fill(meta, meta + impl_->meta_ints, 0);
  for (int64_t i = 0; i < n; ++i) {
    Sequence& s = seqs_[ids[i]];
    while (static_cast<int64_t>(s.pages.size()) * options_.page_size < s.length + 1) {
      s.pages.push_back(free_pages_.back());
      free_pages_.pop_back();
    }
    meta[i] = tokens[i];
    meta[B + i] = static_cast<int32_t>(s.length + 1);
    meta[2 * B + i] = static_cast<int32_t>(s.slot);
    std::copy(s.pages.begin(), s.pages.end(), meta + 3 * B + i * MP);
  }
  K3_CU(cudaMemcpyAsync(impl_->meta_d, meta, impl_->meta_ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  StepView& v = *view;
  v.n = n;
  v.n_seqs = n;
  v.run = 1;
  v.tokens = impl_->meta_d;
  v.lens = impl_->meta_d + B;
  v.slots = impl_->meta_d + 2 * B;
  v.block_tables = impl_->meta_d + 3 * B;
  v.block_table_stride = MP;
  v.bucket = MlaBucket(max_len);
  v.head_row = 0;
  v.head_rows = n;
  return absl::OkStatus();
}

int CudaEngine::MlaBucket(int64_t max_len) {
  // A power of two >= the longest sequence (at least 256 rows): the MLA split count's key.
  int b = 256;
  while (b < max_len) b *= 2;
  return b;
}

absl::Status CudaEngine::PreparePrefill(SeqId id, std::span<const int32_t> tokens, StepView* view) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > options_.prefill_chunk) {
    return absl::InvalidArgumentError(absl::StrCat("prefill chunk of ", n, " rows (prefill_chunk ", options_.prefill_chunk, ")"));
  }
  Sequence& s = it->second;
  if (s.length + n > options_.max_context) return absl::InvalidArgumentError("context length exceeded");
  for (int32_t t : tokens) {
    if (t < 0 || t >= config_.vocab) return absl::InvalidArgumentError("token id outside the vocabulary");
  }
  const int64_t P = options_.page_size;
  const int64_t need = (s.length + n + P - 1) / P - static_cast<int64_t>(s.pages.size());
  if (need > static_cast<int64_t>(free_pages_.size())) return absl::ResourceExhaustedError("MLA cache pages exhausted");
  for (int64_t i = 0; i < need; ++i) {
    s.pages.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
  const int64_t R = options_.prefill_chunk;
  int32_t* meta = impl_->pmeta_h;
  for (int64_t t = 0; t < n; ++t) {
    meta[t] = tokens[t];
    meta[R + t] = static_cast<int32_t>(s.length + 1 + t);
  }
  meta[2 * R] = static_cast<int32_t>(s.slot);
  std::copy(s.pages.begin(), s.pages.end(), meta + 2 * R + 1);
  // Pinned staging is reused by the next chunk: this upload must finish before the host rewrites it.
  K3_CU(cudaMemcpyAsync(impl_->pmeta_d, meta, impl_->pmeta_ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  StepView& v = *view;
  v.n = n;
  v.n_seqs = 1;
  v.run = n;
  v.tokens = impl_->pmeta_d;
  v.lens = impl_->pmeta_d + R;
  v.slots = impl_->pmeta_d + 2 * R;
  v.block_tables = impl_->pmeta_d + 2 * R + 1;
  v.block_table_stride = 0;  // every row of the run reads the sequence's one table
  v.bucket = MlaBucket(s.length + n);
  return absl::OkStatus();
}

void CudaEngine::Commit(std::span<const SeqId> ids) {
  for (SeqId id : ids) ++seqs_[id].length;
}

// Kinds for the profile marks.
enum Mark { kEmbed = 0, kKda, kMla, kDense, kMoe, kMixNorm, kHead, kComm, kMarks };

absl::Status CudaEngine::Enqueue(const StepView& v, std::vector<std::pair<int, cudaEvent_t>>* marks) {
  const model::K3Config& c = config_;
  Impl& m = *impl_;
  cudaStream_t s = stream_;
  const int64_t n = v.n, H = c.hidden, nh = shard_.n_heads, hd = c.kda_head_dim, D = nh * hd;
  const int64_t taps = c.conv_kernel, MP = v.block_table_stride;
  const float eps = c.rms_eps;
  const int bucket = v.bucket;
  const int32_t* tokens_d = v.tokens;
  const int32_t* lens_d = v.lens;
  const int32_t* slots_d = v.slots;
  const int32_t* bt_d = v.block_tables;
  // Products: the GEMV up to kGemvMaxRows rows, the tensor-core GEMM beyond (unless exact_prefill).
  const bool exact = options_.exact_prefill;
  const GemmScratch gws{m.gemm_ws, m.gemm_ws_bytes};
  auto Prod = [&](const DMat& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t rows) {
    return Product(w, x, xs, y, ys, rows, exact, gws, s);
  };
  const bool grouped = !exact && n > kGemvMaxRows;  // MoE by expert groups and per-head MLA products
  auto mark = [&](int kind) -> absl::Status {
    if (marks == nullptr) return absl::OkStatus();
    cudaEvent_t ev;
    K3_CU(cudaEventCreate(&ev));
    K3_CU(cudaEventRecord(ev, s));
    marks->push_back({kind, ev});
    return absl::OkStatus();
  };
  int n_ckpt = 0;
  // Rows [row0, row0 + rows) of src (and of the bank) mixed into dst.
  auto mix = [&](const float* w, const float* src, float* dst, int64_t row0 = 0, int64_t rows = -1) -> cudaError_t {
    cuda::ResidualMixParams p;
    for (int i = 0; i < n_ckpt; ++i) p.bank[i] = m.bank[i] + row0 * H;
    p.n_ckpt = n_ckpt;
    p.bank_stride = H;
    p.x = src + row0 * H;
    p.w = w;
    p.out = dst + row0 * H;
    p.n_tokens = rows < 0 ? n : rows;
    p.n = H;
    p.x_stride = H;
    p.out_stride = H;
    p.eps = eps;
    p.workspace = m.mix_ws;
    return cuda::ResidualMix(p, s);
  };

  K3_RETURN_IF_ERROR(mark(kEmbed));
  K3_CU(EmbedRows(m.token_embd.type, m.token_embd.data, m.token_embd.row_bytes, shard_.vocab_begin,
                  shard_.vocab_width, tokens_d, n, H, m.x, s));
  // All-reduce i of the step: the CPU engine's places, in place on the stream.
  auto reduce = [&](float* data, int64_t count) -> absl::Status {
    if (comm_ == nullptr) return absl::OkStatus();
    K3_RETURN_IF_ERROR(mark(kComm));
    return AllReduce(data, count);
  };
  K3_RETURN_IF_ERROR(reduce(m.x, n * H));  // the vocabulary bands' rows
  const size_t state_floats = nh * hd * hd, conv_floats = 3 * (taps - 1) * D;
  const size_t elem = options_.cache_f16 ? 2 : 4;
  const int64_t page_elems = c.n_mla_layers() * options_.page_size * c.mla_row;

  for (int64_t il = 0; il < c.n_layers; ++il) {
    const DLayer& lw = m.layers[il];
    K3_RETURN_IF_ERROR(mark(kMixNorm));
    K3_CU(mix(lw.attn_res_score, m.x, m.cur));
    const bool banked = il % c.res_block_size == 0;
    if (banked) K3_CU(AddInto(m.bank[n_ckpt++], m.x, n * H, false, s));
    K3_CU(Rms(m.cur, m.h, lw.attn_norm, n, H, eps, s));
    const int64_t ki = c.kind_index(il);
    if (c.is_mla(il)) {
      K3_RETURN_IF_ERROR(mark(kMla));
      const DMla& w = lw.mla;
      const int64_t qk = c.mla_qk_head_dim(), row = c.mla_row, lora = c.kv_lora_rank, vd = c.v_head_dim;
      const int64_t ql = c.q_lora_rank, nope = c.qk_nope_dim, rope = c.qk_rope_dim;
      K3_CU(Prod(w.q_a, m.h, H, m.qa, ql, n));
      K3_CU(Rms(m.qa, m.qa, w.q_a_norm, n, ql, eps, s));
      K3_CU(Prod(w.q_b, m.qa, ql, m.qf, nh * qk, n));
      K3_CU(Prod(w.kv_a, m.h, H, m.mkv, row, n));
      void* layer_cache = static_cast<uint8_t*>(m.mla_cache) + ki * options_.page_size * row * elem;
      MlaAppendParams ap{m.mkv, row, w.kv_a_norm, layer_cache, options_.cache_f16, page_elems, row,
                         options_.page_size, bt_d, MP, lens_d, n, lora, row, eps};
      K3_CU(MlaAppend(ap, s));
      if (grouped) {  // one GEMM per head over all rows
        for (int64_t hh = 0; hh < nh; ++hh) {
          K3_CU(Prod(Slice(w.k_b, hh), m.qf + hh * qk, nh * qk, m.qabs + hh * row, nh * row, n));
        }
      } else {
        K3_CU(GemvStack(w.k_b, nullptr, nh, m.qf, nh * qk, qk, m.qabs, nh * row, row, n, s));
      }
      K3_CU(cudaMemcpy2DAsync(m.qabs + lora, row * sizeof(float), m.qf + nope, qk * sizeof(float),
                              rope * sizeof(float), n * nh, cudaMemcpyDeviceToDevice, s));
      cuda::MlaDecodeParams dp;
      dp.q = m.qabs;
      dp.q_seq_stride = nh * row;
      dp.cache = layer_cache;
      dp.cache_type = options_.cache_f16 ? cuda::MlaCacheType::kF16 : cuda::MlaCacheType::kF32;
      dp.page_stride = page_elems;
      dp.row_stride = row;
      dp.page_size = options_.page_size;
      dp.block_table = bt_d;
      dp.block_table_stride = MP;
      dp.seq_lens = lens_d;
      dp.n_seqs = n;
      dp.n_heads = nh;
      dp.row_width = row;
      dp.value_width = lora;
      dp.scale = 1.0f / std::sqrt(static_cast<float>(qk));
      dp.out = m.lat;
      dp.out_seq_stride = nh * lora;
      dp.n_splits = cuda::MlaDecodeSplits(n, nh, bucket);
      while (cuda::MlaDecodeWorkspaceFloats(n, nh, lora, dp.n_splits) > m.mla_ws_floats && dp.n_splits > 1) --dp.n_splits;
      dp.workspace = m.mla_ws;
      K3_CU(cuda::MlaDecode(dp, s));
      if (grouped) {
        for (int64_t hh = 0; hh < nh; ++hh) {
          K3_CU(Prod(Slice(w.v_b, hh), m.lat + hh * lora, nh * lora, m.mo + hh * vd, nh * vd, n));
        }
      } else {
        K3_CU(GemvStack(w.v_b, nullptr, nh, m.lat, nh * lora, lora, m.mo, nh * vd, vd, n, s));
      }
      if (w.has_gate) {
        K3_CU(Prod(w.gate, m.h, H, m.mgate, nh * vd, n));
        cuda::SigmoidGateMulParams gp{m.mo, m.mgate, n, nh * vd, nh * vd, nh * vd};
        K3_CU(cuda::SigmoidGateMul(gp, s));
      }
      K3_CU(Prod(w.out, m.mo, nh * vd, m.delta, H, n));
    } else {
      K3_RETURN_IF_ERROR(mark(kKda));
      const DKda& w = lw.kda;
      const DMat* mats[3] = {&w.q, &w.k, &w.v};
      const float* convw[3] = {w.conv_q, w.conv_k, w.conv_v};
      float* proj[3] = {m.pq, m.pk, m.pv};
      float* outs[3] = {m.kq, m.kk, m.kv_};
      float* hist = m.conv_hist + ki * options_.max_seqs * conv_floats;
      for (int which = 0; which < 3; ++which) {
        K3_CU(Prod(*mats[which], m.h, H, proj[which], D, n));
        cuda::ShortConvParams cp;
        cp.weight = convw[which];
        cp.history = hist + which * (taps - 1) * D;
        cp.history_slot_stride = static_cast<int64_t>(conv_floats);
        cp.slots = slots_d;
        cp.in = proj[which];
        cp.out = outs[which];
        cp.n_seqs = v.n_seqs;
        cp.n_tokens = v.run;
        cp.channels = D;
        cp.taps = taps;
        cp.in_stride = D;
        cp.out_stride = D;
        K3_CU(cuda::ShortConvSilu(cp, s));
      }
      K3_CU(Rms(m.kq, m.kq, nullptr, n, hd, eps, s, nh, nullptr, cuda::NormKind::kL2));
      K3_CU(Rms(m.kk, m.kk, nullptr, n, hd, eps, s, nh, nullptr, cuda::NormKind::kL2));
      K3_CU(Prod(w.f_a, m.h, H, m.fa, hd, n));
      K3_CU(Prod(w.f_b, m.fa, hd, m.g, D, n));
      cuda::KdaGateParams gp{m.g, w.dt_bias, w.a, m.g, n, nh, hd, D, D, c.has_gate_lower_bound, c.gate_lower_bound};
      K3_CU(cuda::KdaGate(gp, s));
      K3_CU(Prod(w.beta, m.h, H, m.beta, nh, n));
      cuda::SigmoidParams sp{m.beta, m.beta, n * nh};
      K3_CU(cuda::Sigmoid(sp, s));
      cuda::KdaDecodeParams kp;
      kp.state = m.kda_state + ki * options_.max_seqs * state_floats;
      kp.state_slot_stride = static_cast<int64_t>(state_floats);
      kp.slots = slots_d;
      kp.q = m.kq;
      kp.k = m.kk;
      kp.g = m.g;
      kp.v = m.kv_;
      kp.beta = m.beta;
      kp.out = m.o;
      kp.n_seqs = v.n_seqs;
      kp.n_tokens = v.run;
      kp.n_heads = nh;
      kp.dk = hd;
      kp.dv = hd;
      kp.qk_stride = D;
      kp.v_stride = D;
      kp.beta_stride = nh;
      kp.out_stride = D;
      kp.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      K3_CU(cuda::KdaDecode(kp, s));
      K3_CU(Prod(w.g, m.h, H, m.gp, D, n));
      K3_CU(Rms(m.o, m.o, w.norm, n, hd, eps, s, nh, m.gp));
      K3_CU(Prod(w.out, m.o, D, m.delta, H, n));
    }
    K3_RETURN_IF_ERROR(reduce(m.delta, n * H));  // the heads' partial sums
    K3_RETURN_IF_ERROR(mark(kMixNorm));
    K3_CU(AddInto(m.x, m.delta, n * H, !banked, s));  // a banked layer restarts the stream
    K3_CU(mix(lw.ffn_res_score, m.x, m.cur));
    K3_CU(Rms(m.cur, m.h, lw.ffn_norm, n, H, eps, s));
    if (c.is_dense(il)) {
      K3_RETURN_IF_ERROR(mark(kDense));
      const DDense& w = lw.dense;
      const int64_t Fd = w.gate.rows;
      K3_CU(Prod(w.gate, m.h, H, m.dg, Fd, n));
      K3_CU(Prod(w.up, m.h, H, m.du, Fd, n));
      K3_CU(SituInto(m.dg, m.du, n, Fd, c, s));
      K3_CU(Prod(w.down, m.dg, Fd, m.delta, H, n));
      K3_RETURN_IF_ERROR(reduce(m.delta, n * H));  // the FFN bands' partials
    } else {
      K3_RETURN_IF_ERROR(mark(kMoe));
      const DMoe& w = lw.moe;
      const int64_t E = c.n_experts, K = c.n_experts_used, L = c.expert_latent, Fw = w.gate_exps.rows;
      K3_CU(Gemv(w.router, m.h, H, m.rlogits, E, n, s));
      cuda::MoeRouterParams rp;
      rp.logits = m.rlogits;
      rp.logits_stride = E;
      rp.selection_bias = w.selection_bias;
      rp.n_tokens = n;
      rp.n_experts = E;
      rp.k = K;
      rp.sigmoid = c.gating == model::GatingFunc::kSigmoid;
      rp.normalize = c.expert_weights_norm;
      rp.scale = c.expert_weights_scale;
      rp.ids = m.ids;
      rp.weights = m.wts;
      K3_CU(cuda::MoeRoute(rp, s));
      K3_CU(Prod(w.routed_down, m.h, H, m.r, L, n));
      float* mm = m.reduce;
      float* sh = m.reduce + n * L;
      if (grouped) {
        // Many rows: (token, choice) pairs grouped by local expert, each expert's weights read
        // once for all its rows (grouped tensor-core GEMMs), then a weighted combine per token.
        const int64_t El = shard_.n_experts;
        cuda::MoeGroupParams gp;
        gp.ids = m.ids;
        gp.n_tokens = n;
        gp.k = K;
        gp.n_experts = El;
        gp.expert_begin = static_cast<int32_t>(shard_.expert_begin);
        gp.group_offsets = m.group_offsets;
        gp.x_rows = m.group_rows;
        gp.slot_of = m.group_slot;
        gp.workspace = m.group_ws;
        K3_CU(cuda::MoeGroupTokens(gp, s));
        K3_CU(GroupedProduct(w.gate_exps, El, m.group_offsets, m.group_rows, n, m.r, L, m.ge, Fw, n * K, gws, s));
        K3_CU(GroupedProduct(w.up_exps, El, m.group_offsets, m.group_rows, n, m.r, L, m.ue, Fw, n * K, gws, s));
        K3_CU(SituInto(m.ge, m.ue, n * K, Fw, c, s));
        K3_CU(GroupedProduct(w.down_exps, El, m.group_offsets, nullptr, 0, m.ge, Fw, m.ye, L, n * K, gws, s));
        cuda::MoeCombineParams cp;
        cp.y = m.ye;
        cp.y_stride = L;
        cp.slot_of = m.group_slot;
        cp.weights = m.wts;
        cp.n_tokens = n;
        cp.k = K;
        cp.cols = L;
        cp.out = mm;
        cp.out_stride = L;
        K3_CU(cuda::MoeCombineGrouped(cp, s));
      } else {
        K3_CU(LocalExperts(m.ids, m.wts, n * K, shard_.expert_begin, shard_.n_experts, m.idloc, m.wloc, s));
        K3_CU(ExpandRows(m.r, n, K, L, m.xe, s));
        K3_CU(GemvStack(w.gate_exps, m.idloc, n * K, m.xe, L, L, m.ge, Fw, Fw, 1, s));
        K3_CU(GemvStack(w.up_exps, m.idloc, n * K, m.xe, L, L, m.ue, Fw, Fw, 1, s));
        K3_CU(SituInto(m.ge, m.ue, n * K, Fw, c, s));
        K3_CU(GemvStack(w.down_exps, m.idloc, n * K, m.ge, Fw, Fw, m.ye, L, L, 1, s));
        K3_CU(CombineExperts(m.ye, m.wloc, n, K, L, mm, s));
      }
      if (w.has_shared) {
        const int64_t Fs = w.shared_gate.rows;
        K3_CU(Prod(w.shared_gate, m.h, H, m.sg, Fs, n));
        K3_CU(Prod(w.shared_up, m.h, H, m.su, Fs, n));
        K3_CU(SituInto(m.sg, m.su, n, Fs, c, s));
        K3_CU(Prod(w.shared_down, m.sg, Fs, sh, H, n));
      }
      // [expert partials | shared partials] of the group in ONE all-reduce, before the routed norm.
      if (comm_ != nullptr) {
        K3_RETURN_IF_ERROR(reduce(m.reduce, n * (L + (w.has_shared ? H : 0))));
        K3_RETURN_IF_ERROR(mark(kMoe));
      }
      if (w.has_routed_norm) K3_CU(Rms(mm, mm, w.routed_norm, n, L, eps, s));
      K3_CU(Prod(w.routed_up, mm, L, m.delta, H, n));
      if (w.has_shared) K3_CU(AddInto(m.delta, sh, n * H, true, s));
    }
    K3_RETURN_IF_ERROR(mark(kMixNorm));
    K3_CU(AddInto(m.x, m.delta, n * H, true, s));
  }
  K3_RETURN_IF_ERROR(mark(kHead));
  // Only the rows whose logits are wanted (a prefill chunk: usually its last).
  const int64_t hr = v.head_rows;
  if (hr > 0) {
    float* yh = m.y + v.head_row * H;
    K3_CU(mix(m.output_res_score, m.x, m.y, v.head_row, hr));
    K3_CU(Rms(yh, yh, m.output_norm, hr, H, eps, s));
    K3_CU(Prod(m.output, yh, H, m.logits, shard_.vocab_width, hr));
  }
  K3_RETURN_IF_ERROR(mark(kMarks));
  return absl::OkStatus();
}

absl::Status CudaEngine::Decode(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* host_logits) {
  StepView view;
  K3_RETURN_IF_ERROR(Prepare(ids, tokens, &view));
  const int64_t n = view.n;
  if (options_.use_graphs) {
    auto key = std::make_pair(n, view.bucket);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      K3_CU(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      absl::Status st = Enqueue(view, nullptr);
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
      K3_RETURN_IF_ERROR(st);
      K3_CU(end);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      K3_CU(inst);
      it = graphs_.emplace(key, exec).first;
    }
    K3_CU(cudaGraphLaunch(it->second, stream_));
  } else {
    K3_RETURN_IF_ERROR(Enqueue(view, nullptr));
  }
  const size_t band = static_cast<size_t>(shard_.vocab_width);
  if (host_logits != nullptr) {
    K3_CU(cudaMemcpyAsync(impl_->logits_h, impl_->logits, n * band * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }
  K3_CU(cudaStreamSynchronize(stream_));
  if (host_logits != nullptr) std::memcpy(host_logits, impl_->logits_h, n * band * sizeof(float));
  Commit(ids);
  return absl::OkStatus();
}

absl::StatusOr<StepProfile> CudaEngine::DecodeProfiled(std::span<const SeqId> ids, std::span<const int32_t> tokens) {
  StepView view;
  K3_RETURN_IF_ERROR(Prepare(ids, tokens, &view));
  std::vector<std::pair<int, cudaEvent_t>> marks;
  absl::Status st = Enqueue(view, &marks);
  K3_CU(cudaStreamSynchronize(stream_));
  K3_ASSIGN_OR_RETURN(StepProfile prof, Collect(marks));
  K3_RETURN_IF_ERROR(st);
  Commit(ids);
  return prof;
}

absl::StatusOr<StepProfile> CudaEngine::Collect(std::vector<std::pair<int, cudaEvent_t>>& marks) {
  StepProfile prof;
  double* slot[kMarks] = {&prof.embed, &prof.kda, &prof.mla, &prof.dense, &prof.moe, &prof.mix_norm, &prof.head, &prof.comm};
  for (size_t i = 0; i + 1 < marks.size(); ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, marks[i].second, marks[i + 1].second);
    if (marks[i].first < kMarks) *slot[marks[i].first] += ms;
    prof.total += ms;
  }
  for (auto& [k, ev] : marks) cudaEventDestroy(ev);
  marks.clear();
  return prof;
}

absl::Status CudaEngine::Prefill(SeqId id, std::span<const int32_t> tokens, bool all_logits, float* host_logits,
                                 StepProfile* profile) {
  if (tokens.empty()) return absl::InvalidArgumentError("empty prefill");
  if (!seqs_.contains(id)) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  if (Length(id) + static_cast<int64_t>(tokens.size()) > options_.max_context) {
    return absl::InvalidArgumentError("context length exceeded");
  }
  const int64_t total = static_cast<int64_t>(tokens.size()), band = shard_.vocab_width;
  if (profile != nullptr) *profile = StepProfile{};
  for (int64_t t0 = 0; t0 < total; t0 += options_.prefill_chunk) {
    const int64_t n = std::min(options_.prefill_chunk, total - t0);
    const bool last = t0 + n == total;
    StepView view;
    K3_RETURN_IF_ERROR(PreparePrefill(id, tokens.subspan(t0, n), &view));
    // Logits: every row (all_logits), else the prompt's last row only (none for earlier chunks).
    view.head_row = all_logits ? 0 : n - 1;
    view.head_rows = all_logits ? n : (last ? 1 : 0);
    std::vector<std::pair<int, cudaEvent_t>> marks;
    absl::Status st = Enqueue(view, profile != nullptr ? &marks : nullptr);
    if (st.ok() && host_logits != nullptr && view.head_rows > 0) {
      float* dst = host_logits + (all_logits ? t0 : 0) * band;
      st = Cu(cudaMemcpyAsync(dst, impl_->logits, view.head_rows * band * sizeof(float), cudaMemcpyDeviceToHost, stream_),
              "logits download");
    }
    K3_CU(cudaStreamSynchronize(stream_));  // also frees the pinned metadata for the next chunk
    if (profile != nullptr) {
      K3_ASSIGN_OR_RETURN(StepProfile p, Collect(marks));
      profile->Add(p);
    }
    K3_RETURN_IF_ERROR(st);
    seqs_[id].length += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> CudaEngine::Forward(std::span<const SeqInput> inputs) {
  if (inputs.empty()) return absl::InvalidArgumentError("empty batch");
  std::unordered_set<SeqId> seen;
  for (const SeqInput& in : inputs) {
    if (!seqs_.contains(in.seq)) return absl::NotFoundError(absl::StrCat("unknown sequence ", in.seq));
    if (!seen.insert(in.seq).second) return absl::InvalidArgumentError("a sequence appears twice in one batch");
    if (in.tokens.empty()) return absl::InvalidArgumentError("empty run");
    if (Length(in.seq) + static_cast<int64_t>(in.tokens.size()) > options_.max_context) {
      return absl::InvalidArgumentError("context length exceeded");
    }
    for (int32_t t : in.tokens) {
      if (t < 0 || t >= config_.vocab) return absl::InvalidArgumentError("token id outside the vocabulary");
    }
  }
  ForwardResult result;
  result.vocab = config_.vocab;
  result.band_begin = shard_.vocab_begin;
  result.band_width = shard_.vocab_width;
  const int64_t band = shard_.vocab_width;
  int64_t rows = 0;
  for (const SeqInput& in : inputs) {
    result.first_row.push_back(rows);
    const int64_t nr = in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
    result.n_rows.push_back(nr);
    rows += nr;
  }
  result.logits.resize(static_cast<size_t>(rows) * band);
  // Runs of several tokens: chunked prefill, one sequence at a time. Single tokens: decode steps
  // of up to max_batch rows.
  std::vector<SeqId> ids;
  std::vector<int32_t> toks;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SeqInput& in = inputs[i];
    if (in.tokens.size() == 1) {
      ids.push_back(in.seq);
      toks.push_back(in.tokens[0]);
      which.push_back(i);
      continue;
    }
    K3_RETURN_IF_ERROR(Prefill(in.seq, in.tokens, in.all_logits,
                               result.logits.data() + result.first_row[i] * band));
  }
  std::vector<float> step_logits(static_cast<size_t>(options_.max_batch) * band);
  for (size_t b0 = 0; b0 < ids.size(); b0 += options_.max_batch) {
    const size_t nb = std::min<size_t>(options_.max_batch, ids.size() - b0);
    K3_RETURN_IF_ERROR(Decode(std::span<const SeqId>(ids.data() + b0, nb),
                              std::span<const int32_t>(toks.data() + b0, nb), step_logits.data()));
    for (size_t j = 0; j < nb; ++j) {
      const size_t i = which[b0 + j];
      std::copy(step_logits.data() + j * band, step_logits.data() + (j + 1) * band,
                result.logits.data() + result.first_row[i] * band);
    }
  }
  return result;
}

}  // namespace k3::engine_cuda
