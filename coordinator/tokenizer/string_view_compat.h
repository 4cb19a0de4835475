// Debian 12's Abseil (20220623) is built with its own absl::string_view, which does not convert
// from std::string_view; these helpers bridge the two at absl call sites.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace k3::tok {

inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view AsStd(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace k3::tok
