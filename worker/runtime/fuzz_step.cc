// libFuzzer target for the step wire format (worker/runtime/step.h): any byte string must decode
// to a Step or fail with a status, never crash, read out of bounds or allocate without bound. A
// step that decodes must survive a round trip: Decode(Encode(s)) == s, and Encode is a fixed
// point from then on (the first encoding may differ from the input only in unused flag bits).
//
//   CC=clang-14 CXX=clang++-14 cmake -S . -B build/fuzz -G Ninja -DK3_FUZZ=ON -DK3_BUILD_TESTS=OFF
//       -DK3_WITH_MPI=OFF -DK3_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   cmake --build build/fuzz --target fuzz_step
//   K3_FUZZ_WRITE_SEEDS=build/fuzz/seeds/step build/fuzz/bin/fuzz_step   # writes seeds, exits
//   build/fuzz/bin/fuzz_step -max_total_time=30 build/fuzz/corpus/step build/fuzz/seeds/step
// (.ci/fuzz does all of this for every fuzzer.)

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "worker/runtime/step.h"

namespace {

using k3::runtime::Step;
using k3::runtime::StepEntry;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_step invariant violated: %s\n", what);
  std::abort();
}

bool SameEntry(const StepEntry& a, const StepEntry& b) {
  return a.seq == b.seq && a.tokens == b.tokens && a.top_n == b.top_n && a.full_logits == b.full_logits &&
         a.all_positions == b.all_positions;
}

bool SameStep(const Step& a, const Step& b) {
  if (a.id != b.id || a.free != b.free || a.add != b.add || a.fork != b.fork || a.shutdown != b.shutdown ||
      a.entries.size() != b.entries.size()) {
    return false;
  }
  for (size_t i = 0; i < a.entries.size(); ++i) {
    if (!SameEntry(a.entries[i], b.entries[i])) return false;
  }
  return true;
}

std::vector<Step> SeedSteps() {
  std::vector<Step> seeds(4);
  seeds[1].id = 7;
  seeds[1].add = {1};
  seeds[1].entries = {{1, {5, 6, 7}, 1, false, false}};
  seeds[2].id = 8;
  seeds[2].free = {3, 4};
  seeds[2].add = {9};
  seeds[2].fork = {{1, 9}};
  seeds[2].entries = {{1, {8}, 40, true, false}, {9, {1, 2}, 1, false, true}};
  seeds[3].shutdown = true;
  return seeds;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // K3_FUZZ_WRITE_SEEDS=DIR: write a few valid steps into DIR and exit (the CI's seed corpus).
  if (const char* dir = std::getenv("K3_FUZZ_WRITE_SEEDS")) {
    std::filesystem::create_directories(dir);
    int i = 0;
    for (const Step& s : SeedSteps()) {
      std::ofstream(std::string(dir) + "/step-" + std::to_string(i++), std::ios::binary) << k3::runtime::EncodeStep(s);
    }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto step = k3::runtime::DecodeStep(bytes);
  if (!step.ok()) return 0;
  // What decodes keeps the limits the decoder promises.
  int64_t tokens = 0;
  for (const StepEntry& e : step->entries) {
    if (e.top_n < 1 || e.top_n > k3::runtime::kMaxTopN) Fail("top_n outside [1, kMaxTopN]");
    tokens += static_cast<int64_t>(e.tokens.size());
  }
  if (tokens > k3::runtime::kMaxStepTokens) Fail("more than kMaxStepTokens tokens");
  const std::string again = k3::runtime::EncodeStep(*step);
  if (again.size() != bytes.size()) Fail("re-encoding changed the size");
  auto back = k3::runtime::DecodeStep(again);
  if (!back.ok()) Fail("a re-encoded step does not decode");
  if (!SameStep(*step, *back)) Fail("round trip changed the step");
  if (k3::runtime::EncodeStep(*back) != again) Fail("encoding is not a fixed point");
  return 0;
}
