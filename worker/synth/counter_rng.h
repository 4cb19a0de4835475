// Counter-based randomness for the synthetic model: every random word is a pure function of
// (seed, tensor name, block index, word index), so any byte range of any tensor can be made on
// its own — by any thread, in any order, or by a rank filling only its shard — and always
// comes out the same. Integer arithmetic only (no libm), so the bytes do not depend on the
// platform's math library either.
//
// Mix64 and BlockRng are host-and-device code (K3_SYNTH_HD): the GPU fill
// (worker/synth_cuda/) draws the same words. Compiled as plain C++ the marks are empty.
#pragma once

#include <cstdint>
#include <string_view>

#if defined(__CUDACC__)
#define K3_SYNTH_HD __host__ __device__
#else
#define K3_SYNTH_HD
#endif

namespace k3::synth {

inline constexpr uint64_t kGolden64 = 0x9e3779b97f4a7c15ull;

// splitmix64's finalizer: a bijective 64-bit mixer with full avalanche.
K3_SYNTH_HD constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// FNV-1a over the name, then mixed: names differing in one character give unrelated keys.
constexpr uint64_t HashName(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return Mix64(h);
}

// The key of one tensor of one model.
constexpr uint64_t TensorKey(uint64_t seed, std::string_view name) {
  return Mix64(Mix64(seed + kGolden64) ^ HashName(name));
}

// The random words of one block of a tensor: a splitmix64 stream started at the block's own
// random state (splitmix64 of the tensor key, at the block index).
class BlockRng {
 public:
  K3_SYNTH_HD BlockRng(uint64_t tensor_key, uint64_t block) : state_(Mix64(tensor_key + (block + 1) * kGolden64)) {}
  K3_SYNTH_HD uint64_t Next() { return Mix64(state_ += kGolden64); }
  // Uniform in [0, 1) with 24 random bits (exact in float).
  K3_SYNTH_HD float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  // Approximately standard normal: the sum of four 16-bit uniforms (Irwin-Hall), centred and
  // scaled to unit variance. Bounded at +-3.46 sigma, which suits weights well enough.
  K3_SYNTH_HD float Normal() { return NormalFromWord(Next()); }
  K3_SYNTH_HD static float NormalFromWord(uint64_t w) {
    const int64_t s = static_cast<int64_t>(w & 0xffff) + static_cast<int64_t>((w >> 16) & 0xffff) +
                      static_cast<int64_t>((w >> 32) & 0xffff) + static_cast<int64_t>(w >> 48);
    // Mean 4 * 32767.5; variance 4 * (65536^2 - 1) / 12, sd 37837.23...
    return static_cast<float>((static_cast<double>(s) - 131070.0) * (1.0 / 37837.2277));
  }

 private:
  uint64_t state_;
};

}  // namespace k3::synth
