// Uploads one rank's host shard (engine::ModelWeights views: a mapped GGUF or synthetic fills) to
// the device, tensor by tensor, or adopts tensors that are already there (filled on the GPU); gives
// the decode-sized products their direct-GEMV form (Q8_0 repacked on the GPU).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"
#include "kernels/cuda/quant_gemv/quant_gemv.h"
#include "kernels/quant/dequantize.h"
#include "worker/common/status_macros.h"
#include "worker/engine/model_weights.h"
#include "worker/engine_cuda/device_weights.h"
#include "worker/engine_cuda/engine_kernels.h"
#include "worker/model/k3_config.h"

namespace k3::engine_cuda {

// Uploads host views of one rank's shard (engine::ModelWeights), tensor by tensor.
class Uploader {
 public:
  // ternary: hold the routed experts' IQ1_S stacks in their ternary form instead (AddTernary).
  Uploader(DeviceArena& arena, uint64_t& bytes, bool direct, bool ternary = false)
      : arena_(arena), bytes_(bytes), direct_(direct), ternary_(ternary) {}

  // Gives d its direct-GEMV form where the type has one (Q8_0: a repacked copy, made on the GPU).
  absl::Status AddDirect(DMat& d) {
    if (!direct_ || !cuda::QuantGemvDirectSupports(d.type)) return absl::OkStatus();
    if (d.type == quant::GgmlType::kQ8_0) {
      if (d.cols % 32 != 0) return absl::OkStatus();
      K3_ASSIGN_OR_RETURN(uint8_t* dst, arena_.Alloc<uint8_t>(cuda::RepackedQ8_0Bytes(d.rows, d.cols)));
      K3_CU(cuda::RepackQ8_0(d.data, d.rows, d.cols, dst, nullptr));
      d.direct = dst;
      direct_bytes_ += cuda::RepackedQ8_0Bytes(d.rows, d.cols);
    } else if (d.cols % 8 == 0) {
      d.direct = d.data;
    }
    return absl::OkStatus();
  }
  uint64_t direct_bytes() const { return direct_bytes_; }

  // Puts an IQ1_S stack in its ternary form (made on the GPU from the uploaded rows, which are then
  // given back: data = nullptr) where the int8-input GEMV takes its rows; the weight bytes count
  // the form's bytes instead of the rows'.
  absl::Status AddTernary(DStack& s) {
    if (!ternary_ || s.type != quant::GgmlType::kIQ1_S || !cuda::Iq1sTernaryTakesCols(s.cols)) {
      return absl::OkStatus();
    }
    const size_t row = static_cast<size_t>(cuda::Iq1sTernaryRowBytes(s.cols));
    const size_t stride = (row * static_cast<size_t>(s.rows) + 255) / 256 * 256;
    K3_ASSIGN_OR_RETURN(uint8_t* dst, arena_.Alloc<uint8_t>(stride * static_cast<size_t>(s.count)));
    const auto* src = static_cast<const uint8_t*>(s.data);
    for (int64_t i = 0; i < s.count; ++i) {
      K3_CU(cuda::Iq1sToTernary({src + i * s.matrix_stride, dst + i * stride, s.rows, s.cols}, nullptr));
    }
    K3_CU(cudaDeviceSynchronize());
    K3_RETURN_IF_ERROR(arena_.Free(s.data));  // the uploaded (or GPU-filled) rows: an allocation of their own
    bytes_ -= s.matrix_stride * static_cast<size_t>(s.count);
    s.data = nullptr;
    s.ternary = dst;
    s.ternary_row_bytes = row;
    s.ternary_stride = stride;
    bytes_ += stride * static_cast<size_t>(s.count);
    return absl::OkStatus();
  }

  // The direct-GEMV form of matrices of one input stacked by rows (parts[0] first), so a decode
  // step reads them in one launch: `stacked` gets rows = Σ rows, `direct` = the stacked repack and no
  // block-layout data (it is never a GEMM operand). Only when direct forms are on and every part
  // is Q8_0 of the same width; otherwise `stacked` stays empty (direct == nullptr) and each part
  // keeps its own direct form. Parts must have been uploaded without one (Mat(..., false)) or
  // will be given theirs here.
  absl::Status StackDirect(std::span<DMat* const> parts, DMat* stacked) {
    *stacked = DMat{};
    bool ok = direct_ && !parts.empty();
    int64_t rows = 0;
    for (const DMat* p : parts) {
      ok = ok && p->type == quant::GgmlType::kQ8_0 && p->cols == parts[0]->cols && p->cols % 32 == 0;
      rows += p->rows;
    }
    if (!ok) {
      for (DMat* p : parts) {
        if (p->direct == nullptr) K3_RETURN_IF_ERROR(AddDirect(*p));
      }
      return absl::OkStatus();
    }
    const int64_t cols = parts[0]->cols;
    const size_t bytes = cuda::RepackedQ8_0Bytes(rows, cols);
    K3_ASSIGN_OR_RETURN(uint8_t* dst, arena_.Alloc<uint8_t>(bytes));
    int64_t row0 = 0;
    for (const DMat* p : parts) {
      K3_CU(cuda::RepackQ8_0Rows(p->data, p->rows, cols, dst, rows, row0, nullptr));
      row0 += p->rows;
    }
    *stacked = DMat{quant::GgmlType::kQ8_0, nullptr, rows, cols, parts[0]->row_bytes, dst};
    direct_bytes_ += bytes;
    return absl::OkStatus();
  }

  // with_direct = false: no direct form now (the matrix is part of a StackDirect stack).
  absl::StatusOr<DMat> Mat(const quant::QuantMatrix& m, bool with_direct = true) {
    if (!cuda::QuantGemvSupports(m.type)) {
      return absl::InvalidArgumentError(absl::StrCat("no GPU GEMV for type ", std::string(quant::TypeName(m.type))));
    }
    const size_t n = static_cast<size_t>(m.rows) * m.row_bytes;
    if (OnDevice(m.data)) {  // filled in place on the GPU (synthetic weights): adopt it
      bytes_ += n;
      DMat d{m.type, m.data, m.rows, m.cols, m.row_bytes};
      if (with_direct) K3_RETURN_IF_ERROR(AddDirect(d));
      return d;
    }
    K3_ASSIGN_OR_RETURN(uint8_t* d, arena_.Alloc<uint8_t>(n));
    K3_CU(cudaMemcpy(d, m.data, n, cudaMemcpyHostToDevice));
    bytes_ += n;
    DMat dm{m.type, d, m.rows, m.cols, m.row_bytes};
    if (with_direct) K3_RETURN_IF_ERROR(AddDirect(dm));
    return dm;
  }
  absl::StatusOr<DStack> Stack(const engine::MatrixStack& s) {
    const size_t per = static_cast<size_t>(s.rows) * s.row_bytes;
    if (OnDevice(s.data) && s.matrix_stride == per) {
      bytes_ += per * s.count;
      return DStack{s.type, s.data, s.rows, s.cols, s.count, s.row_bytes, per};
    }
    K3_ASSIGN_OR_RETURN(uint8_t* d, arena_.Alloc<uint8_t>(per * s.count));
    for (int64_t i = 0; i < s.count; ++i) {
      K3_CU(cudaMemcpy(d + i * per, s.data + i * s.matrix_stride, per, cudaMemcpyHostToDevice));
    }
    bytes_ += per * s.count;
    return DStack{s.type, d, s.rows, s.cols, s.count, s.row_bytes, per};
  }
  absl::StatusOr<DVec> Vec(const std::vector<float>& v) {
    K3_ASSIGN_OR_RETURN(float* d, arena_.Alloc<float>(v.size()));
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
      K3_ASSIGN_OR_RETURN(k.q, Mat(w.q, false));
      K3_ASSIGN_OR_RETURN(k.k, Mat(w.k, false));
      K3_ASSIGN_OR_RETURN(k.v, Mat(w.v, false));
      K3_ASSIGN_OR_RETURN(k.conv_q, Vec(w.conv_q));
      K3_ASSIGN_OR_RETURN(k.conv_k, Vec(w.conv_k));
      K3_ASSIGN_OR_RETURN(k.conv_v, Vec(w.conv_v));
      K3_ASSIGN_OR_RETURN(k.f_a, Mat(w.f_a));  // F32 in the UD mixes: not stackable with the Q8_0 four
      K3_ASSIGN_OR_RETURN(k.f_b, Mat(w.f_b));
      K3_ASSIGN_OR_RETURN(k.beta, Mat(w.beta));
      K3_ASSIGN_OR_RETURN(k.a, Vec(w.a));
      K3_ASSIGN_OR_RETURN(k.dt_bias, Vec(w.dt_bias));
      K3_ASSIGN_OR_RETURN(k.g, Mat(w.g, false));
      K3_ASSIGN_OR_RETURN(k.norm, Vec(w.norm));
      K3_ASSIGN_OR_RETURN(k.out, Mat(w.out));
      DMat* const stack[4] = {&k.q, &k.k, &k.v, &k.g};  // the order of DKda::in_proj
      K3_RETURN_IF_ERROR(StackDirect(stack, &k.in_proj));
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
      for (DStack* e : {&m.gate_exps, &m.up_exps, &m.down_exps}) K3_RETURN_IF_ERROR(AddTernary(*e));
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

  absl::Status Globals(const model::K3Config& c, const engine::ModelWeights& w, DGlobals* out) {
    const quant::QuantMatrix& e = w.token_embd;
    if (EmbedSupports(e.type)) {
      const size_t n = static_cast<size_t>(e.rows) * e.row_bytes;
      K3_ASSIGN_OR_RETURN(uint8_t* d, arena_.Alloc<uint8_t>(n));
      K3_CU(cudaMemcpy(d, e.data, n, cudaMemcpyHostToDevice));
      out->token_embd = DMat{e.type, d, e.rows, e.cols, e.row_bytes};
      bytes_ += n;
    } else {  // IQ types: decoded once to f32 rows
      std::vector<float> rows(static_cast<size_t>(e.rows) * c.hidden);
      for (int64_t r = 0; r < e.rows; ++r) {
        quant::DequantizeRow(e.type, static_cast<const uint8_t*>(e.data) + r * e.row_bytes, &rows[r * c.hidden], c.hidden);
      }
      K3_ASSIGN_OR_RETURN(DVec d, Vec(rows));
      out->token_embd = DMat{quant::GgmlType::kF32, d, e.rows, c.hidden, static_cast<size_t>(c.hidden) * 4};
    }
    K3_ASSIGN_OR_RETURN(out->output, Mat(w.output));
    K3_ASSIGN_OR_RETURN(out->output_norm, Vec(w.output_norm));
    K3_ASSIGN_OR_RETURN(out->output_res_score, Vec(w.output_res_score));
    return absl::OkStatus();
  }

 private:
  static bool OnDevice(const void* p) {
    cudaPointerAttributes a{};
    return p != nullptr && cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
  }
  DeviceArena& arena_;
  uint64_t& bytes_;
  bool direct_;
  bool ternary_;
  uint64_t direct_bytes_ = 0;
};

}  // namespace k3::engine_cuda
