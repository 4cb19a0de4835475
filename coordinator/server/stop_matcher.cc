#include "coordinator/server/stop_matcher.h"

#include <algorithm>

namespace k3::coord {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Result StopMatcher::Feed(const std::string& text) {
  held_ += text;
  Result r;
  // The earliest complete stop string wins.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    r.text = held_.substr(0, cut);
    r.stopped = true;
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace k3::coord
