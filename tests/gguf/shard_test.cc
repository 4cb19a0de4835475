// Multi-shard output and input: NAME-0000i-of-0000N.gguf, split.* keys as gguf-split
// writes them, each shard's own tensor table, and the checks on a broken shard set.
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gguf/gguf_test_util.h"
#include "worker/gguf/gguf_file.h"
#include "worker/gguf/gguf_parser.h"
#include "worker/gguf/gguf_value.h"
#include "worker/gguf/gguf_writer.h"
#include "worker/gguf/shard_name.h"

namespace k3::gguf {
namespace {

using quant::GgmlType;
using ::testing::HasSubstr;
using testing::Pattern;
using testing::TempDir;

// Five F32 tensors of 64, 128, 32, 256 and 64 bytes.
absl::Status WriteFive(const std::string& path, GgufWriterOptions options,
                       std::vector<std::string>* shard_paths = nullptr) {
  GgufWriter w(path, options);
  for (absl::Status s :
       {w.SetString("general.architecture", "kimi-k3"), w.SetU32("k3.x", 7),
        w.AddTensor("t0", {16}, GgmlType::kF32), w.AddTensor("t1", {32}, GgmlType::kF32),
        w.AddTensor("t2", {8}, GgmlType::kF32), w.AddTensor("t3", {64}, GgmlType::kF32),
        w.AddTensor("t4", {16}, GgmlType::kF32), w.Begin()}) {
    if (!s.ok()) return s;
  }
  if (shard_paths != nullptr) *shard_paths = w.shard_paths();
  if (!options.header_only) {
    if (absl::Status s = testing::WritePatterns(w); !s.ok()) return s;
  }
  return w.Finish();
}

void ExpectFiveTensors(const GgufFile& f, const std::vector<int>& shards) {
  ASSERT_EQ(f.tensors().size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, "t" + std::to_string(i));
    EXPECT_EQ(t.shard, shards[i]) << t.name;
    if (!f.header_only()) {
      ASSERT_NE(t.data, nullptr);
      EXPECT_TRUE(std::equal(t.data, t.data + t.n_bytes, Pattern(t.n_bytes, i).begin())) << t.name;
    }
  }
}

TEST(ShardName, ParsesAndFormats) {
  const auto s = ParseShardPath("/m/Kimi-K3-UD-IQ1_S-00002-of-00031.gguf");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->prefix, "/m/Kimi-K3-UD-IQ1_S");
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->count, 31);
  EXPECT_EQ(ShardPath(s->prefix, 3, 31), "/m/Kimi-K3-UD-IQ1_S-00003-of-00031.gguf");
  EXPECT_FALSE(ParseShardPath("model.gguf").has_value());
  EXPECT_FALSE(ParseShardPath("model-1-of-2.gguf").has_value());
  EXPECT_FALSE(ParseShardPath("model-00001-of-00002.bin").has_value());
  EXPECT_FALSE(ParseShardPath("model00001-of-00002.gguf").has_value());
}

TEST(GgufShards, SplitByTensorCount) {
  TempDir dir;
  std::vector<std::string> paths;
  ASSERT_TRUE(WriteFive(dir.File("m.gguf"), {.max_shard_tensors = 2}, &paths).ok());
  ASSERT_EQ(paths, (std::vector<std::string>{dir.File("m-00001-of-00003.gguf"),
                                             dir.File("m-00002-of-00003.gguf"),
                                             dir.File("m-00003-of-00003.gguf")}));
  EXPECT_FALSE(std::filesystem::exists(dir.File("m.gguf")));
  for (const std::string& p : paths) ASSERT_TRUE(std::filesystem::exists(p)) << p;

  // Any shard's name opens the whole set, with shard 1's metadata.
  for (const std::string& name : paths) {
    auto f = GgufFile::Open(name);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->shard_paths(), paths);
    EXPECT_EQ(*(*f)->GetString("general.architecture"), "kimi-k3");
    EXPECT_EQ(*(*f)->GetU16("split.no"), 0);
    EXPECT_EQ(*(*f)->GetU16("split.count"), 3);
    EXPECT_EQ(*(*f)->GetI32("split.tensors.count"), 5);
    // gguf-split puts the split keys after the model's own.
    EXPECT_EQ((*f)->Keys(), (std::vector<std::string>{"general.architecture", "k3.x", "split.no",
                                                      "split.count", "split.tensors.count"}));
    ExpectFiveTensors(**f, {0, 0, 1, 1, 2});
  }
  // Each later shard is a GGUF file of its own with just the split keys and its tensors...
  const std::vector<uint8_t> third = testing::ReadAll(paths[2]);
  auto parsed = internal::ParseGguf(third, "third", /*allow_header_only=*/false);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::vector<std::string> keys;
  for (const internal::KeyValue& kv : parsed->kvs) keys.push_back(kv.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"split.no", "split.count", "split.tensors.count"}));
  EXPECT_EQ(parsed->kvs[0].value, MakeScalar<uint16_t>(2));
  ASSERT_EQ(parsed->tensors.size(), 1u);
  EXPECT_EQ(parsed->tensors[0].name, "t4");
  // ...which alone is not a whole model.
  const absl::Status alone = GgufFile::OpenFromMemory(third, "third").status();
  EXPECT_THAT(testing::Msg(alone),
              HasSubstr("third: split.no is 2, but this file is shard 1 of 1"));
}

TEST(GgufShards, SplitByBytes) {
  TempDir dir;
  std::vector<std::string> paths;
  // 64 + 128 | 32 | 256 (over the limit: a shard of its own) | 64
  ASSERT_TRUE(WriteFive(dir.File("m"), {.max_shard_bytes = 200}, &paths).ok());
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[0], dir.File("m-00001-of-00004.gguf"));
  auto f = GgufFile::Open(paths[1]);
  ASSERT_TRUE(f.ok()) << f.status();
  ExpectFiveTensors(**f, {0, 0, 1, 2, 3});
}

TEST(GgufShards, OneShardIsAPlainFile) {
  TempDir dir;
  std::vector<std::string> paths;
  ASSERT_TRUE(WriteFive(dir.File("m.gguf"), {.max_shard_bytes = 1 << 20}, &paths).ok());
  ASSERT_EQ(paths, std::vector<std::string>{dir.File("m.gguf")});
  auto f = GgufFile::Open(paths[0]);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE((*f)->Has("split.count"));
  ExpectFiveTensors(**f, {0, 0, 0, 0, 0});
}

TEST(GgufShards, HeaderOnlyShards) {
  TempDir dir;
  std::vector<std::string> paths;
  ASSERT_TRUE(
      WriteFive(dir.File("m.gguf"), {.max_shard_tensors = 3, .header_only = true}, &paths).ok());
  ASSERT_EQ(paths.size(), 2u);
  const absl::Status strict = GgufFile::Open(paths[0]).status();
  EXPECT_THAT(testing::Msg(strict), HasSubstr("\"t0\""));
  auto f = GgufFile::Open(paths[0], /*allow_header_only=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->header_only());
  ExpectFiveTensors(**f, {0, 0, 0, 1, 1});
  for (const TensorInfo& t : (*f)->tensors()) EXPECT_EQ(t.data, nullptr);
}

TEST(GgufShards, MissingShardIsNamed) {
  TempDir dir;
  std::vector<std::string> paths;
  ASSERT_TRUE(WriteFive(dir.File("m.gguf"), {.max_shard_tensors = 2}, &paths).ok());
  std::filesystem::remove(paths[1]);
  const absl::Status s = GgufFile::Open(paths[0]).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(testing::Msg(s), HasSubstr(paths[1]));
}

TEST(GgufShards, ShardsInTheWrongPlaceAreRefused) {
  TempDir dir;
  std::vector<std::string> paths;
  ASSERT_TRUE(WriteFive(dir.File("m.gguf"), {.max_shard_tensors = 2}, &paths).ok());
  std::filesystem::rename(paths[1], dir.File("tmp"));
  std::filesystem::rename(paths[2], paths[1]);
  std::filesystem::rename(dir.File("tmp"), paths[2]);
  const absl::Status s = GgufFile::Open(paths[0]).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(s), HasSubstr("split.no is 2, but this file is shard 2 of 3"));
}

TEST(GgufShards, AShardOpenedAloneIsRefused) {
  TempDir dir;
  std::vector<std::string> paths;
  ASSERT_TRUE(WriteFive(dir.File("m.gguf"), {.max_shard_tensors = 2}, &paths).ok());
  std::filesystem::copy_file(paths[0], dir.File("renamed.gguf"));
  const absl::Status s = GgufFile::Open(dir.File("renamed.gguf")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(s), HasSubstr("split.count is 3, but 1 shard file(s) were opened"));
}

TEST(GgufShards, ShardNumbersOutOfRangeAreRefused) {
  EXPECT_FALSE(GgufFile::Open("/tmp/m-00004-of-00003.gguf").ok());
  EXPECT_FALSE(GgufFile::Open("/tmp/m-00000-of-00003.gguf").ok());
}

TEST(GgufShards, DuplicateTensorsAcrossShardsAreRefused) {
  TempDir dir;
  // Two shards that each hold a tensor called "x".
  for (int i = 1; i <= 2; ++i) {
    GgufWriter w(ShardPath(dir.File("d"), i, 2));
    ASSERT_TRUE(w.AddTensor("x", {8}, GgmlType::kF32).ok());
    ASSERT_TRUE(w.Begin().ok());
    ASSERT_TRUE(testing::WritePatterns(w).ok());
    ASSERT_TRUE(w.Finish().ok());
  }
  const absl::Status s = GgufFile::Open(ShardPath(dir.File("d"), 1, 2)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(s), HasSubstr("tensor \"x\" appears in shard 1"));
}

}  // namespace
}  // namespace k3::gguf
