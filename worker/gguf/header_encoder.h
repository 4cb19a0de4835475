// Serializes a GGUF header: magic, version, counts, metadata, tensor table, padding.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/gguf/gguf_parser.h"
#include "worker/gguf/gguf_writer.h"

namespace k3::gguf::internal {

// The header of one file holding `tensors` (their offsets already planned), padded to
// `alignment` so the data section follows. Values must be writable (no arrays of arrays).
std::vector<uint8_t> EncodeHeader(std::span<const KeyValue> kvs,
                                  std::span<const PlannedTensor* const> tensors,
                                  uint32_t alignment);

}  // namespace k3::gguf::internal
