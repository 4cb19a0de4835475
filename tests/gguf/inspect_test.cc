// The inspector's report on a small file, and the k3-gguf-inspect binary's exit codes.
#include <sys/wait.h>

#include <array>
#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gguf/gguf_test_util.h"
#include "worker/gguf/gguf_file.h"
#include "worker/gguf/inspect_format.h"

namespace k3::gguf {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<GgufFile> OpenSmall(const testing::TempDir& dir, GgufWriterOptions options = {}) {
  const std::string path = dir.File("small.gguf");
  EXPECT_TRUE(testing::WriteSmallFile(path, options).ok());
  auto f = GgufFile::Open(path, /*allow_header_only=*/true);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

TEST(GgufInspect, TextReport) {
  testing::TempDir dir;
  auto f = OpenSmall(dir);
  ASSERT_NE(f, nullptr);
  const std::string text = FormatInspection(*f, {.max_array_items = 2});
  EXPECT_THAT(text, HasSubstr("small.gguf: GGUF v3, alignment 32, 5 keys, 3 tensors\n"));
  EXPECT_THAT(text,
              HasSubstr("  general.architecture                      string     \"kimi-k3\"\n"));
  EXPECT_THAT(text, HasSubstr("  kimi-k3.block_count                       u32        2\n"));
  EXPECT_THAT(text, HasSubstr("  kimi-k3.attention.head_count_kv           i32[2]     [0, 1]\n"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "tokenizer.ggml.tokens                     string[3]  [\"a\", \"b\", ... (3 items)]\n"));
  EXPECT_THAT(text, HasSubstr("token_embd.weight           Q8_0     {32, 2}                68"));
  EXPECT_THAT(text, HasSubstr("blk.0.ffn_gate_exps.weight  IQ1_S    {256, 1, 2}           100"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "  F32             1                 8                32      0.00 MiB   32.000\n"));
  EXPECT_THAT(text, HasSubstr("  total           3               584               200"));
  EXPECT_THAT(text, Not(HasSubstr("header only")));

  const std::string brief = FormatInspection(*f, {.show_tensors = false});
  EXPECT_THAT(brief, Not(HasSubstr("token_embd.weight")));
  EXPECT_THAT(brief, HasSubstr("  total           3"));
}

TEST(GgufInspect, JsonReport) {
  testing::TempDir dir;
  auto f = OpenSmall(dir);
  ASSERT_NE(f, nullptr);
  const std::string json = FormatInspection(*f, {.json = true, .max_array_items = 1});
  EXPECT_THAT(json, HasSubstr("\"version\": 3,"));
  EXPECT_THAT(
      json, HasSubstr("\"general.architecture\": {\"type\": \"string\", \"value\": \"kimi-k3\"}"));
  EXPECT_THAT(
      json,
      HasSubstr(
          "\"kimi-k3.attention.layer_norm_rms_epsilon\": {\"type\": \"f32\", \"value\": 1e-05}"));
  EXPECT_THAT(
      json,
      HasSubstr("\"tokenizer.ggml.tokens\": {\"type\": \"array\", \"element_type\": \"string\", "
                "\"count\": 3, \"value\": [\"a\"], \"truncated\": true}"));
  EXPECT_THAT(json,
              HasSubstr("{\"name\": \"token_embd.weight\", \"type\": \"Q8_0\", \"shape\": [32, 2], "
                        "\"bytes\": 68, \"shard\": 0, \"offset\": "));
  EXPECT_THAT(json, HasSubstr("\"IQ1_S\": {\"tensors\": 1, \"elements\": 512, \"bytes\": 100}"));
  EXPECT_THAT(json, HasSubstr("\"total\": {\"tensors\": 3, \"elements\": 584, \"bytes\": 200}"));
}

TEST(GgufInspect, HeaderOnlyFile) {
  testing::TempDir dir;
  auto f = OpenSmall(dir, {.header_only = true});
  ASSERT_NE(f, nullptr);
  const std::string text = FormatInspection(*f, {});
  EXPECT_THAT(text, HasSubstr("3 tensors, header only (no tensor data)"));
  EXPECT_THAT(text, HasSubstr("blk.0.ffn_gate_exps.weight"));
}

// Runs a command; returns its exit status and stdout+stderr.
std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(GgufInspect, Binary) {
  testing::TempDir dir;
  const std::string bin = K3_GGUF_INSPECT;
  ASSERT_TRUE(testing::WriteSmallFile(dir.File("ok.gguf")).ok());
  ASSERT_TRUE(testing::WriteSmallFile(dir.File("split.gguf"), {.max_shard_tensors = 1}).ok());
  ASSERT_TRUE(testing::WriteSmallFile(dir.File("plan.gguf"), {.header_only = true}).ok());
  const std::vector<uint8_t> bad = {'G', 'G', 'U', 'F', 1, 0, 0, 0};
  testing::WriteAll(dir.File("bad.gguf"), bad);

  auto [rc, out] = RunCommand(bin + " " + dir.File("ok.gguf"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("token_embd.weight"));

  std::tie(rc, out) =
      RunCommand(bin + " --json --no-tensors " + dir.File("split-00002-of-00003.gguf"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("split-00003-of-00003.gguf"));
  EXPECT_THAT(out, HasSubstr("\"split.count\": {\"type\": \"u16\", \"value\": 3}"));

  std::tie(rc, out) = RunCommand(bin + " " + dir.File("plan.gguf"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("header only"));

  std::tie(rc, out) = RunCommand(bin + " " + dir.File("bad.gguf"));
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("bad.gguf: offset 4: GGUF version 1 is not supported"));

  std::tie(rc, out) = RunCommand(bin + " " + dir.File("missing.gguf"));
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("missing.gguf"));

  std::tie(rc, out) = RunCommand(bin + " --bogus");
  EXPECT_EQ(rc, 2);
}

}  // namespace
}  // namespace k3::gguf
