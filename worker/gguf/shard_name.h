// Names of split models: NAME-0000i-of-0000N.gguf (1-based i, as llama.cpp's gguf-split).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace k3::gguf {

struct ShardName {
  std::string prefix;  // NAME, directory included
  int index = 0;       // 1-based
  int count = 0;
};

// Parses a path of the form NAME-%05d-of-%05d.gguf; nullopt for any other path.
std::optional<ShardName> ParseShardPath(std::string_view path);
// NAME-%05d-of-%05d.gguf for 1-based `index`.
std::string ShardPath(std::string_view prefix, int index, int count);

}  // namespace k3::gguf
