// The TokenChooser of one request, built on the sampler library from the request's params.
#pragma once

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "coordinator/server/request.h"
#include "k3/v1/inference.pb.h"

namespace k3::coord {

// InvalidArgument for parameters out of range, with a message naming the parameter. The prompt
// enters the sampler's penalty window. Without a seed in `params`, a random one is drawn (and
// reported back to the client at the end).
absl::StatusOr<std::unique_ptr<TokenChooser>> MakeChooser(const k3::v1::SamplingParams& params,
                                                          std::span<const int32_t> prompt, int64_t vocab);

}  // namespace k3::coord
