// Helpers of the GPU kernel tests: skip without a device, device buffers poisoned with NaN,
// launch checks. Random inputs and the closeness check come from the CPU kernel tests
// (tests/kernels/kernel_test_util.h), so both sides are judged the same way.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/kernels/kernel_test_util.h"

namespace k3::cuda::testing {

using namespace k3::cpu::testing;  // Normal, Uniform, AllClose, kHidden, ...

// Skips the test (CI has no GPU) when no CUDA device is usable.
#define K3_REQUIRE_GPU()                                                                         \
  do {                                                                                           \
    int k3_n_dev_ = 0;                                                                           \
    const cudaError_t k3_e_ = cudaGetDeviceCount(&k3_n_dev_);                                    \
    if (k3_e_ != cudaSuccess || k3_n_dev_ == 0) {                                                \
      (void)cudaGetLastError();                                                                  \
      GTEST_SKIP() << "no CUDA device ("                                                         \
                   << (k3_e_ != cudaSuccess ? cudaGetErrorString(k3_e_) : "0 devices") << ")"; \
    }                                                                                            \
  } while (0)

// The call's return code, then the kernel's own completion.
#define K3_ASSERT_CUDA(expr)                                                           \
  do {                                                                                 \
    const cudaError_t k3_e_ = (expr);                                                  \
    ASSERT_EQ(k3_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(k3_e_);       \
  } while (0)
#define K3_ASSERT_LAUNCH(expr)                                                                 \
  do {                                                                                         \
    K3_ASSERT_CUDA(expr);                                                                      \
    K3_ASSERT_CUDA(cudaDeviceSynchronize());                                                   \
    K3_ASSERT_CUDA(cudaGetLastError());                                                        \
  } while (0)

// A device array. Poison() fills every byte with 0xFF: NaN as f32, -1 as int32.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { Resize(n); }
  explicit DeviceBuffer(const std::vector<T>& host) {
    Resize(host.size());
    Upload(host);
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void Resize(size_t n) {
    if (p_ != nullptr) cudaFree(p_);
    p_ = nullptr;
    n_ = n;
    if (n > 0 && cudaMalloc(&p_, n * sizeof(T)) != cudaSuccess) {
      p_ = nullptr;
      ADD_FAILURE() << "cudaMalloc of " << n * sizeof(T) << " bytes failed";
    }
  }
  void Upload(const std::vector<T>& host) {
    ASSERT_LE(host.size(), n_);
    ASSERT_EQ(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  void Poison() { ASSERT_EQ(cudaMemset(p_, 0xff, n_ * sizeof(T)), cudaSuccess); }
  std::vector<T> Download() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace k3::cuda::testing
