// Host side of the dequantizing GEMM: validation, tile geometry, dispatch per format.
#include "kernels/cuda/quant_gemm/quant_gemm.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"

namespace k3::cuda {
namespace qgemm {

cudaError_t PrepareGemmKernel(const void* kernel, int smem_bytes) {
  struct Entry {
    const void* kernel;
    int device;
    int smem;
  };
  static std::mutex mu;
  static std::vector<Entry> done;
  int dev = 0;
  K3_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : done) {
    if (e.kernel == kernel && e.device == dev && e.smem >= smem_bytes) return cudaSuccess;
  }
  int optin = 0;
  K3_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaFuncAttributes attr{};
  K3_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  // The opt-in limit covers static + dynamic shared memory.
  if (static_cast<size_t>(smem_bytes) + attr.sharedSizeBytes > static_cast<size_t>(optin)) {
    return cudaErrorInvalidConfiguration;
  }
  K3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  done.push_back({kernel, dev, smem_bytes});
  return cudaSuccess;
}

namespace {

// The launchers of one format.
struct FormatLaunch {
  GemmLaunchFn gemm = nullptr;
  DequantLaunchFn dequant = nullptr;
};

FormatLaunch FindLaunch(quant::GgmlType type) {
  using quant::GgmlType;
#define K3_GEMM_CASE(NAME) \
  case GgmlType::k##NAME:  \
    return {GemmLaunch##NAME, DequantLaunch##NAME};
  switch (type) {
    K3_GEMM_CASE(F32)
    K3_GEMM_CASE(F16)
    K3_GEMM_CASE(BF16)
    K3_GEMM_CASE(Q8_0)
    K3_GEMM_CASE(Q4_0)
    K3_GEMM_CASE(Q5_0)
    K3_GEMM_CASE(IQ4_NL)
    K3_GEMM_CASE(Q2_K)
    K3_GEMM_CASE(Q3_K)
    K3_GEMM_CASE(Q4_K)
    K3_GEMM_CASE(Q5_K)
    K3_GEMM_CASE(Q6_K)
    K3_GEMM_CASE(IQ2_XXS)
    K3_GEMM_CASE(IQ2_XS)
    K3_GEMM_CASE(IQ2_S)
    K3_GEMM_CASE(IQ3_XXS)
    K3_GEMM_CASE(IQ3_S)
    K3_GEMM_CASE(IQ1_S)
    K3_GEMM_CASE(IQ1_M)
    K3_GEMM_CASE(IQ4_XS)
    default:
      return {};
  }
#undef K3_GEMM_CASE
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int64_t SourceRows(const QuantGemmParams& p) { return p.x_rows != nullptr ? p.x_src_rows : p.n_tokens; }

size_t PlaneBytes(const QuantGemmParams& p) {
  return static_cast<size_t>((SourceRows(p) * p.cols * 2 + 255) / 256 * 256);
}

// x f32 [n_src][x_stride] -> hi f16 [n_src][cols] (+ lo = f16((x - hi)·2^11) when split):
// 8 elements per thread (two float4 loads, one 16-byte store per plane). `permute` (the wgmma
// kernel's order, hi only): inside each window of 128, element 32·t + 8·l + 4·h + r goes to
// slot 32·l + 16·h + 2·t + r%2 + 8·(r/2) (gemm_iq1s_wgmma.cu), four 4-byte stores.
constexpr int kConvThreads = 128;

__global__ void __launch_bounds__(kConvThreads)
    XToHalfKernel(const float* __restrict__ x, int64_t x_stride, int32_t cols, __half* __restrict__ hi,
                  __half* __restrict__ lo, bool permute) {
  PdlEnter();
  const int64_t row = blockIdx.x;
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * kConvThreads + threadIdx.x) * 8;
  if (c >= cols) return;
  const float4* src = reinterpret_cast<const float4*>(x + row * x_stride + c);
  const float4 a = __ldg(src), b = __ldg(src + 1);
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  uint4 h, l;
  uint32_t* hp = &h.x;
  uint32_t* lp = &l.x;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const __half2 p = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
    hp[k] = *reinterpret_cast<const uint32_t*>(&p);
    if (lo != nullptr) {
      // x - hi is exact (Sterbenz); scaled by 2^11 it stays <= |x| and clear of the f16 subnormals
      // for |x| >= ~2^-12.
      const float2 f = __half22float2(p);
      lp[k] = PackHalf2((v[2 * k] - f.x) * kLoScale, (v[2 * k + 1] - f.y) * kLoScale);
    }
  }
  if (permute) {  // c % 8 == 0: element c + k at WgmmaXColumn(c) + 16(k/4) + 8(k/2 % 2) + k % 2
    uint32_t* const dst = reinterpret_cast<uint32_t*>(hi + row * cols + WgmmaXColumn(c));
    dst[0] = h.x;   // r = 0, 1 of h = 0
    dst[4] = h.y;   // r = 2, 3: +8 halfs
    dst[8] = h.z;   // h = 1: +16
    dst[12] = h.w;  // +24
    return;
  }
  *reinterpret_cast<uint4*>(hi + row * cols + c) = h;
  if (lo != nullptr) *reinterpret_cast<uint4*>(lo + row * cols + c) = l;
}

// The multiprocessors of the current device when the IQ1_S wgmma kernel runs on it (an sm_90 GPU
// and a build for sm_90a: K3_HAVE_SM90A, from kernels/cuda/CMakeLists.txt; without it the kernel
// is a trap), else 0.
int WgmmaSms() {
#ifdef K3_HAVE_SM90A
  int dev = 0, major = 0, minor = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    return 0;
  }
  return major == 9 && minor == 0 ? sms : 0;
#else
  return 0;
#endif
}

}  // namespace
}  // namespace qgemm

bool QuantGemmSupports(quant::GgmlType type) { return qgemm::FindLaunch(type).gemm != nullptr; }

size_t QuantGemmWorkspaceBytes(const QuantGemmParams& p) {
  if (p.cols <= 0 || qgemm::SourceRows(p) < 0) return 0;
  return qgemm::PlaneBytes(p) * (p.split_x ? 2 : 1);
}

double QuantGemmFlops(const QuantGemmParams& p, int64_t grouped_rows) {
  return 2.0 * static_cast<double>(p.rows) * static_cast<double>(p.cols) * static_cast<double>(grouped_rows);
}

namespace qgemm {
namespace {

// QuantGemm's checks of p's shape, pointers and strides (not the workspace: an empty product
// needs none).
cudaError_t CheckParams(const QuantGemmParams& p) {
  if (FindLaunch(p.type).gemm == nullptr) return cudaErrorInvalidValue;
  const quant::TypeTraits& tr = quant::Traits(p.type);
  const int64_t be = tr.block_elems, bb = tr.block_bytes;
  if (p.rows < 0 || p.cols <= 0 || p.n_tokens < 0 || p.n_groups < 1) return cudaErrorInvalidValue;
  if (p.group_offsets == nullptr && p.n_groups != 1) return cudaErrorInvalidValue;
  if (p.cols % be != 0 || p.cols % 32 != 0 || p.cols > (int64_t{1} << 25)) return cudaErrorInvalidValue;
  if (p.iq1s_ternary && p.type != quant::GgmlType::kIQ1_S) return cudaErrorInvalidValue;
  const int64_t row_bytes = p.iq1s_ternary ? Iq1sTernaryRowBytes(p.cols) : p.cols / be * bb;
  if (static_cast<int64_t>(p.row_bytes) != row_bytes) return cudaErrorInvalidValue;
  if (p.rows > (int64_t{1} << 31) - kBM || p.n_tokens > 0x7fffffff || p.n_groups > 0x7fffffff - 1) {
    return cudaErrorInvalidValue;
  }
  if (p.weight == nullptr || (p.x == nullptr && p.x_half == nullptr) || p.y == nullptr) return cudaErrorInvalidValue;
  if (!Aligned16(p.weight) || (p.x_half == nullptr && !Aligned16(p.x))) return cudaErrorMisalignedAddress;
  if (p.x_half != nullptr && (reinterpret_cast<uintptr_t>(p.x_half) & 255u) != 0) return cudaErrorMisalignedAddress;
  if ((p.n_groups > 1 || p.mat_ids != nullptr) &&
      (p.mat_stride_bytes % 16 != 0 || p.mat_stride_bytes < p.rows * static_cast<int64_t>(p.row_bytes))) {
    return cudaErrorInvalidValue;
  }
  if (p.x_stride % 4 != 0 || p.x_stride < p.cols || p.y_stride < p.rows) return cudaErrorInvalidValue;
  if (p.x_rows != nullptr && (p.x_src_rows < 1 || p.x_src_rows > 0x7fffffff)) return cudaErrorInvalidValue;
  if (p.token_tile != 0 && p.token_tile != kTokensGrouped && p.token_tile != kTokensPlain) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// The workspace checks of a product with rows and tokens.
cudaError_t CheckWorkspace(const QuantGemmParams& p) {
  if (p.x_half != nullptr) return cudaSuccess;  // x comes rounded: no pre-pass
  if (p.workspace == nullptr || p.workspace_bytes < QuantGemmWorkspaceBytes(p)) return cudaErrorInvalidValue;
  if ((reinterpret_cast<uintptr_t>(p.workspace) & 255u) != 0) return cudaErrorMisalignedAddress;
  return cudaSuccess;
}

// The kernels' arguments for p with tiles of bm weight rows x bn tokens (*a), and the x pre-pass
// launched on `stream` (permuted for the wgmma kernel).
cudaError_t PrepareArgs(const QuantGemmParams& p, int64_t bm, int64_t bn, bool permute_x, cudaStream_t stream,
                        Args* a) {
  const quant::TypeTraits& tr = quant::Traits(p.type);
  const bool grouped = p.group_offsets != nullptr;
  *a = Args{};
  a->w = static_cast<const uint8_t*>(p.weight);
  a->mat_stride = p.mat_stride_bytes;
  a->mat_ids = p.mat_ids;
  a->rows = p.rows;
  a->row_bytes = static_cast<int64_t>(p.row_bytes);
  a->cols = static_cast<int32_t>(p.cols);
  a->n_steps = static_cast<int32_t>((p.cols + kBK - 1) / kBK);
  a->bpr = static_cast<int32_t>(p.cols / tr.block_elems);
  int chunk_blocks = 1;
  qgemv::VisitFormat(p.type, [&](auto f) {
    using F = decltype(f);
    chunk_blocks = Geo<F>::kChunkBlocks;
    a->table_bytes = qgemv::TableBytes<F>();
  });
  a->n_chunks = (a->bpr + chunk_blocks - 1) / chunk_blocks;
  a->row_tiles = static_cast<int32_t>((p.rows + bm - 1) / bm);
  a->band = grouped ? a->row_tiles : (a->row_tiles < kBandPlain ? a->row_tiles : kBandPlain);
  // Grouped: group g's rows need at most floor(off[g+1]/BN) - floor(off[g]/BN) + 1 tiles, which
  // sum to at most floor(n_tokens/BN) + n_groups.
  a->token_tiles = (p.n_tokens + bn - 1) / bn + (grouped ? p.n_groups : 0);
  const int64_t n_src = SourceRows(p);
  __half* const xh = static_cast<__half*>(p.workspace);
  __half* const xl =
      p.split_x ? reinterpret_cast<__half*>(static_cast<uint8_t*>(p.workspace) + PlaneBytes(p)) : nullptr;
  a->xh = xh;
  a->xl = xl;
  a->n_src = n_src;
  a->x_rows = p.x_rows;
  a->y = p.y;
  a->y_stride = p.y_stride;
  a->n_tokens = p.n_tokens;
  a->n_groups = static_cast<int32_t>(p.n_groups);
  a->group_offsets = p.group_offsets;
  if (static_cast<int64_t>(a->row_tiles) * a->token_tiles > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.x_half != nullptr) {  // rounded and permuted already (CheckParams: only on the wgmma kernel)
    a->xh = static_cast<const __half*>(p.x_half);
    a->xl = nullptr;
    return cudaSuccess;
  }
  const int64_t conv_col_blocks = (p.cols / 8 + kConvThreads - 1) / kConvThreads;
  const dim3 conv_grid(static_cast<unsigned>(n_src), static_cast<unsigned>(conv_col_blocks));
  K3_CUDA_CHECK(LaunchKernel(XToHalfKernel, conv_grid, kConvThreads, 0, stream, p.x, p.x_stride,
                             static_cast<int32_t>(p.cols), xh, xl, permute_x));
  return cudaSuccess;
}

// The multiprocessors the IQ1_S wgmma kernel runs on for p, or 0 when p takes another kernel.
int WgmmaSmsFor(const QuantGemmParams& p) {
  // (matrices under 2 GiB: the kernel's weight offsets are 32-bit; larger ones take mma.sync)
  return p.wgmma && p.type == quant::GgmlType::kIQ1_S && !p.split_x && !p.generic_decode && p.token_tile == 0 &&
                 p.rows * static_cast<int64_t>(p.row_bytes) < (int64_t{1} << 31)
             ? WgmmaSms()
             : 0;
}

}  // namespace
}  // namespace qgemm

cudaError_t QuantGemm(const QuantGemmParams& p, cudaStream_t stream) {
  using namespace qgemm;
  if (const cudaError_t e = CheckParams(p); e != cudaSuccess) return e;
  if (p.rows == 0 || p.n_tokens == 0) return cudaSuccess;
  if (const cudaError_t e = CheckWorkspace(p); e != cudaSuccess) return e;

  const bool grouped = p.group_offsets != nullptr;
  // Token tiles of 128 for plain products. (64 for plain grids below one wave was measured slower:
  // attn_output T=512 157 -> 119 TFLOP/s, the router at T=4096 70 -> 40: the 128-token block
  // amortizes its decode over twice the tokens.) Grouped: 64 while the average group (n_tokens /
  // n_groups: only a bound, the offsets are on the device) is short, 128 from kGroupedWideRows
  // on: a group of 65..128 rows then takes one decode of its weights instead of two. Measured
  // (H200, IQ1_S 896 experts, 3584 -> 3072): 37 rows on average, 64 faster by 4% (uneven
  // groups) to 19% (uniform); 73 rows, 128 faster by 12% to 35%; the crossover is estimated
  // between ~48 (uneven) and ~58 (uniform: groups past 64 rows become common).
  constexpr int64_t kGroupedWideRows = 56;
  const bool small_tiles = p.token_tile != 0 ? p.token_tile == kTokensGrouped
                                             : grouped && p.n_tokens < kGroupedWideRows * p.n_groups;
  const int wgmma_sms = WgmmaSmsFor(p);
  const bool wgmma = wgmma_sms > 0;
  // x_half is only the wgmma kernel's layout, and the ternary form only its weights
  if ((p.x_half != nullptr || p.iq1s_ternary) && !wgmma) return cudaErrorInvalidValue;
  const int64_t bn = wgmma ? kWgmmaTokens : small_tiles ? kTokensGrouped : kTokensPlain;
  Args a;
  if (const cudaError_t e = PrepareArgs(p, kBM, bn, wgmma, stream, &a); e != cudaSuccess) return e;
  if (wgmma) return GemmLaunchIq1sWgmma(a, wgmma_sms, false, p.iq1s_ternary, stream);
  K3_CUDA_CHECK(FindLaunch(p.type).gemm(a, small_tiles, p.split_x, p.generic_decode, stream));
  return cudaSuccess;
}

bool QuantGemmGateUpSupports(const QuantGemmParams& gate) { return qgemm::WgmmaSmsFor(gate) > 0; }

bool QuantGemmTakesHalfX(const QuantGemmParams& p) { return qgemm::WgmmaSmsFor(p) > 0; }

bool QuantGemmTakesTernary(const QuantGemmParams& p) { return qgemm::WgmmaSmsFor(p) > 0; }

cudaError_t QuantGemmGateUpSitu(const QuantGemmGateUpParams& p, cudaStream_t stream) {
  using namespace qgemm;
  const QuantGemmParams& g = p.gate;
  const int sms = WgmmaSmsFor(g);
  if (sms == 0) return cudaErrorInvalidValue;  // QuantGemmGateUpSupports(gate) must hold
  if (const cudaError_t e = CheckParams(g); e != cudaSuccess) return e;
  if (p.up_weight == nullptr) return cudaErrorInvalidValue;
  if (!Aligned16(p.up_weight)) return cudaErrorMisalignedAddress;
  if (p.y_half != nullptr && g.rows % 128 != 0) return cudaErrorInvalidValue;  // whole permutation windows
  if ((reinterpret_cast<uintptr_t>(p.y_half) & 255u) != 0) return cudaErrorMisalignedAddress;
  if (g.rows == 0 || g.n_tokens == 0) return cudaSuccess;
  if (const cudaError_t e = CheckWorkspace(g); e != cudaSuccess) return e;
  Args a;
  if (const cudaError_t e = PrepareArgs(g, kBM / 2, kWgmmaTokens, true, stream, &a); e != cudaSuccess) return e;
  a.w_up = static_cast<const uint8_t*>(p.up_weight);
  a.situ_beta = p.situ_beta;
  a.situ_lambda = p.situ_lambda;
  a.y_half = static_cast<__half*>(p.y_half);
  return GemmLaunchIq1sWgmma(a, sms, true, g.iq1s_ternary, stream);
}

cudaError_t QuantDequantF16(const QuantDequantF16Params& p, cudaStream_t stream) {
  using namespace qgemm;
  const DequantLaunchFn launch = FindLaunch(p.type).dequant;
  if (launch == nullptr) return cudaErrorInvalidValue;
  const quant::TypeTraits& tr = quant::Traits(p.type);
  if (p.cols <= 0 || p.cols % tr.block_elems != 0 || p.cols % 32 != 0 || p.cols > (int64_t{1} << 25)) {
    return cudaErrorInvalidValue;
  }
  if (static_cast<int64_t>(p.row_bytes) != p.cols / tr.block_elems * tr.block_bytes) return cudaErrorInvalidValue;
  if (p.row_begin < 0 || p.n_rows < 0) return cudaErrorInvalidValue;
  if (p.n_rows == 0) return cudaSuccess;
  if (p.weight == nullptr || p.out == nullptr) return cudaErrorInvalidValue;
  if (!Aligned16(p.weight) || !Aligned16(p.out)) return cudaErrorMisalignedAddress;
  const int64_t runs = p.n_rows * (p.cols / 32);
  const int64_t blocks = std::min<int64_t>((runs + kDequantThreads - 1) / kDequantThreads, 4096);
  const uint8_t* w = static_cast<const uint8_t*>(p.weight) + p.row_begin * static_cast<int64_t>(p.row_bytes);
  return launch(w, static_cast<int64_t>(p.row_bytes), static_cast<int32_t>(p.cols), p.n_rows, p.out,
                static_cast<int>(blocks), stream);
}

cudaError_t RoundRowsToHalf(const float* x, int64_t x_stride, int64_t n_rows, int64_t cols, void* out,
                            cudaStream_t stream) {
  using namespace qgemm;
  if (n_rows < 0 || cols <= 0 || cols % 8 != 0 || x_stride < cols || x_stride % 4 != 0 || n_rows > 0x7fffffff ||
      cols > (int64_t{1} << 25)) {
    return cudaErrorInvalidValue;
  }
  if (n_rows == 0) return cudaSuccess;
  if (x == nullptr || out == nullptr) return cudaErrorInvalidValue;
  if (!Aligned16(x) || !Aligned16(out)) return cudaErrorMisalignedAddress;
  const int64_t col_blocks = (cols / 8 + kConvThreads - 1) / kConvThreads;
  K3_CUDA_CHECK(LaunchKernel(XToHalfKernel, dim3(static_cast<unsigned>(n_rows), static_cast<unsigned>(col_blocks)),
                             kConvThreads, 0, stream, x, x_stride, static_cast<int32_t>(cols),
                             static_cast<__half*>(out), static_cast<__half*>(nullptr), false));
  return cudaSuccess;
}

}  // namespace k3::cuda
