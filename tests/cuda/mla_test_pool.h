// The paged MLA cache of the attention kernels' tests (mla_decode_test, mla_prefill_test,
// mla_prefill_mha_test): a pool of pages of N(0, 1) rows, for an f16 cache rounded to f16 (the
// values are what the kernels see, the bits what they read), the pages handed out in a shuffled
// order, and the pool on the device in the cache's type.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/quant/half.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {

struct MlaTestPool {
  std::vector<float> values;   // [pool_pages][page_stride]
  std::vector<uint16_t> bits;  // the same as f16 (f16 caches only)
  std::vector<int32_t> order;  // a permutation of the pool's pages
  DeviceBuffer<float> d32;
  DeviceBuffer<uint16_t> d16;
  const void* device(MlaCacheType type) const {
    return type == MlaCacheType::kF16 ? static_cast<const void*>(d16.get()) : static_cast<const void*>(d32.get());
  }
};

inline void FillMlaTestPool(std::mt19937_64& rng, int64_t pool_pages, int64_t page_stride, MlaCacheType type,
                            MlaTestPool* p) {
  p->values = Normal(rng, pool_pages * page_stride, 0.0, 1.0);
  if (type == MlaCacheType::kF16) {
    p->bits.resize(p->values.size());
    for (size_t i = 0; i < p->values.size(); ++i) {
      p->bits[i] = quant::F32ToF16(p->values[i]);
      p->values[i] = quant::F16ToF32(p->bits[i]);
    }
  }
  p->order.resize(pool_pages);
  std::iota(p->order.begin(), p->order.end(), 0);
  std::shuffle(p->order.begin(), p->order.end(), rng);
  if (type == MlaCacheType::kF16) {
    p->d16.Resize(p->bits.size());
    p->d16.Upload(p->bits);
  } else {
    p->d32.Resize(p->values.size());
    p->d32.Upload(p->values);
  }
}

}  // namespace k3::cuda::testing
