// libFuzzer target: any byte string must open cleanly or fail with a status, never crash,
// hang or read out of bounds. Opened with and without allow_header_only, and everything
// the file claims is read back through the public API.
//
//   CC=clang-14 CXX=clang++-14 cmake -S . -B build/gguf-fuzz -G Ninja -DK3_FUZZ=ON
//       -DK3_BUILD_TESTS=OFF -DK3_WITH_GRPC=OFF -DK3_WITH_MPI=OFF -DK3_WITH_CUDA=OFF
//   cmake --build build/gguf-fuzz --target fuzz_gguf
//   build/gguf/tests/gguf/k3-gguf-fuzz-seeds build/gguf-fuzz/seeds   # from a test build
//   build/gguf-fuzz/worker/gguf/fuzz_gguf -max_total_time=60 -max_len=4096
//       build/gguf-fuzz/corpus build/gguf-fuzz/seeds

#include <cstddef>
#include <cstdint>
#include <span>

#include "worker/gguf/gguf_file.h"
#include "worker/gguf/gguf_value.h"
#include "worker/gguf/inspect_format.h"

namespace {

void Exercise(const k3::gguf::GgufFile& f) {
  for (const std::string& key : f.Keys()) {
    (void)f.ValueToString(key, 4);
    (void)f.GetU32(key);
    (void)f.GetString(key);
    (void)f.GetArrayString(key);
    (void)f.GetArrayF32(key);
    (void)f.ArrayLength(key);
  }
  uint64_t sum = 0;
  for (const k3::gguf::TensorInfo& t : f.tensors()) {
    if (f.FindTensor(t.name) != &t) __builtin_trap();
    // Touch the first and last byte the file claims for each tensor.
    if (t.data != nullptr && t.n_bytes > 0) sum += t.data[0] + t.data[t.n_bytes - 1];
  }
  k3::gguf::InspectOptions options;
  options.json = (sum & 1) != 0;
  (void)k3::gguf::FormatInspection(f, options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  for (bool header_only : {false, true}) {
    auto f = k3::gguf::GgufFile::OpenFromMemory(bytes, "fuzz.gguf", header_only);
    if (f.ok()) Exercise(**f);
  }
  return 0;
}
