// k3-gguf-fuzz-seeds DIR: writes a few small GGUF files (each under 2 KB) covering every
// value type, several tensor types, a custom alignment, a header-only file, split shards
// and nested arrays, as a seed corpus for fuzz_gguf.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "worker/common/status_macros.h"
#include "worker/gguf/gguf_writer.h"

namespace {

using k3::gguf::GgufWriter;
using k3::gguf::GgufWriterOptions;
using k3::quant::GgmlType;

absl::Status FirstError(std::initializer_list<absl::Status> all) {
  for (const absl::Status& s : all) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Fill(GgufWriter& w) {
  for (const k3::gguf::PlannedTensor& t : w.tensors()) {
    std::vector<uint8_t> data(t.n_bytes);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 + 11);
    K3_RETURN_IF_ERROR(w.WriteTensorData(t.name, data));
  }
  return absl::OkStatus();
}

absl::Status AllTypes(const std::string& path, GgufWriterOptions options, uint32_t alignment) {
  GgufWriter w(path, options);
  K3_RETURN_IF_ERROR(FirstError({
      w.SetString("general.architecture", "kimi-k3"),
      w.SetU32("general.alignment", alignment),
      w.SetU8("a.u8", 1),
      w.SetI8("a.i8", -1),
      w.SetU16("a.u16", 2),
      w.SetI16("a.i16", -2),
      w.SetU32("a.u32", 3),
      w.SetI32("a.i32", -3),
      w.SetU64("a.u64", 4),
      w.SetI64("a.i64", -4),
      w.SetF32("a.f32", 0.5f),
      w.SetF64("a.f64", 0.25),
      w.SetBool("a.bool", true),
      w.SetArray("b.u32", std::vector<uint32_t>{0, 0, 0, 1}),
      w.SetArray("b.f32", std::vector<float>{1.0f, -1.0f}),
      w.SetArray("b.bool", std::vector<bool>{true, false}),
      w.SetArray("b.str", std::vector<std::string>{"<s>", "</s>", ""}),
      w.AddTensor("f32", {4}, GgmlType::kF32),
      w.AddTensor("q8_0", {32}, GgmlType::kQ8_0),
      w.AddTensor("iq1_s", {256}, GgmlType::kIQ1_S),
      w.AddTensor("bf16", {2, 2}, GgmlType::kBF16),
      w.AddTensor("empty", {0}, GgmlType::kF16),
  }));
  K3_RETURN_IF_ERROR(w.Begin());
  if (!options.header_only) K3_RETURN_IF_ERROR(Fill(w));
  return w.Finish();
}

// Nested arrays (which the reader skips) and a key after them, written byte by byte.
absl::Status Nested(const std::string& path) {
  std::vector<uint8_t> b;
  const auto put = [&b](auto v) {
    const size_t at = b.size();
    b.resize(at + sizeof(v));
    std::memcpy(b.data() + at, &v, sizeof(v));
  };
  const auto str = [&](std::string_view s) {
    put(uint64_t{s.size()});
    b.insert(b.end(), s.begin(), s.end());
  };
  put(uint32_t{0x46554747});
  put(uint32_t{3});
  put(uint64_t{0});  // tensors
  put(uint64_t{2});  // keys
  str("nested");
  put(uint32_t{9});  // array
  put(uint32_t{9});  // of arrays
  put(uint64_t{2});
  put(uint32_t{4});  // [7, 8] as u32
  put(uint64_t{2});
  put(uint32_t{7});
  put(uint32_t{8});
  put(uint32_t{8});  // ["x"]
  put(uint64_t{1});
  str("x");
  str("after");
  put(uint32_t{4});
  put(uint32_t{5});
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return out ? absl::OkStatus() : absl::InternalError("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: k3-gguf-fuzz-seeds DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  for (const absl::Status& s : {
           AllTypes((dir / "all-types.gguf").string(), {}, 32),
           AllTypes((dir / "align64.gguf").string(), {}, 64),
           AllTypes((dir / "header-only.gguf").string(), {.header_only = true}, 32),
           AllTypes((dir / "split.gguf").string(), {.max_shard_tensors = 3}, 32),
           Nested((dir / "nested.gguf").string()),
       }) {
    if (!s.ok()) {
      std::fprintf(stderr, "k3-gguf-fuzz-seeds: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}
