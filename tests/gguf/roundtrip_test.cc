// GgufWriter -> GgufFile round trips: every value type, several tensor types, chunked and
// callback-driven data, alignment; the writer's own checks; the typed getters' errors.
#include <cmath>
#include <filesystem>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gguf/gguf_test_util.h"
#include "worker/gguf/gguf_file.h"
#include "worker/gguf/gguf_value.h"
#include "worker/gguf/gguf_writer.h"

namespace k3::gguf {
namespace {

using quant::GgmlType;
using ::testing::HasSubstr;
using testing::Pattern;
using testing::ReadAll;
using testing::TempDir;

// Every scalar type at its extremes, strings, and arrays of every element type.
void SetAllTypes(GgufWriter& w) {
  const float nan_with_payload = std::bit_cast<float>(0x7fc01234u);
  for (absl::Status s : {
           w.SetU8("t.u8", 255),
           w.SetI8("t.i8", -128),
           w.SetU16("t.u16", 65535),
           w.SetI16("t.i16", -32768),
           w.SetU32("t.u32", 4000000000u),
           w.SetI32("t.i32", std::numeric_limits<int32_t>::min()),
           w.SetU64("t.u64", std::numeric_limits<uint64_t>::max()),
           w.SetI64("t.i64", std::numeric_limits<int64_t>::min()),
           w.SetF32("t.f32", -1.5e-7f),
           w.SetF32("t.f32nan", nan_with_payload),
           w.SetF64("t.f64", 3.141592653589793),
           w.SetBool("t.bool", true),
           w.SetBool("t.bool_false", false),
           w.SetString("t.str", std::string("h\xc3\xa9llo\0w\"orld\n", 15)),
           w.SetString("t.empty_str", ""),
           w.SetArray("a.u8", std::vector<uint8_t>{0, 1, 255}),
           w.SetArray("a.i8", std::vector<int8_t>{-1, 0, 127}),
           w.SetArray("a.u16", std::vector<uint16_t>{1, 65535}),
           w.SetArray("a.i16", std::vector<int16_t>{-2, 2}),
           w.SetArray("a.u32", std::vector<uint32_t>{0, 0, 0, 1, 0, 0, 0, 1}),
           w.SetArray("a.i32", std::vector<int32_t>{-7, 7, 1 << 30}),
           w.SetArray("a.u64", std::vector<uint64_t>{1ull << 63}),
           w.SetArray("a.i64", std::vector<int64_t>{-(1ll << 62), 5}),
           w.SetArray("a.f32", std::vector<float>{0.5f, -0.0f, 1e30f}),
           w.SetArray("a.f64", std::vector<double>{1e-300, -2.0}),
           w.SetArray("a.bool", std::vector<bool>{true, false, true}),
           w.SetArray("a.str", std::vector<std::string>{"", "<|im_end|>", "\xe4\xb8\xad"}),
           w.SetArray("a.empty", std::vector<int32_t>{}),
       }) {
    ASSERT_TRUE(s.ok()) << s;
  }
}

TEST(GgufRoundTrip, EveryValueTypeAndSeveralTensorTypes) {
  TempDir dir;
  const std::string path = dir.File("all.gguf");
  struct Decl {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
  };
  const std::vector<Decl> decls = {
      {"f32", {4, 3}, GgmlType::kF32},         {"f16", {8}, GgmlType::kF16},
      {"bf16", {2, 2, 2, 2}, GgmlType::kBF16}, {"q8_0", {64, 2}, GgmlType::kQ8_0},
      {"iq1_s", {256, 2}, GgmlType::kIQ1_S},   {"q4_k", {256}, GgmlType::kQ4_K},
      {"iq2_xs", {512}, GgmlType::kIQ2_XS},    {"empty", {0, 4}, GgmlType::kF32},
      {"q6_k", {256, 1, 3}, GgmlType::kQ6_K},
  };
  {
    GgufWriter w(path);
    SetAllTypes(w);
    for (const Decl& d : decls) ASSERT_TRUE(w.AddTensor(d.name, d.ne, d.type).ok()) << d.name;
    ASSERT_TRUE(w.Begin().ok());
    ASSERT_TRUE(testing::WritePatterns(w).ok());
    ASSERT_TRUE(w.Finish().ok());
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& f = **opened;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_FALSE(f.header_only());
  EXPECT_EQ(f.shard_paths(), std::vector<std::string>{path});

  EXPECT_EQ(*f.GetU8("t.u8"), 255);
  EXPECT_EQ(*f.GetI8("t.i8"), -128);
  EXPECT_EQ(*f.GetU16("t.u16"), 65535);
  EXPECT_EQ(*f.GetI16("t.i16"), -32768);
  EXPECT_EQ(*f.GetU32("t.u32"), 4000000000u);
  EXPECT_EQ(*f.GetI32("t.i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(*f.GetU64("t.u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f.GetI64("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f.GetF32("t.f32"), -1.5e-7f);
  EXPECT_EQ(std::bit_cast<uint32_t>(*f.GetF32("t.f32nan")), 0x7fc01234u);  // payload kept
  EXPECT_EQ(*f.GetF64("t.f64"), 3.141592653589793);
  EXPECT_TRUE(*f.GetBool("t.bool"));
  EXPECT_FALSE(*f.GetBool("t.bool_false"));
  EXPECT_EQ(*f.GetString("t.str"), std::string("h\xc3\xa9llo\0w\"orld\n", 15));
  EXPECT_EQ(*f.GetString("t.empty_str"), "");
  EXPECT_EQ(*f.GetArrayU32("a.u32"), (std::vector<uint32_t>{0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(*f.GetArrayI32("a.i32"), (std::vector<int32_t>{-7, 7, 1 << 30}));
  EXPECT_EQ(*f.GetArrayF32("a.f32"), (std::vector<float>{0.5f, -0.0f, 1e30f}));
  EXPECT_EQ(*f.GetArrayString("a.str"),
            (std::vector<std::string>{"", "<|im_end|>", "\xe4\xb8\xad"}));
  EXPECT_EQ(*f.ArrayLength("a.empty"), 0u);
  EXPECT_EQ(*f.ArrayLength("a.bool"), 3u);
  EXPECT_EQ(f.TypeOf("a.bool"), ValueType::kArray);
  EXPECT_EQ(f.ArrayTypeOf("a.bool"), ValueType::kBool);
  EXPECT_EQ(f.ArrayTypeOf("t.u8"), std::nullopt);
  EXPECT_EQ(f.TypeOf("t.f64"), ValueType::kF64);
  EXPECT_EQ(f.TypeOf("nope"), std::nullopt);
  EXPECT_FALSE(f.Has("nope"));

  // The raw values match what was set, byte for byte, and keys keep their order.
  const Value* u64s = f.FindValue("a.u64");
  ASSERT_NE(u64s, nullptr);
  EXPECT_EQ(*u64s, MakeArray(std::vector<uint64_t>{1ull << 63}));
  EXPECT_EQ(*f.FindValue("a.i16"), MakeArray(std::vector<int16_t>{-2, 2}));
  EXPECT_EQ(*f.FindValue("a.i8"), MakeArray(std::vector<int8_t>{-1, 0, 127}));
  EXPECT_EQ(*f.FindValue("a.f64"), MakeArray(std::vector<double>{1e-300, -2.0}));
  EXPECT_EQ(*f.FindValue("a.bool"), MakeArray(std::vector<bool>{true, false, true}));
  EXPECT_EQ(f.Keys().front(), "t.u8");
  EXPECT_EQ(f.Keys().back(), "a.empty");
  EXPECT_EQ(f.Keys().size(), 28u);

  ASSERT_EQ(f.tensors().size(), decls.size());
  const std::vector<uint8_t> file = ReadAll(path);
  for (size_t i = 0; i < decls.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, decls[i].name);
    EXPECT_EQ(t.ne, decls[i].ne);
    EXPECT_EQ(t.type, decls[i].type);
    EXPECT_EQ(f.FindTensor(t.name), &t);
    EXPECT_EQ(t.shard, 0);
    EXPECT_EQ(t.file_offset % 32, 0u);
    uint64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    EXPECT_EQ(t.n_elems, n);
    EXPECT_EQ(t.n_bytes, *quant::BytesFor(t.type, n));
    ASSERT_NE(t.data, nullptr);
    EXPECT_TRUE(std::equal(t.data, t.data + t.n_bytes, Pattern(t.n_bytes, i).begin()));
    EXPECT_TRUE(std::equal(t.data, t.data + t.n_bytes, file.begin() + t.file_offset));
  }
  EXPECT_EQ(f.FindTensor("iq1_s")->n_bytes, 100u);  // 2 blocks of 50
  EXPECT_EQ(f.FindTensor("q8_0")->n_bytes, 4 * 34u);
  EXPECT_EQ(f.FindTensor("missing"), nullptr);
  // Like ggml, the last tensor is padded too.
  EXPECT_EQ(file.size() % 32, 0u);
}

TEST(GgufRoundTrip, ChunkedAndCallbackWritesGiveTheSameFile) {
  TempDir dir;
  const auto declare = [](GgufWriter& w) {
    ASSERT_TRUE(w.SetU32("general.alignment", 64).ok());
    ASSERT_TRUE(w.AddTensor("a", {32, 3}, GgmlType::kQ8_0).ok());
    ASSERT_TRUE(w.AddTensor("zero", {0}, GgmlType::kF16).ok());
    ASSERT_TRUE(w.AddTensor("b", {5}, GgmlType::kF32).ok());
    ASSERT_TRUE(w.Begin().ok());
  };
  {
    GgufWriter w(dir.File("one.gguf"));
    declare(w);
    ASSERT_TRUE(testing::WritePatterns(w).ok());
    ASSERT_TRUE(w.Finish().ok());
  }
  {
    GgufWriter w(dir.File("chunks.gguf"));
    declare(w);
    for (size_t i = 0; i < w.tensors().size(); ++i) {
      const PlannedTensor& t = w.tensors()[i];
      const std::vector<uint8_t> data = Pattern(t.n_bytes, i);
      for (size_t at = 0; at < data.size(); at += 7) {
        const size_t n = std::min<size_t>(7, data.size() - at);
        ASSERT_TRUE(w.WriteTensorData(t.name, std::span(data).subspan(at, n)).ok());
      }
      ASSERT_TRUE(w.WriteTensorData(t.name, {}).ok());  // empty chunks are harmless
    }
    ASSERT_TRUE(w.Finish().ok());
  }
  {
    GgufWriter w(dir.File("callback.gguf"));
    declare(w);
    int index = 0;
    std::vector<std::string> seen;
    const absl::Status s =
        w.WriteTensors([&](const PlannedTensor& t, const GgufWriter::ChunkSink& sink) {
          seen.push_back(t.name);
          const std::vector<uint8_t> data = Pattern(t.n_bytes, index++);
          for (size_t at = 0; at < data.size(); at += 5) {
            const size_t n = std::min<size_t>(5, data.size() - at);
            if (absl::Status st = sink(std::span(data).subspan(at, n)); !st.ok()) return st;
          }
          return absl::OkStatus();
        });
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(seen, (std::vector<std::string>{"a", "zero", "b"}));
    ASSERT_TRUE(w.Finish().ok());
  }
  const std::vector<uint8_t> one = ReadAll(dir.File("one.gguf"));
  EXPECT_EQ(one, ReadAll(dir.File("chunks.gguf")));
  EXPECT_EQ(one, ReadAll(dir.File("callback.gguf")));

  auto f = GgufFile::Open(dir.File("chunks.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  for (const TensorInfo& t : (*f)->tensors()) EXPECT_EQ(t.file_offset % 64, 0u) << t.name;
  EXPECT_EQ((*f)->FindTensor("zero")->n_bytes, 0u);
}

TEST(GgufRoundTrip, SettingAKeyAgainReplacesItInPlace) {
  TempDir dir;
  const std::string path = dir.File("replace.gguf");
  GgufWriter w(path);
  ASSERT_TRUE(w.SetU32("a", 1).ok());
  ASSERT_TRUE(w.SetU32("b", 2).ok());
  ASSERT_TRUE(w.SetString("a", "now a string").ok());
  ASSERT_TRUE(w.Finish().ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->Keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(*(*f)->GetString("a"), "now a string");
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufRoundTrip, CopyingMetadataFromAFileKeepsEveryValue) {
  TempDir dir;
  {
    GgufWriter w(dir.File("src.gguf"));
    SetAllTypes(w);
    ASSERT_TRUE(w.Finish().ok());
  }
  auto src = GgufFile::Open(dir.File("src.gguf"));
  ASSERT_TRUE(src.ok());
  {
    GgufWriter w(dir.File("copy.gguf"));
    for (const std::string& k : (*src)->Keys()) ASSERT_TRUE(w.Set(k, *(*src)->FindValue(k)).ok());
    ASSERT_TRUE(w.Finish().ok());
  }
  EXPECT_EQ(ReadAll(dir.File("src.gguf")), ReadAll(dir.File("copy.gguf")));
}

TEST(GgufGetters, WrongTypeAndMissingKeysNameTheKey) {
  TempDir dir;
  const std::string path = dir.File("small.gguf");
  ASSERT_TRUE(testing::WriteSmallFile(path).ok());
  auto opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& f = **opened;

  const absl::Status wrong = f.GetI32("kimi-k3.block_count").status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(wrong), HasSubstr("kimi-k3.block_count"));
  EXPECT_THAT(testing::Msg(wrong), HasSubstr("has type u32, wanted i32"));
  EXPECT_THAT(testing::Msg(wrong), HasSubstr(path));

  const absl::Status missing = f.GetU32("kimi-k3.nope").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(testing::Msg(missing), HasSubstr("kimi-k3.nope"));

  const absl::Status arr = f.GetArrayU32("kimi-k3.attention.head_count_kv").status();
  EXPECT_EQ(arr.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(arr), HasSubstr("kimi-k3.attention.head_count_kv"));
  EXPECT_THAT(testing::Msg(arr), HasSubstr("array of i32 (2 items), wanted array of u32"));

  const absl::Status scalar_as_array = f.GetArrayString("general.architecture").status();
  EXPECT_EQ(scalar_as_array.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(testing::Msg(scalar_as_array), HasSubstr("has type string, wanted array of string"));

  const absl::Status array_as_scalar = f.GetString("tokenizer.ggml.tokens").status();
  EXPECT_THAT(testing::Msg(array_as_scalar), HasSubstr("array of string (3 items), wanted string"));

  EXPECT_EQ(f.GetF32("kimi-k3.block_count").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetBool("general.architecture").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.ArrayLength("kimi-k3.block_count").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.ArrayLength("nope").status().code(), absl::StatusCode::kNotFound);

  EXPECT_EQ(f.ValueToString("general.architecture"), "\"kimi-k3\"");
  EXPECT_EQ(f.ValueToString("tokenizer.ggml.tokens", 2), "[\"a\", \"b\", ... (3 items)]");
  EXPECT_EQ(f.ValueToString("tokenizer.ggml.tokens", 0), "[... (3 items)]");
  EXPECT_EQ(f.ValueToString("kimi-k3.attention.layer_norm_rms_epsilon"), "1e-05");
  EXPECT_EQ(f.ValueToString("nope"), "<missing>");
  EXPECT_EQ(ValueTypeName(ValueType::kString), "string");
}

TEST(GgufWriter, RefusesWhatReadersCouldNotLoad) {
  TempDir dir;
  GgufWriter w(dir.File("x.gguf"));
  EXPECT_EQ(w.AddTensor("q", {16, 2}, GgmlType::kQ8_0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("d", {1, 1, 1, 1, 1}, GgmlType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("n", {-1}, GgmlType::kF32).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("o", {1ll << 40, 1ll << 40}, GgmlType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("t", {4}, static_cast<GgmlType>(4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor(std::string(64, 'x'), {4}, GgmlType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("", {4}, GgmlType::kF32).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.AddTensor("ok", {4}, GgmlType::kF32).ok());
  EXPECT_EQ(w.AddTensor("ok", {4}, GgmlType::kF32).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(w.SetU64("general.alignment", 32).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.SetU32("general.alignment", 48).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.SetU32("", 1).code(), absl::StatusCode::kInvalidArgument);
  Value nested;
  nested.type = nested.elem_type = ValueType::kArray;
  nested.count = 0;
  EXPECT_EQ(w.Set("nested", nested).code(), absl::StatusCode::kInvalidArgument);
  Value malformed = MakeScalar<uint32_t>(1);
  malformed.raw.pop_back();
  EXPECT_EQ(w.Set("malformed", malformed).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GgufWriter, ChecksOrderAndByteCounts) {
  TempDir dir;
  const std::string path = dir.File("x.gguf");
  {
    GgufWriter w(path);
    ASSERT_TRUE(w.AddTensor("a", {4}, GgmlType::kF32).ok());
    ASSERT_TRUE(w.AddTensor("b", {2}, GgmlType::kF32).ok());
    EXPECT_EQ(w.WriteTensorData("a", Pattern(4, 0)).code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(w.Begin().ok());
    EXPECT_EQ(w.Begin().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(w.AddTensor("c", {2}, GgmlType::kF32).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(w.SetU32("k", 1).code(), absl::StatusCode::kFailedPrecondition);

    const absl::Status order = w.WriteTensorData("b", Pattern(8, 1));
    EXPECT_EQ(order.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(testing::Msg(order), HasSubstr("declaration order"));
    EXPECT_EQ(w.WriteTensorData("zz", Pattern(8, 1)).code(), absl::StatusCode::kNotFound);

    const absl::Status too_many = w.WriteTensorData("a", Pattern(17, 0));
    EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(testing::Msg(too_many), HasSubstr("\"a\" is 16 bytes"));

    ASSERT_TRUE(w.WriteTensorData("a", Pattern(10, 0)).ok());
    const absl::Status early = w.Finish();
    EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(testing::Msg(early), HasSubstr("\"a\" got 10 of its 16 bytes"));
    ASSERT_TRUE(w.WriteTensorData("a", Pattern(6, 0)).ok());
    EXPECT_EQ(w.WriteTensorData("a", Pattern(1, 0)).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(std::filesystem::exists(path));
    // Dropped unfinished: the partial file goes away.
  }
  EXPECT_FALSE(std::filesystem::exists(path));

  GgufWriter w(path);
  ASSERT_TRUE(w.AddTensor("a", {4}, GgmlType::kF32).ok());
  const absl::Status short_source = w.WriteTensors(
      [](const PlannedTensor&, const GgufWriter::ChunkSink& sink) { return sink(Pattern(3, 0)); });
  EXPECT_EQ(short_source.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(testing::Msg(short_source), HasSubstr("3 of its 16 bytes"));
}

TEST(GgufWriter, ReportsAnUnwritablePath) {
  GgufWriter w("/nonexistent-dir/x.gguf");
  const absl::Status s = w.Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(testing::Msg(s), HasSubstr("/nonexistent-dir/x.gguf"));
}

TEST(GgufFileOpen, ReportsMissingFiles) {
  const absl::Status s = GgufFile::Open("/nonexistent/model.gguf").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(testing::Msg(s), HasSubstr("/nonexistent/model.gguf"));
}

}  // namespace
}  // namespace k3::gguf
