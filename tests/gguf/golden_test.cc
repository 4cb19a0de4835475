// The shared golden model opens and reads as documented in shared/data/golden/README.md.
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gguf/gguf_test_util.h"
#include "worker/gguf/gguf_file.h"

namespace k3::gguf {
namespace {

using ::testing::HasSubstr;

TEST(GgufGolden, OpensTheGoldenModel) {
  const std::string path = std::string(K3_SHARED_DIR) + "/data/golden/k3-golden-a.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no golden file at " << path;
  auto opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& f = **opened;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_FALSE(f.header_only());
  EXPECT_EQ(f.tensors().size(), 218u);
  EXPECT_EQ(f.Keys().size(), 33u);
  EXPECT_EQ(*f.GetString("general.architecture"), "kimi-k3");
  EXPECT_EQ(*f.GetU32("kimi-k3.block_count"), 8u);

  // The file stores head_count_kv as an array of i32 (GGUF type 5), not u32.
  const std::string kv_heads = "kimi-k3.attention.head_count_kv";
  EXPECT_EQ(f.TypeOf(kv_heads), ValueType::kArray);
  EXPECT_EQ(f.ArrayTypeOf(kv_heads), ValueType::kI32);
  EXPECT_EQ(*f.GetArrayI32(kv_heads), (std::vector<int32_t>{0, 0, 0, 1, 0, 0, 0, 1}));
  const absl::Status as_u32 = f.GetArrayU32(kv_heads).status();
  EXPECT_EQ(as_u32.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(as_u32), HasSubstr(kv_heads));

  const TensorInfo* gate = f.FindTensor("blk.1.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->type, quant::GgmlType::kIQ1_S);
  EXPECT_EQ(gate->ne, (std::vector<int64_t>{256, 256, 32}));
  EXPECT_EQ(gate->n_elems, 256u * 256 * 32);
  EXPECT_EQ(gate->n_bytes, 256u * 32 * 50);
  EXPECT_NE(gate->data, nullptr);

  const uint64_t size = std::filesystem::file_size(path);
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.file_offset % 32, 0u) << t.name;
    EXPECT_LE(t.file_offset + t.n_bytes, size) << t.name;
    EXPECT_EQ(t.shard, 0);
  }
}

}  // namespace
}  // namespace k3::gguf
