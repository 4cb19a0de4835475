#include "launch/diagnostics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace k3::launch {
namespace {

// Keys and values quoted in messages come from the file: a quoted YAML key may hold a newline
// (which would split one error into lines that name no place) or a terminal escape sequence.
// Control bytes are written as C escapes; other bytes (UTF-8) are kept.
std::string Printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      out += absl::StrFormat("\\x%02x", u);
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

void Diagnostics::Error(Loc loc, std::string_view key, std::string_view message) {
  if (errors_.size() >= kMaxErrors) {
    ++dropped_;
    return;
  }
  errors_.push_back(absl::StrCat(Where(file_, loc), Printable(key), key.empty() ? "" : ": ", Printable(message)));
}

absl::Status Diagnostics::ToStatus() const {
  if (errors_.empty()) return absl::OkStatus();
  std::string text = absl::StrJoin(errors_, "\n");
  if (dropped_ > 0) absl::StrAppend(&text, "\n", file_, ": ... and ", dropped_, " more errors");
  return absl::InvalidArgumentError(text);
}

}  // namespace k3::launch
