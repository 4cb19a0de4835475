#include "coordinator/tokenizer/kimi_chunker.h"

#include "coordinator/tokenizer/utf8.h"

namespace k3::tok {
namespace {

// One 400k-character slice, cut further by run length (Llama 3's
// _split_whitespaces_or_nonwhitespaces). Note the cut restarts the count but not the slice
// start on a class change: a chunk may hold many runs, each at most `max_run` long.
void SplitRuns(std::string_view s, size_t max_run, absl::FunctionRef<void(std::string_view)> emit) {
  size_t run_len = 0;
  bool run_is_space = false;
  size_t slice_start = 0;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const Utf8Step step = DecodeUtf8Step(s.substr(i));
    const bool is_space = IsPythonSpace(step.cp);
    if (first) {
      run_is_space = is_space;
      first = false;
    }
    if (run_is_space != is_space) {
      run_len = 1;
      run_is_space = is_space;
    } else if (++run_len > max_run) {
      emit(s.substr(slice_start, i - slice_start));
      slice_start = i;
      run_len = 1;
    }
    i += step.len;
  }
  emit(s.substr(slice_start));
}

}  // namespace

bool IsPythonSpace(char32_t cp) {
  // Bidi class WS, B or S, or category Zs.
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

void ForEachKimiChunk(std::string_view text, absl::FunctionRef<void(std::string_view)> emit,
                      size_t max_encode_chars, size_t max_run_chars) {
  if (text.empty()) {
    emit(text);
    return;
  }
  size_t start = 0;
  size_t chars = 0;
  for (size_t i = 0; i < text.size();) {
    if (chars == max_encode_chars) {
      SplitRuns(text.substr(start, i - start), max_run_chars, emit);
      start = i;
      chars = 0;
    }
    i += DecodeUtf8Step(text.substr(i)).len;
    ++chars;
  }
  SplitRuns(text.substr(start), max_run_chars, emit);
}

}  // namespace k3::tok
