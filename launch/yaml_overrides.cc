#include "launch/yaml_overrides.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace k3::launch {

absl::StatusOr<Override> ParseOverride(std::string_view arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--set wants KEY=VALUE, got '", std::string(arg), "'"));
  }
  return Override{std::string(arg.substr(0, eq)), std::string(arg.substr(eq + 1))};
}

absl::Status ApplyOverride(YAML::Node root, const Override& o) {
  const std::vector<std::string> parts = absl::StrSplit(o.key, '.');
  YAML::Node cur;
  cur.reset(root);  // reset() rebinds; operator= would overwrite the node in the tree
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part.empty()) return absl::InvalidArgumentError(absl::StrCat("--set ", o.key, ": empty name in the key"));
    const bool last = i + 1 == parts.size();
    if (cur.IsSequence()) {
      size_t index = cur.size();  // not found
      if (size_t n; absl::SimpleAtoi(part, &n)) {
        index = n;
      } else {
        for (size_t k = 0; k < cur.size(); ++k) {
          const YAML::Node elem = cur[k];  // const: looking a key up must not add it
          if (elem.IsMap() && elem["name"] && elem["name"].IsScalar() && elem["name"].Scalar() == part) index = k;
        }
      }
      if (index >= cur.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--set ", o.key, ": no element '", part, "' in the list"));
      }
      if (last) return absl::InvalidArgumentError(absl::StrCat("--set ", o.key, ": cannot replace a whole list element"));
      YAML::Node next = cur[index];
      cur.reset(next);
    } else if (cur.IsMap() || cur.IsNull() || !cur.IsDefined()) {  // undefined: a key made on the way
      if (last) {
        cur[part] = YAML::Node(o.value);
        return absl::OkStatus();
      }
      YAML::Node next = cur[part];
      cur.reset(next);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--set ", o.key, ": '", part, "' is inside a scalar"));
    }
  }
  return absl::OkStatus();
}

}  // namespace k3::launch
