// k3-gguf-inspect: prints a GGUF file's metadata, tensor table and per-type totals.
// Opens header-only files and shard sets (name any shard: NAME-0000i-of-0000N.gguf).

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "worker/gguf/gguf_file.h"
#include "worker/gguf/inspect_format.h"

namespace {

constexpr char kUsage[] =
    "usage: k3-gguf-inspect [--no-tensors] [--json] [--max-array N] FILE.gguf\n"
    "  --no-tensors   omit the per-tensor table (totals are still printed)\n"
    "  --json         machine-readable output\n"
    "  --max-array N  show at most N items of each array (default 8)\n";

int Usage(const char* why) {
  std::fprintf(stderr, "k3-gguf-inspect: %s\n%s", why, kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  k3::gguf::InspectOptions options;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--no-tensors") {
      options.show_tensors = false;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--max-array") {
      if (++i >= argc) return Usage("--max-array needs a number");
      char* end = nullptr;
      const unsigned long long n = std::strtoull(argv[i], &end, 10);
      if (end == argv[i] || *end != '\0') return Usage("--max-array needs a number");
      options.max_array_items = static_cast<size_t>(n);
    } else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      return Usage("unknown option");
    } else if (path.empty()) {
      path = arg;
    } else {
      return Usage("one file at a time");
    }
  }
  if (path.empty()) return Usage("no file given");

  auto file = k3::gguf::GgufFile::Open(path, /*allow_header_only=*/true);
  if (!file.ok()) {
    std::fprintf(stderr, "k3-gguf-inspect: %s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  const std::string report = k3::gguf::FormatInspection(**file, options);
  std::fwrite(report.data(), 1, report.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
