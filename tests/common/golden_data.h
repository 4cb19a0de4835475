// The golden data of shared/data/golden: the four prompts, one per line as token ids.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace k3::testing {

// Empty when the file is absent (tests skip then).
inline std::vector<std::vector<int32_t>> ReadGoldenPrompts(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (ss >> id) ids.push_back(id);
    if (!ids.empty()) out.push_back(ids);
  }
  return out;
}

}  // namespace k3::testing
