#include "worker/synth_cuda/synth_fill_device.h"

#include <cstring>

#include "worker/synth/block_fill.h"
#include "worker/synth/synth_model.h"
#include "worker/synth_cuda/block_gen.h"
#include "worker/synth_cuda/synth_fill_kernels.h"

namespace k3::synth {
namespace {

bool MulOk(uint64_t a, uint64_t b, uint64_t* r) { return !__builtin_mul_overflow(a, b, r); }
bool AddOk(uint64_t a, uint64_t b, uint64_t* r) { return !__builtin_add_overflow(a, b, r); }

// Output blocks of the window; false on overflow (of the blocks or of their bytes).
bool OutBlocks(const SynthFillParams& p, uint64_t* n) {
  uint64_t m = 0, bytes = 0;
  return MulOk(p.n_mats, p.n_rows, &m) && MulOk(m, p.n_col_blocks, n) &&
         MulOk(*n, gen::GenBlockBytes(p.type), &bytes);
}

// The last source block of a non-empty window; false on overflow.
bool LastSource(const SynthFillParams& p, uint64_t* last) {
  uint64_t a = 0, b = 0, s = 0;
  return MulOk(p.n_mats - 1, p.mat_pitch_blocks, &a) && MulOk(p.n_rows - 1, p.row_pitch_blocks, &b) &&
         AddOk(p.first_block, a, &s) && AddOk(s, b, &s) && AddOk(s, p.n_col_blocks - 1, last);
}

}  // namespace

bool SynthFillDeviceSupports(quant::GgmlType type) { return gen::SupportsBlockGen(type); }

bool SynthFillDeviceSupports(quant::GgmlType type, const ValueSpec& values) {
  return gen::SupportsBlockGen(type) && values.kind == ValueKind::kNormal;
}

uint64_t SynthFillBytes(const SynthFillParams& p) {
  uint64_t n = 0;
  if (!SynthFillDeviceSupports(p.type) || !OutBlocks(p, &n)) return 0;
  return n * gen::GenBlockBytes(p.type);
}

cudaError_t SynthFillDevice(const SynthFillParams& p, cudaStream_t stream) {
  if (!SynthFillDeviceSupports(p.type, p.values)) return cudaErrorInvalidValue;
  uint64_t n = 0;
  if (!OutBlocks(p, &n)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  uint64_t last = 0;
  if (!LastSource(p, &last)) return cudaErrorInvalidValue;
  if (p.src_n_blocks != 0 && last >= p.src_n_blocks) return cudaErrorInvalidValue;
  if (p.out == nullptr || (reinterpret_cast<uintptr_t>(p.out) & 1) != 0) return cudaErrorInvalidValue;
  if (gen::GenBlockBytes(p.type) != quant::Traits(p.type).block_bytes) return cudaErrorInvalidValue;  // never

  detail::SynthFillKernelArgs a;
  a.type = p.type;
  a.key = p.key;
  a.window.first_block = p.first_block;
  a.window.mat_pitch = p.mat_pitch_blocks;
  a.window.row_pitch = p.row_pitch_blocks;
  a.window.n_rows = p.n_rows;
  a.window.n_col_blocks = p.n_col_blocks;
  a.n_blocks = n;
  a.out = p.out;
  if (gen::IsPlain(p.type)) {
    a.tables.mean = p.values.mean;
    a.tables.std = p.values.std;
  } else {
    // The host's own f32 arithmetic for d and dmin (one per block-factor index): the device
    // picks, it does not compute.
    for (int k = 0; k < 16; ++k) {
      const BlockScaleBits s = BlockScalesFor(p.type, p.values, k);
      a.tables.d[k] = s.d;
      a.tables.dmin[k] = s.dmin;
    }
    std::memcpy(a.tables.gauss_q8, GaussQ8Table().data(), sizeof(a.tables.gauss_q8));
  }
  return detail::LaunchSynthFillKernel(a, stream);
}

bool SynthWindowParams(const SynthTensor& t, const SynthTensorWindow& w, uint8_t* out, SynthFillParams* p) {
  const std::vector<int64_t>& ne = t.spec.ne;
  if (ne.empty() || t.block_elems == 0 || t.blocks_per_row == 0) return false;
  const int64_t cols = ne[0], rows = ne.size() > 1 ? ne[1] : 1;
  int64_t mats = 1;
  for (size_t i = 2; i < ne.size(); ++i) mats *= ne[i];
  // [first, first + n) within [0, size); n < 0: to the end.
  auto range = [](int64_t first, int64_t n, int64_t size, int64_t* count) {
    if (first < 0 || first > size) return false;
    *count = n < 0 ? size - first : n;
    return *count <= size - first;
  };
  int64_t n_mats = 0, n_rows = 0, n_cols = 0;
  if (!range(w.first_mat, w.n_mats, mats, &n_mats) || !range(w.first_row, w.n_rows, rows, &n_rows) ||
      !range(w.first_col, w.n_cols, cols, &n_cols)) {
    return false;
  }
  const int64_t be = t.block_elems;
  if (w.first_col % be != 0 || n_cols % be != 0) return false;
  const uint64_t bpr = t.blocks_per_row;
  SynthFillParams q;
  q.type = t.type;
  q.values = t.values;
  q.key = t.key;
  q.first_block = (static_cast<uint64_t>(w.first_mat) * static_cast<uint64_t>(rows) + static_cast<uint64_t>(w.first_row)) *
                      bpr +
                  static_cast<uint64_t>(w.first_col / be);
  q.n_mats = static_cast<uint64_t>(n_mats);
  q.n_rows = static_cast<uint64_t>(n_rows);
  q.n_col_blocks = static_cast<uint64_t>(n_cols / be);
  q.mat_pitch_blocks = static_cast<uint64_t>(rows) * bpr;
  q.row_pitch_blocks = bpr;
  q.src_n_blocks = t.n_blocks;
  q.out = out;
  *p = q;
  return true;
}

cudaError_t SynthFillTensorWindow(const SynthTensor& t, const SynthTensorWindow& w, uint8_t* out,
                                  cudaStream_t stream) {
  SynthFillParams p;
  if (!SynthWindowParams(t, w, out, &p)) return cudaErrorInvalidValue;
  return SynthFillDevice(p, stream);
}

}  // namespace k3::synth
