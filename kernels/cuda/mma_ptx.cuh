// The warp-level tensor-core and async-copy instructions the attention kernels share (mla/):
// ldmatrix, mma.sync m16n8k16 (f16 in, f32 out) and m16n8k8 (TF32), cp.async with zero fill, and f16
// packing.
// Inline PTX, each a single instruction; see the PTX ISA for the fragment layouts.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace k3::cuda::ptx {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8×8 b16 matrices from shared memory: lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// The same, each matrix transposed (B operands from row-major [k][n] tiles).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c += a · b, m16n8k16, f16 inputs, f32 accumulators.
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a · b, m16n8k8, TF32 inputs (f32 registers; the mma reads their top 19 bits), f32
// accumulators. Not volatile: no side effect, so the compiler may schedule it with the rest.
__device__ __forceinline__ void Mma1688Tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// v = hi + lo for 3xTF32 products: hi is v rounded to TF32 (half an ulp added, the 13 low bits
// cleared: two integer instructions, where cvt.rna.tf32.f32 runs on the quarter-rate conversion
// pipe), lo = v - hi exactly, passed whole: the mma reads a TF32 operand's top 19 bits, so lo is
// truncated there (2^-10 of lo, ~2^-21 of v). Finite v only.
__device__ __forceinline__ void SplitTf32(float v, uint32_t& hi, uint32_t& lo) {
  hi = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(v - __uint_as_float(hi));
}

// 16 bytes global -> shared; src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);  // lo in the low 16 bits
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 8 floats (two 16-byte loads) -> 8 halves, times `mul`.
__device__ __forceinline__ uint4 LoadHalf8(const float* src, float mul) {
  const float4 x = __ldg(reinterpret_cast<const float4*>(src));
  const float4 y = __ldg(reinterpret_cast<const float4*>(src) + 1);
  return make_uint4(PackHalf2(x.x * mul, x.y * mul), PackHalf2(x.z * mul, x.w * mul), PackHalf2(y.x * mul, y.y * mul),
                    PackHalf2(y.z * mul, y.w * mul));
}

// Byte offset of 16-byte chunk c of row r in a tile of rows of `cpr` chunks (cpr % 8 == 0), chunk
// c stored at c ^ (r & 7): ldmatrix's 8 rows at one logical chunk land in 8 different bank groups.
__device__ __forceinline__ uint32_t Swz(int r, int c, int cpr) {
  return static_cast<uint32_t>(r * cpr * 16 + ((c ^ (r & 7)) << 4));
}

}  // namespace k3::cuda::ptx
