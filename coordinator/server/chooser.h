// The TokenChooser of one request, built on the sampler library from the request's params.
#pragma once

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "coordinator/server/request.h"
#include "k3/v1/inference.pb.h"

namespace k3::coord {

// The most candidates one step entry may ask a worker for (k3::runtime::kMaxTopN in
// worker/runtime/step.h; tests/coordinator checks that the two agree). A chooser that needs more,
// or at least the whole vocabulary, asks for full logits instead.
inline constexpr int32_t kMaxWorkerTopN = 1024;

// InvalidArgument for parameters out of range, with a message naming the parameter. The prompt
// enters the sampler's penalty window. Without a seed in `params`, a random one is drawn (and
// reported back to the client at the end).
absl::StatusOr<std::unique_ptr<TokenChooser>> MakeChooser(const k3::v1::SamplingParams& params,
                                                          std::span<const int32_t> prompt, int64_t vocab);

}  // namespace k3::coord
