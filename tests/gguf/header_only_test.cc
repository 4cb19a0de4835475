// Header-only files: written by planning tools, readable with allow_header_only.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gguf/gguf_test_util.h"
#include "worker/gguf/gguf_file.h"
#include "worker/gguf/gguf_writer.h"

namespace k3::gguf {
namespace {

using ::testing::HasSubstr;
using testing::ReadAll;
using testing::TempDir;

TEST(GgufHeaderOnly, WriterWritesTheHeaderAndTheTableOnly) {
  TempDir dir;
  const std::string full = dir.File("full.gguf");
  const std::string header = dir.File("header.gguf");
  ASSERT_TRUE(testing::WriteSmallFile(full).ok());
  ASSERT_TRUE(testing::WriteSmallFile(header, {.header_only = true}).ok());

  auto f = GgufFile::Open(full);
  ASSERT_TRUE(f.ok()) << f.status();
  const std::vector<uint8_t> full_bytes = ReadAll(full);
  const std::vector<uint8_t> header_bytes = ReadAll(header);
  // The header-only file is exactly the full file up to its data section.
  const uint64_t data_start = (*f)->tensors()[0].file_offset;
  ASSERT_EQ(header_bytes.size(), data_start);
  EXPECT_TRUE(std::equal(header_bytes.begin(), header_bytes.end(), full_bytes.begin()));

  const absl::Status strict = GgufFile::Open(header).status();
  EXPECT_EQ(strict.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(strict), HasSubstr(header));
  EXPECT_THAT(testing::Msg(strict), HasSubstr("tensor \"output_norm.weight\""));  // the first one
  EXPECT_THAT(testing::Msg(strict), HasSubstr("past the end of the file"));

  auto h = GgufFile::Open(header, /*allow_header_only=*/true);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE((*h)->header_only());
  EXPECT_EQ((*h)->Keys(), (*f)->Keys());
  ASSERT_EQ((*h)->tensors().size(), (*f)->tensors().size());
  for (size_t i = 0; i < (*h)->tensors().size(); ++i) {
    const TensorInfo& a = (*h)->tensors()[i];
    const TensorInfo& b = (*f)->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.ne, b.ne);
    EXPECT_EQ(a.type, b.type);
    EXPECT_EQ(a.n_bytes, b.n_bytes);
    EXPECT_EQ(a.file_offset, b.file_offset);
    EXPECT_EQ(a.data, nullptr);
    EXPECT_NE(b.data, nullptr);
  }
  // Data calls are refused on a header-only writer.
  GgufWriter w(dir.File("h2.gguf"), {.header_only = true});
  ASSERT_TRUE(w.AddTensor("x", {4}, quant::GgmlType::kF32).ok());
  ASSERT_TRUE(w.Begin().ok());
  EXPECT_EQ(w.WriteTensorData("x", testing::Pattern(16, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(w.Finish().ok());
}

TEST(GgufHeaderOnly, CompleteFilesOpenNormallyWithTheFlag) {
  const std::vector<uint8_t> bytes = testing::SmallFileBytes();
  auto f = GgufFile::OpenFromMemory(bytes, "small", /*allow_header_only=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE((*f)->header_only());
  for (const TensorInfo& t : (*f)->tensors()) EXPECT_NE(t.data, nullptr);
}

TEST(GgufHeaderOnly, AFileCutInsideTheDataIsStillAnError) {
  const std::vector<uint8_t> bytes = testing::SmallFileBytes();
  auto f = GgufFile::OpenFromMemory(bytes, "small");
  ASSERT_TRUE(f.ok());
  const TensorInfo& last = (*f)->tensors().back();
  // Cut in the middle of the last tensor: tensors before it are there, so it is truncation.
  const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + last.file_offset + 10);
  const absl::Status s = GgufFile::OpenFromMemory(cut, "cut", /*allow_header_only=*/true).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(s), HasSubstr("cut: tensor \"blk.0.ffn_gate_exps.weight\""));
  EXPECT_THAT(testing::Msg(s), HasSubstr("truncated"));
}

}  // namespace
}  // namespace k3::gguf
