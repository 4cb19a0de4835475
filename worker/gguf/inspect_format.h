// The report k3-gguf-inspect prints: metadata, tensor table, per-type totals (text or JSON).
#pragma once

#include <cstddef>
#include <string>

#include "worker/gguf/gguf_file.h"

namespace k3::gguf {

struct InspectOptions {
  bool show_tensors = true;  // the per-tensor table (totals are always shown)
  bool json = false;
  size_t max_array_items = 8;  // arrays are abbreviated after this many items
};

std::string FormatInspection(const GgufFile& file, const InspectOptions& options);

}  // namespace k3::gguf
