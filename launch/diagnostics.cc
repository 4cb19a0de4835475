#include "launch/diagnostics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace k3::launch {

void Diagnostics::Error(Loc loc, std::string_view key, std::string_view message) {
  errors_.push_back(absl::StrCat(Where(file_, loc), std::string(key), key.empty() ? "" : ": ", std::string(message)));
}

absl::Status Diagnostics::ToStatus() const {
  if (errors_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
}

}  // namespace k3::launch
