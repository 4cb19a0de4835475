#include "coordinator/tokenizer/pattern_translate.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/common/status_macros.h"

namespace k3::tok {
namespace {

// Unicode White_Space (stable since Unicode 6.3), as class items.
constexpr std::string_view kWhiteSpaceItems =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

absl::Status Unsupported(std::string_view pat, size_t at, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("pre-tokenizer pattern: %s at offset %d in \"%s\"", what, at, pat));
}

// Length of the escape sequence starting at pat[i] == '\\'.
absl::StatusOr<size_t> EscapeLength(std::string_view pat, size_t i) {
  if (i + 1 >= pat.size()) return Unsupported(pat, i, "trailing backslash");
  const char c = pat[i + 1];
  if ((c == 'p' || c == 'P' || c == 'x') && i + 2 < pat.size() && pat[i + 2] == '{') {
    const size_t close = pat.find('}', i + 3);
    if (close == std::string_view::npos) return Unsupported(pat, i, "unterminated escape");
    return close - i + 1;
  }
  return 2;
}

// Translates one escape; `in_class` says whether it sits inside [...].
absl::StatusOr<std::string> TranslateEscape(std::string_view pat, size_t i, std::string_view esc,
                                            bool in_class) {
  if (esc == "\\s") {
    const std::string items(kWhiteSpaceItems);
    return in_class ? items : "[" + items + "]";
  }
  if (esc == "\\S") {
    if (in_class) return Unsupported(pat, i, "\\S inside a character class");
    return "[^" + std::string(kWhiteSpaceItems) + "]";
  }
  if (esc == "\\p{Han}") return std::string("\\p{sc:Han}");
  if (esc == "\\P{Han}") return std::string("\\P{sc:Han}");
  return std::string(esc);
}

// Translates the items of a class body pat[i, end) (no brackets); stops at ']' or "&&".
absl::StatusOr<std::string> TranslateClassItems(std::string_view pat, size_t* i) {
  std::string out;
  while (*i < pat.size()) {
    const char c = pat[*i];
    if (c == ']') return out;
    if (c == '&' && *i + 1 < pat.size() && pat[*i + 1] == '&') return out;
    if (c == '[') return Unsupported(pat, *i, "nested character class");
    if (c == '\\') {
      K3_ASSIGN_OR_RETURN(const size_t len, EscapeLength(pat, *i));
      K3_ASSIGN_OR_RETURN(std::string t, TranslateEscape(pat, *i, pat.substr(*i, len), true));
      out += t;
      *i += len;
    } else {
      out.push_back(c);
      ++*i;
    }
  }
  return Unsupported(pat, *i, "unterminated character class");
}

// Translates the class starting at pat[*i] == '[' and advances past its ']'.
absl::StatusOr<std::string> TranslateClass(std::string_view pat, size_t* i) {
  const size_t start = *i;
  ++*i;
  const bool negated = *i < pat.size() && pat[*i] == '^';
  if (negated) ++*i;
  K3_ASSIGN_OR_RETURN(std::string items, TranslateClassItems(pat, i));
  if (pat[*i] == ']') {
    ++*i;
    return absl::StrCat("[", negated ? "^" : "", items, "]");
  }
  // "&&[...]": an intersection with one nested class.
  *i += 2;
  if (negated) return Unsupported(pat, start, "intersection inside a negated class");
  if (*i >= pat.size() || pat[*i] != '[') {
    return Unsupported(pat, *i, "intersection with something other than a bracketed class");
  }
  ++*i;
  const bool rhs_negated = *i < pat.size() && pat[*i] == '^';
  if (rhs_negated) ++*i;
  K3_ASSIGN_OR_RETURN(std::string rhs, TranslateClassItems(pat, i));
  if (pat[*i] != ']') return Unsupported(pat, *i, "more than one intersection");
  ++*i;
  if (*i >= pat.size() || pat[*i] != ']') {
    return Unsupported(pat, *i, "items after an intersection");
  }
  ++*i;
  return absl::StrCat("(?:(?", rhs_negated ? "!" : "=", "[", rhs, "])[", items, "])");
}

}  // namespace

absl::StatusOr<std::string> TiktokenPatternToPcre2(std::string_view pat) {
  std::string out;
  out.reserve(pat.size() * 2);
  size_t i = 0;
  while (i < pat.size()) {
    const char c = pat[i];
    if (c == '\\') {
      K3_ASSIGN_OR_RETURN(const size_t len, EscapeLength(pat, i));
      K3_ASSIGN_OR_RETURN(std::string t, TranslateEscape(pat, i, pat.substr(i, len), false));
      out += t;
      i += len;
    } else if (c == '[') {
      K3_ASSIGN_OR_RETURN(std::string t, TranslateClass(pat, &i));
      out += t;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

}  // namespace k3::tok
