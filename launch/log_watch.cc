#include "launch/log_watch.h"

#include <fstream>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace k3::launch {

bool LogWatch::Seen() {
  if (seen_) return true;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return false;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  offset_ += chunk.size();
  partial_ += chunk;
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = partial_.substr(start, nl - start);
    if (line.find(needle_) != std::string::npos) {
      line_ = line;
      seen_ = true;
      break;
    }
  }
  partial_.erase(0, start);
  return seen_;
}

std::string TailOfFile(const std::string& path, int lines) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> all = absl::StrSplit(text, '\n');
  while (!all.empty() && all.back().empty()) all.pop_back();
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + from, all.end(), "\n");
}

}  // namespace k3::launch
