// Metadata keys of split models, as llama.cpp's gguf-split writes them: every shard has
// split.no (u16, 0-based), split.count (u16) and split.tensors.count (i32, all shards' total).
#pragma once

#include <string_view>

namespace k3::gguf {

inline constexpr std::string_view kSplitNoKey = "split.no";
inline constexpr std::string_view kSplitCountKey = "split.count";
inline constexpr std::string_view kSplitTensorsCountKey = "split.tensors.count";

}  // namespace k3::gguf
