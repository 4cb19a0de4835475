#include "kernels/cuda/mla/mla_prefill_mha.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_ptx.cuh"
#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "kernels/quant/ggml_type.h"

namespace k3::cuda {
namespace {

using ptx::CpAsync16;
using ptx::CpAsyncCommit;
using ptx::CpAsyncWait;
using ptx::LdMatrixX4;
using ptx::LdMatrixX4Trans;
using ptx::LoadHalf8;
using ptx::Mma16816;
using ptx::SmemAddr;
using ptx::Swz;

constexpr int kNope = static_cast<int>(kMlaMhaNope);
constexpr int kLat = static_cast<int>(kMlaMhaLatent);
constexpr int kVal = static_cast<int>(kMlaMhaValue);
constexpr int kQk = kNope + static_cast<int>(kMlaMhaRope);  // 192: the per-head query / key width
constexpr int kRow = kLat + static_cast<int>(kMlaMhaRope);  // 576: a cache row
constexpr int kQkChunks = kQk / 8;                          // 16-byte chunks of a Q or K tile row
constexpr int kValChunks = kVal / 8;
constexpr int kBM = 64;  // query rows per block, 16 per warp
constexpr int kBN = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kKSteps = kQk / 16;  // k16 steps of S = Q·Kᵀ
constexpr int kGatherRows = 16;    // cache rows per block of the gather pass
constexpr float kLog2e = 1.4426950408889634f;

constexpr size_t kQBytes = sizeof(__half) * kBM * kQk;
constexpr size_t kKBytes = sizeof(__half) * kBN * kQk;   // one key tile
constexpr size_t kVBytes = sizeof(__half) * kBN * kVal;  // one value tile
constexpr size_t kSmemBytes = kQBytes + 2 * kKBytes + 2 * kVBytes + sizeof(int) * (kBM + 4);

// ---- cache rows -> dense f16 ---------------------------------------------------------------------

// Block = kGatherRows cache rows t < kv_len, copied from their pages to dst[t][576] as f16.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    GatherRowsKernel(const T* cache, const int32_t* table, int64_t page_stride, int64_t row_stride, int page_size,
                     int kv_len, __half* dst) {
  PdlEnter();
  constexpr int cpr = kRow / 8;
  const int t0 = blockIdx.x * kGatherRows;
  for (int i = threadIdx.x; i < kGatherRows * cpr; i += kThreads) {
    const int r = i / cpr, c = i - r * cpr, t = t0 + r;
    if (t >= kv_len) break;  // i only grows
    const T* src =
        cache + static_cast<int64_t>(table[t / page_size]) * page_stride + (t % page_size) * row_stride + c * 8;
    uint4 h;
    if constexpr (sizeof(T) == 2) {
      h = *reinterpret_cast<const uint4*>(src);
    } else {
      h = LoadHalf8(src, 1.0f);
    }
    *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(t) * kRow + c * 8) = h;
  }
}

// ---- the attention kernel -------------------------------------------------------------------------

// 2^x in one MUFU instruction (ex2.approx.ftz: relative error ~2^-22, far below the f16 rounding
// of the weights it produces; exp2f's accurate sequence costs several more).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

struct Args {
  const float* q;  // [n_rows][q_row_stride]: head g of the group at g*192
  int64_t q_row_stride;
  const __half* k_nope;  // [kv_len][k_row_stride]: head g at g*128
  int64_t k_row_stride;
  const __half* k_pe;  // dense cache rows + 512: row t at k_pe + t*576 (64 values, shared by every head)
  const __half* v;     // [kv_len][v_row_stride]: head g at g*128
  int64_t v_row_stride;
  const int32_t* seq_lens;  // [n_rows]
  int n_rows, kv_len;
  float q_mul;  // scale · log2(e): scores come out in log2 units
  float* out;   // [n_rows][out_row_stride]: head g at g*128
  int64_t out_row_stride;
};

// Block = (64 query rows, one head), 4 warps; warp w owns query rows 16w..16w+15 (FlashAttention-2
// layout: S, P and O of a warp never leave its registers). Q is read once into registers (f16 A
// fragments, 12 k-steps of 16). Per key tile of 64 rows (cp.async into one of two buffers, the
// next tile loading while this one is used; rows >= kv_len are zero-filled):
//   S = Q·Kᵀ (16 × 64 per warp; K rows = K_nope (128) | k_pe (64)), keys >= the row's len masked
//   (only in tiles that reach past the block's shortest len), online softmax in f32 (log2 units;
//   l sums, on the tensor cores, the f16-rounded weights P·V uses, so o is a convex combination of
//   the f16 V rows), O = α·O + P·V with P taken straight from the S accumulators as A fragments.
// Two barriers per tile: tile ready; tile's last read done (before its buffer is refilled).
__global__ void __launch_bounds__(kThreads, 2) MhaAttentionKernel(const Args a) {
  PdlEnter();
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* sq = smem;                               // [kBM][192] f16, swizzled
  unsigned char* sk = sq + kQBytes;                       // [2][kBN][192]
  unsigned char* sv = sk + 2 * kKBytes;                   // [2][kBN][128]
  int* s_len = reinterpret_cast<int*>(sv + 2 * kVBytes);  // [kBM]: -1 past n_rows
  int* s_red = s_len + kBM;                               // [4]: max, max, min, min (warps 0, 1)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // latest rows (the most keys) first
  const int head = blockIdx.y;
  const int i0 = tile * kBM;

  if (tid < kBM) {
    const int i = i0 + tid;
    const int len = i < a.n_rows ? min(max(a.seq_lens[i], 0), a.kv_len) : -1;
    s_len[tid] = len;
    const int mx = __reduce_max_sync(detail::kFullMask, len);
    const int mn = __reduce_min_sync(detail::kFullMask, len < 0 ? INT_MAX : len);
    if (lane == 0) {
      s_red[warp] = mx;
      s_red[2 + warp] = mn;
    }
  }
  for (int i = tid; i < kBM * kQkChunks; i += kThreads) {
    const int r = i / kQkChunks, c = i - r * kQkChunks, row = i0 + r;
    uint4 h = make_uint4(0u, 0u, 0u, 0u);
    if (row < a.n_rows) h = LoadHalf8(a.q + row * a.q_row_stride + head * kQk + c * 8, a.q_mul);
    *reinterpret_cast<uint4*>(sq + Swz(r, c, kQkChunks)) = h;
  }
  __syncthreads();
  const int lmax = max(s_red[0], s_red[1]), lmin = min(s_red[2], s_red[3]);
  const int n_kt = lmax > 0 ? (lmax + kBN - 1) / kBN : 0;

  // Tile loader: thread = (rows tid/8 + 16j, chunks tid%8 + 8c): 8 threads read 128 contiguous
  // bytes of a row, and the swizzled chunk (tid%8 + 8c) ^ (row & 7) = 8c + (tid%8 ^ (tid/8)%8) is
  // the same for every row the thread loads (rows 16 apart): no address arithmetic per chunk.
  const int ld_row = tid >> 3, ld_chunk = tid & 7, ld_swz = (ld_chunk ^ (ld_row & 7)) << 4;
  const __half* k_src = a.k_nope + head * kNope + ld_chunk * 8;
  const __half* pe_src = a.k_pe + ld_chunk * 8;
  const __half* v_src = a.v + head * kVal + ld_chunk * 8;
  auto issue_tile = [&](int kt, int buf) {
    const uint32_t kdst = SmemAddr(sk + buf * kKBytes) + ld_row * (kQkChunks * 16) + ld_swz;
    const uint32_t vdst = SmemAddr(sv + buf * kVBytes) + ld_row * (kValChunks * 16) + ld_swz;
#pragma unroll
    for (int j = 0; j < kBN / 16; ++j) {
      const int t = kt * kBN + ld_row + 16 * j;
      const int bytes = t < a.kv_len ? 16 : 0;  // rows past the cache: zeros, nothing read
      const int64_t tt = t < a.kv_len ? t : 0;
      const uint32_t kd = kdst + j * 16 * (kQkChunks * 16), vd = vdst + j * 16 * (kValChunks * 16);
      CpAsync16(kd, k_src + tt * a.k_row_stride, bytes);
      CpAsync16(kd + 128, k_src + tt * a.k_row_stride + 64, bytes);
      CpAsync16(kd + 256, pe_src + tt * kRow, bytes);
      CpAsync16(vd, v_src + tt * a.v_row_stride, bytes);
      CpAsync16(vd + 128, v_src + tt * a.v_row_stride + 64, bytes);
    }
    CpAsyncCommit();
  };
  if (n_kt > 0) issue_tile(0, 0);

  const int wrow = warp * 16, g = lane >> 2, q4 = lane & 3;
  uint32_t qf[kKSteps][4];
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    LdMatrixX4(qf[ks], SmemAddr(sq) + Swz(wrow + (lane & 15), ks * 2 + (lane >> 4), kQkChunks));
  }
  const int len0 = s_len[wrow + g], len1 = s_len[wrow + g + 8];
  // ldmatrix addresses: lane-constant bases plus compile-time offsets. A K fragment's rows r have
  // r & 7 = lane & 7 and its chunk 2ks + b (b: a lane bit), so its swizzled chunk is
  // 8(ks/4) + (2(ks%4) ^ (b ^ (lane & 7))): one of four lane-constant offsets (likewise for V).
  const int x = lane & 7;
  const uint32_t k_lane = (x + ((lane >> 4) << 3)) * (kQkChunks * 16);
  const uint32_t v_lane = (x + (((lane >> 3) & 1) << 3)) * (kValChunks * 16);
  uint32_t k_off[4], v_off[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    k_off[m] = ((2 * m) ^ (((lane >> 3) & 1) ^ x)) << 4;
    v_off[m] = ((2 * m) ^ ((lane >> 4) ^ x)) << 4;
  }
  float m0 = -INFINITY, m1 = -INFINITY;
  // Row sums of P on the tensor cores: P · (a 16 x 8 tile of ones) gives each row's sum in every
  // column: ls[0] (row g) and ls[2] (row g + 8), summed exactly over the f16 weights P·V uses.
  constexpr uint32_t kOnes = 0x3C003C00u;  // two f16 1.0
  float ls[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float o[kVal / 8][4];
#pragma unroll
  for (int dt = 0; dt < kVal / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

  for (int kt = 0; kt < n_kt; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < n_kt) {
      issue_tile(kt + 1, buf ^ 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const uint32_t kb = SmemAddr(sk + buf * kKBytes), vb = SmemAddr(sv + buf * kVBytes);

    float s[kBN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kBN / 16; ++np) {
        uint32_t b[4];
        LdMatrixX4(b, kb + k_lane + k_off[ks & 3] + np * 16 * (kQkChunks * 16) + (ks >> 2) * 128);
        Mma16816(s[2 * np], qf[ks], b[0], b[1]);
        Mma16816(s[2 * np + 1], qf[ks], b[2], b[3]);
      }
    }
    const int t0 = kt * kBN;
    if (t0 + kBN > lmin) {  // some key of the tile is past some row's len
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int t = t0 + nt * 8 + 2 * q4 + j;
          if (t >= len0) s[nt][j] = -INFINITY;
          if (t >= len1) s[nt][2 + j] = -INFINITY;
        }
      }
    }
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
      mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(detail::kFullMask, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(detail::kFullMask, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(detail::kFullMask, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(detail::kFullMask, mx1, 2));
    // A row with every key so far masked keeps m = -inf; its weights are exp2(-inf) = 0.
    const float base0 = mx0 == -INFINITY ? 0.0f : mx0, base1 = mx1 == -INFINITY ? 0.0f : mx1;
    const float al0 = Exp2(m0 - base0), al1 = Exp2(m1 - base1);
    m0 = mx0;
    m1 = mx1;
    ls[0] *= al0;
    ls[1] *= al0;
    ls[2] *= al1;
    ls[3] *= al1;
#pragma unroll
    for (int dt = 0; dt < kVal / 8; ++dt) {
      o[dt][0] *= al0;
      o[dt][1] *= al0;
      o[dt][2] *= al1;
      o[dt][3] *= al1;
    }
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      // P's k16 step kk as an A fragment: key tiles 2kk (a0, a1) and 2kk + 1 (a2, a3).
      uint32_t pa[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float(&sc)[4] = s[2 * kk + h];
        pa[2 * h] = ptx::PackHalf2(Exp2(sc[0] - base0), Exp2(sc[1] - base0));
        pa[2 * h + 1] = ptx::PackHalf2(Exp2(sc[2] - base1), Exp2(sc[3] - base1));
      }
      Mma16816(ls, pa, kOnes, kOnes);
#pragma unroll
      for (int dp = 0; dp < kVal / 16; ++dp) {
        uint32_t b[4];
        LdMatrixX4Trans(b, vb + v_lane + v_off[dp & 3] + kk * 16 * (kValChunks * 16) + (dp >> 2) * 128);
        Mma16816(o[2 * dp], pa, b[0], b[1]);
        Mma16816(o[2 * dp + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads();  // this buffer is refilled by the next iteration's issue
  }

  const float l0 = ls[0], l1 = ls[2];
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  const int r0 = i0 + wrow + g, r1 = r0 + 8;
  float* out = a.out + head * kVal + 2 * q4;
#pragma unroll
  for (int dt = 0; dt < kVal / 8; ++dt) {
    if (r0 < a.n_rows) {
      *reinterpret_cast<float2*>(out + r0 * a.out_row_stride + dt * 8) = make_float2(o[dt][0] * inv0, o[dt][1] * inv0);
    }
    if (r1 < a.n_rows) {
      *reinterpret_cast<float2*>(out + r1 * a.out_row_stride + dt * 8) = make_float2(o[dt][2] * inv1, o[dt][3] * inv1);
    }
  }
}

// ---- workspace --------------------------------------------------------------------------------------

size_t Align256(int64_t bytes) { return (static_cast<size_t>(bytes) + 255) / 256 * 256; }
size_t WeightBytes(int64_t n_heads) { return Align256(n_heads * kLat * kNope * 2); }  // one of k_b, v_b as f16
size_t RowsBytes(int64_t kv_len) { return Align256(kv_len * kRow * 2); }
size_t KvBytes(int64_t kv_len, int64_t group) { return Align256(kv_len * group * kNope * 2); }  // K_nope or V

bool Aligned(const void* p, uintptr_t n) { return (reinterpret_cast<uintptr_t>(p) & (n - 1)) == 0; }

// The matrices of `n_heads` heads of a stack decoded to f16, [n_heads][rows][cols], one launch when
// the heads are contiguous.
cudaError_t DequantHeads(quant::GgmlType type, const void* w, size_t head_bytes, int64_t rows, int64_t cols,
                         size_t row_bytes, int64_t n_heads, __half* out, cudaStream_t stream) {
  QuantDequantF16Params d{type, w, cols, row_bytes, 0, rows, out};
  if (head_bytes == static_cast<size_t>(rows) * row_bytes) {
    d.n_rows = rows * n_heads;
    return QuantDequantF16(d, stream);
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    d.weight = static_cast<const unsigned char*>(w) + h * head_bytes;
    d.out = out + h * rows * cols;
    K3_CUDA_CHECK(QuantDequantF16(d, stream));
  }
  return cudaSuccess;
}

}  // namespace

size_t MlaPrefillMhaWorkspaceBytes(int64_t kv_len, int64_t n_heads, int64_t group) {
  return 2 * WeightBytes(n_heads) + RowsBytes(kv_len) + 2 * KvBytes(kv_len, group);
}

int64_t MlaPrefillMhaGroup(int64_t kv_len, int64_t n_heads, size_t bytes) {
  if (kv_len < 1 || n_heads < 1 || bytes < MlaPrefillMhaWorkspaceBytes(kv_len, n_heads, 1)) return 0;
  const size_t fixed = 2 * WeightBytes(n_heads) + RowsBytes(kv_len);
  int64_t g =
      std::min<int64_t>(n_heads, static_cast<int64_t>((bytes - fixed) / (static_cast<size_t>(kv_len) * kNope * 4)));
  while (g > 1 && MlaPrefillMhaWorkspaceBytes(kv_len, n_heads, g) > bytes) --g;  // the 256-byte roundings
  return std::max<int64_t>(g, 1);
}

cudaError_t MlaPrefillMha(const MlaPrefillMhaParams& p, cudaStream_t stream) {
  if (p.n_rows < 0 || p.n_heads < 0 || p.n_rows > INT_MAX / 2 || p.n_heads > 65535) return cudaErrorInvalidValue;
  if (p.n_rows == 0 || p.n_heads == 0) return cudaSuccess;
  if (p.cache_type != MlaCacheType::kF32 && p.cache_type != MlaCacheType::kF16) return cudaErrorInvalidValue;
  if (p.q == nullptr || p.cache == nullptr || p.block_table == nullptr || p.seq_lens == nullptr || p.out == nullptr ||
      p.k_b == nullptr || p.v_b == nullptr || p.blas == nullptr || p.workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.page_size < 1 || p.page_size > INT_MAX || p.kv_len < 1 || p.kv_len > (int64_t{1} << 30) ||
      p.row_stride < kRow || p.q_row_stride < p.n_heads * kQk || p.out_row_stride < p.n_heads * kVal) {
    return cudaErrorInvalidValue;
  }
  if (!QuantGemmSupports(p.weight_type)) return cudaErrorInvalidValue;
  const quant::TypeTraits& tr = quant::Traits(p.weight_type);
  if (kNope % tr.block_elems != 0) return cudaErrorInvalidValue;  // attn_k_b rows are 128 wide
  const size_t kb_row = static_cast<size_t>(kNope / tr.block_elems) * tr.block_bytes;
  const size_t vb_row = static_cast<size_t>(kLat / tr.block_elems) * tr.block_bytes;
  if (p.k_b_head_bytes < kb_row * kLat || p.v_b_head_bytes < vb_row * kVal) return cudaErrorInvalidValue;
  const int64_t group = MlaPrefillMhaGroup(p.kv_len, p.n_heads, p.workspace_bytes);
  if (group < 1) return cudaErrorInvalidValue;
  const int64_t vec = p.cache_type == MlaCacheType::kF16 ? 8 : 4;
  if (!Aligned(p.cache, 16) || !Aligned(p.q, 16) || !Aligned(p.out, 8) || !Aligned(p.workspace, 256) ||
      !Aligned(p.k_b, 16) || !Aligned(p.v_b, 16) || p.k_b_head_bytes % 16 != 0 || p.v_b_head_bytes % 16 != 0 ||
      p.page_stride % vec != 0 || p.row_stride % vec != 0 || p.q_row_stride % 4 != 0 || p.out_row_stride % 2 != 0) {
    return cudaErrorMisalignedAddress;
  }

  unsigned char* ws = static_cast<unsigned char*>(p.workspace);
  __half* kb16 = reinterpret_cast<__half*>(ws);                                 // [n_heads][512][128]
  __half* vb16 = reinterpret_cast<__half*>(ws + WeightBytes(p.n_heads));        // [n_heads][128][512]
  __half* rows16 = reinterpret_cast<__half*>(ws + 2 * WeightBytes(p.n_heads));  // [kv_len][576]
  __half* k_nope = reinterpret_cast<__half*>(ws + 2 * WeightBytes(p.n_heads) + RowsBytes(p.kv_len));
  __half* v = reinterpret_cast<__half*>(reinterpret_cast<unsigned char*>(k_nope) + KvBytes(p.kv_len, group));
  const int kv_len = static_cast<int>(p.kv_len);

  const auto gather_blocks = static_cast<unsigned>(detail::CeilDiv(p.kv_len, kGatherRows));
  if (p.cache_type == MlaCacheType::kF16) {
    K3_CUDA_CHECK(LaunchKernel(GatherRowsKernel<__half>, gather_blocks, kThreads, 0, stream,
                               static_cast<const __half*>(p.cache), p.block_table, p.page_stride, p.row_stride,
                               static_cast<int>(p.page_size), kv_len, rows16));
  } else {
    K3_CUDA_CHECK(LaunchKernel(GatherRowsKernel<float>, gather_blocks, kThreads, 0, stream,
                               static_cast<const float*>(p.cache), p.block_table, p.page_stride, p.row_stride,
                               static_cast<int>(p.page_size), kv_len, rows16));
  }
  K3_CUDA_CHECK(DequantHeads(p.weight_type, p.k_b, p.k_b_head_bytes, kLat, kNope, kb_row, p.n_heads, kb16, stream));
  K3_CUDA_CHECK(DequantHeads(p.weight_type, p.v_b, p.v_b_head_bytes, kVal, kLat, vb_row, p.n_heads, vb16, stream));

  K3_CUBLAS_CHECK(cublasSetStream(p.blas, stream));
  K3_CUDA_CHECK(cudaFuncSetAttribute(MhaAttentionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmemBytes)));
  const float one = 1.0f, zero = 0.0f;
  const auto q_tiles = static_cast<unsigned>(detail::CeilDiv(p.n_rows, kBM));
  for (int64_t h0 = 0; h0 < p.n_heads; h0 += group) {
    const int gc = static_cast<int>(std::min(group, p.n_heads - h0));
    const int ld = gc * kNope;
    // Column-major views: lat = rows16 as [576 × kv_len] (its first 512 rows), K_nope_h = k_b[h]ᵀ·lat
    // with k_b[h] [512][128] row-major = [128 × 512] column-major; V_h = v_b[h]·lat with v_b[h]
    // [128][512] row-major = [512 × 128] column-major, transposed. Head g's output columns at g·128.
    K3_CUBLAS_CHECK(cublasGemmStridedBatchedEx(p.blas, CUBLAS_OP_N, CUBLAS_OP_N, kNope, kv_len, kLat, &one,
                                               kb16 + h0 * kLat * kNope, CUDA_R_16F, kNope, int64_t{kLat} * kNope,
                                               rows16, CUDA_R_16F, kRow, 0, &zero, k_nope, CUDA_R_16F, ld, kNope, gc,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    K3_CUBLAS_CHECK(cublasGemmStridedBatchedEx(p.blas, CUBLAS_OP_T, CUBLAS_OP_N, kVal, kv_len, kLat, &one,
                                               vb16 + h0 * kLat * kVal, CUDA_R_16F, kLat, int64_t{kLat} * kVal, rows16,
                                               CUDA_R_16F, kRow, 0, &zero, v, CUDA_R_16F, ld, kVal, gc,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    Args a{};
    a.q = p.q + h0 * kQk;
    a.q_row_stride = p.q_row_stride;
    a.k_nope = k_nope;
    a.k_row_stride = ld;
    a.k_pe = rows16 + kLat;
    a.v = v;
    a.v_row_stride = ld;
    a.seq_lens = p.seq_lens;
    a.n_rows = static_cast<int>(p.n_rows);
    a.kv_len = kv_len;
    a.q_mul = p.scale * kLog2e;
    a.out = p.out + h0 * kVal;
    a.out_row_stride = p.out_row_stride;
    K3_CUDA_CHECK(LaunchKernel(MhaAttentionKernel, dim3(q_tiles, static_cast<unsigned>(gc)), dim3(kThreads), kSmemBytes,
                               stream, a));
  }
  return cudaSuccess;
}

}  // namespace k3::cuda
