// Quoting of untrusted strings (keys, tokens, tensor names) for terminals and JSON.
#pragma once

#include <string>
#include <string_view>

namespace k3::gguf {

// "text" with \", \\, \n, \t and other control bytes escaped; UTF-8 passes through.
std::string QuoteForDisplay(std::string_view s);
// A JSON string literal; bytes that are not valid UTF-8 become U+FFFD.
std::string JsonQuote(std::string_view s);

}  // namespace k3::gguf
