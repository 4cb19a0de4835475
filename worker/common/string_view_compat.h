// Debian 12's Abseil (20220623) has its own absl::string_view, which std::string_view does not
// convert to: StrCat, StrSplit and hash-map lookups need these at absl call sites.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace k3 {

inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view AsStd(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace k3
