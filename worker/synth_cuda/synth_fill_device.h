// The synthetic generator's fill on the GPU: blocks of a synthetic tensor computed on the device
// from (key, block index) and written straight into device memory, bit-identical to
// synth::FillBlocks (worker/synth/block_fill.h) and so to the file k3-synth writes. A rank fills
// exactly the slices it holds through a strided window:
//
//   output block (e, r, c), e < n_mats, r < n_rows, c < n_col_blocks, is written at
//     out + ((e * n_rows + r) * n_col_blocks + c) * block_bytes
//   from source block first_block + e * mat_pitch_blocks + r * row_pitch_blocks + c
//
// which covers a contiguous block or row range (n_mats = n_rows = 1, or row_pitch =
// n_col_blocks), a column band of every row, and a stack of experts or heads with a row band or
// a column band of each. SynthFillTensorWindow builds the window from a SynthTensor.
//
// Types: Q8_0, IQ1_S, IQ2_XXS, IQ2_XS, Q2_K..Q6_K, and F32/F16/BF16 for kNormal values
// (kNegExpUniform, i.e. ssm_a, needs libm's exp: fill those few elements on the host).
//
// Launches are asynchronous on `stream`; nothing on the host outlives the call (the tables ride
// in the kernel's parameters), so a fill may also be captured into a CUDA graph. Unsupported
// types or bad windows return cudaErrorInvalidValue with nothing launched.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/ggml_type.h"
#include "worker/synth/value_spec.h"

namespace k3::synth {

struct SynthTensor;

struct SynthFillParams {
  quant::GgmlType type = quant::GgmlType::kQ8_0;  // the tensor's type (SynthTensor::type)
  ValueSpec values;               // the tensor's values (SynthTensor::values); kNormal only. Block
                                  // types use only std (their d0 = std / UnitRms(type), as FillBlocks)
  uint64_t key = 0;               // the tensor's key: TensorKey(seed, name) (SynthTensor::key)
  uint64_t first_block = 0;       // source block of output block (0, 0, 0)
  uint64_t n_mats = 1;            // output matrices (experts, heads); 1 for a plain row/block range
  uint64_t n_rows = 1;            // output rows per matrix
  uint64_t n_col_blocks = 0;      // output blocks per row (a plain type: elements per row)
  uint64_t mat_pitch_blocks = 0;  // source blocks from matrix e to e + 1 (ne[1] * blocks_per_row);
                                  // unused when n_mats == 1
  uint64_t row_pitch_blocks = 0;  // source blocks from row r to r + 1 (blocks_per_row); unused when
                                  // n_rows == 1
  uint64_t src_n_blocks = 0;      // the tensor's block count (SynthTensor::n_blocks): when nonzero, a
                                  // window reaching past it is refused; 0 = not checked
  uint8_t* out = nullptr;         // device memory (or device-accessible), 2-byte aligned (every block
                                  // offset of a cudaMalloc'ed buffer is), SynthFillBytes(*this) bytes
};

// Whether SynthFillDevice makes `type` (for F32/F16/BF16: with kNormal values).
bool SynthFillDeviceSupports(quant::GgmlType type);
// Whether it makes `type` with these values (the plain types need kind kNormal; so does
// synth::FillBlocks for the block types).
bool SynthFillDeviceSupports(quant::GgmlType type, const ValueSpec& values);

// Output bytes of a window: n_mats * n_rows * n_col_blocks * block_bytes (0 on overflow or an
// unknown type).
uint64_t SynthFillBytes(const SynthFillParams& p);

// Fills the window on `stream`. cudaErrorInvalidValue, nothing launched: an unsupported type or
// kind, a null or odd `out` for a non-empty window, a size that overflows, or a window past
// src_n_blocks. An empty window (any count 0) launches nothing and returns cudaSuccess. Otherwise
// the launch's error (cudaGetLastError after it).
//
// Host cost: the first call builds synth::UnitRms's table (a few ms, once per process).
cudaError_t SynthFillDevice(const SynthFillParams& p, cudaStream_t stream = nullptr);

// ---- windows of a SynthTensor ----
//
// The tensor as a stack of matrices: ne[0] columns (elements), ne[1] rows (1 for a vector),
// ne[2] * ne[3] * ... matrices. A negative count means "to the end of that dimension".
struct SynthTensorWindow {
  int64_t first_mat = 0, n_mats = -1;  // matrices [first_mat, first_mat + n_mats)
  int64_t first_row = 0, n_rows = -1;  // rows [first_row, first_row + n_rows) of each matrix
  int64_t first_col = 0, n_cols = -1;  // elements [first_col, first_col + n_cols) of each row, on
                                       // block boundaries
};

// The fill parameters of window `w` of `t` into `out` (packed: matrix after matrix, row after
// row). False, *p untouched, when the window leaves the tensor or is not block-aligned.
// Bytes: SynthFillBytes(*p).
bool SynthWindowParams(const SynthTensor& t, const SynthTensorWindow& w, uint8_t* out, SynthFillParams* p);

// SynthWindowParams + SynthFillDevice. The same bytes as SynthModel::FillRows (rows of a 2-D
// tensor), FillColumns (a column band), and per matrix of a stack as FillRows/FillColumns of
// that matrix's rows.
cudaError_t SynthFillTensorWindow(const SynthTensor& t, const SynthTensorWindow& w, uint8_t* out,
                                  cudaStream_t stream = nullptr);

}  // namespace k3::synth
