// GPT-2's byte <-> unicode map, the form GGUF ("gpt2" model) stores token bytes in: printable
// Latin-1 bytes stand for themselves, the other 68 bytes become U+0100.. in byte order.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace k3::tok {

// Token bytes -> the GGUF token string (always valid UTF-8).
std::string BytesToGgufToken(std::string_view bytes);

// GGUF token string -> token bytes; an error names the first character outside the map.
absl::StatusOr<std::string> GgufTokenToBytes(std::string_view token);

}  // namespace k3::tok
