// The sampler's random numbers: xoshiro256** (Blackman & Vigna, prng.di.unimi.it) seeded by
// expanding a 64-bit seed with splitmix64, as the authors recommend. Both are fully specified
// integer recurrences, and Uniform() takes the top 53 bits, so a seed gives the same stream on
// every platform and compiler (unlike std::uniform_real_distribution).
#pragma once

#include <cstdint>

namespace k3::sampling {

// One splitmix64 step: advances *state and returns the next output.
uint64_t SplitMix64(uint64_t* state);

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1): the top 53 bits of Next() times 2^-53.
  double Uniform();

 private:
  uint64_t s_[4];
};

}  // namespace k3::sampling
