// Stop strings over streamed text: text is released only once it cannot be the start of a stop
// string, and a stop string that appears (even across token boundaries) ends the output before it.
#pragma once

#include <string>
#include <vector>

namespace k3::coord {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;   // safe to emit now
    bool stopped = false;
  };
  // Appends `text`; returns what can be emitted and whether a stop string was found (the stop
  // string and everything after it are dropped).
  Result Feed(const std::string& text);
  // At the end of generation: whatever was held back.
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace k3::coord
