// Truncated, corrupted and hostile files: each gives an InvalidArgument naming the file and
// what is wrong, never a crash or a huge allocation.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gguf/gguf_test_util.h"
#include "worker/gguf/gguf_file.h"

namespace k3::gguf {
namespace {

using ::testing::HasSubstr;
using testing::RawGguf;
using ::testing::StartsWith;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// The error of opening `bytes` as "bad.gguf"; fails the test if it opens.
absl::Status OpenError(const RawGguf& raw, bool allow_header_only = false) {
  auto f = GgufFile::OpenFromMemory(raw.bytes, "bad.gguf", allow_header_only);
  EXPECT_FALSE(f.ok()) << "opened a bad file";
  if (f.ok()) return absl::OkStatus();
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_THAT(testing::Msg(f.status()), StartsWith("bad.gguf: "));
  return f.status();
}

#define EXPECT_ERROR(raw, text) EXPECT_THAT(testing::Msg(OpenError(raw)), HasSubstr(text))

// One F32 {8} tensor "t" (32 bytes) at `offset`, after one u32 key.
RawGguf OneTensor(const std::vector<int64_t>& ne = {8}, uint32_t type = kF32, uint64_t offset = 0) {
  RawGguf r;
  r.Header(1, 1).KvU32("k", 1).Tensor("t", ne, type, offset).PadTo(32).Zeros(32);
  return r;
}

TEST(GgufCorrupt, TheBaseFileIsValid) {
  auto f = GgufFile::OpenFromMemory(OneTensor().bytes, "ok.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors()[0].n_bytes, 32u);
}

TEST(GgufCorrupt, MagicAndVersion) {
  RawGguf magic;
  magic.U32(0x4C4D4747).U32(3).U64(0).U64(0);  // "GGML"
  EXPECT_ERROR(magic, "not a GGUF file: magic is 'GGML'");
  RawGguf v1;
  v1.Header(0, 0, 1);
  EXPECT_ERROR(v1, "GGUF version 1 is not supported");
  RawGguf v4;
  v4.Header(0, 0, 4);
  EXPECT_ERROR(v4, "GGUF version 4 is not supported");
  RawGguf big_endian;
  big_endian.Header(0, 0, 0x03000000);
  EXPECT_ERROR(big_endian, "big-endian");
  RawGguf v2;
  v2.Header(0, 0, 2);
  auto f = GgufFile::OpenFromMemory(v2.bytes, "v2.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 2u);
}

TEST(GgufCorrupt, HugeCountsFailBeforeAllocating) {
  RawGguf kv;
  kv.Header(0, uint64_t{1} << 63);
  EXPECT_ERROR(kv, "offset 16: metadata has 9223372036854775808 elements");
  RawGguf kv_small;  // under ggml's cap, but the file cannot hold them
  kv_small.Header(0, 1000).KvU32("k", 1);
  EXPECT_ERROR(kv_small, "metadata has 1000 elements of at least 14 bytes each, but only 17 bytes");
  RawGguf tensors;
  tensors.Header(uint64_t{1} << 62, 0);
  EXPECT_ERROR(tensors, "tensor table has 4611686018427387904 elements");
  RawGguf tensors_small;
  tensors_small.Header(3, 0).Tensor("t", {8}, kF32, 0);
  EXPECT_ERROR(tensors_small, "tensor table has 3 elements of at least 33 bytes");
}

TEST(GgufCorrupt, HugeStrings) {
  RawGguf key;
  key.Header(0, 1).U64(~uint64_t{0}).Zeros(16);
  EXPECT_ERROR(key, "key of metadata entry 0 has length 18446744073709551615");
  RawGguf key_short;
  key_short.Header(0, 1).U64(100).Zeros(20);
  EXPECT_ERROR(key_short, "has length 100 but only 20 bytes are left");
  RawGguf value;
  value.Header(0, 1).Str("k").U32(8).U64(uint64_t{1} << 40);
  EXPECT_ERROR(value,
               "metadata entry 0 (key \"k\"): offset 37: string value has length 1099511627776");
  RawGguf name;
  name.Header(1, 0).U64(uint64_t{1} << 35).Zeros(40);
  EXPECT_ERROR(name, "name of tensor 0 has length 34359738368");
}

TEST(GgufCorrupt, HugeArrays) {
  RawGguf u32s;
  u32s.Header(0, 1).Str("arr").U32(9).U32(4).U64(uint64_t{1} << 40);
  EXPECT_ERROR(u32s,
               "key \"arr\"): offset 39: array of u32 has 1099511627776 elements, over the limit");
  RawGguf strings;
  strings.Header(0, 1).Str("arr").U32(9).U32(8).U64(1000).Str("x");
  EXPECT_ERROR(strings,
               "array of string has 1000 elements of at least 8 bytes each, but only 9 bytes");
  RawGguf nested;
  nested.Header(0, 1).Str("arr").U32(9).U32(9).U64(uint64_t{1} << 29).Zeros(64);
  EXPECT_ERROR(nested, "array of array has 536870912 elements of at least 12 bytes");
}

TEST(GgufCorrupt, UnknownValueTypes) {
  RawGguf scalar;
  scalar.Header(0, 1).Str("kk").U32(13).U32(0);
  EXPECT_ERROR(scalar, "metadata entry 0 (key \"kk\"): offset 34: unknown value type 13");
  RawGguf elem;
  elem.Header(0, 1).Str("kk").U32(9).U32(77).U64(0);
  EXPECT_ERROR(elem, "unknown array element type 77");
}

TEST(GgufCorrupt, ArraysOfArraysAreSkippedSafely) {
  RawGguf r;
  r.Header(0, 2).Str("nested").U32(9).U32(9).U64(3);
  r.U32(4).U64(2).U32(7).U32(8);           // [7, 8]
  r.U32(8).U64(2).Str("x").Str("yz");      // ["x", "yz"]
  r.U32(9).U64(1).U32(0).U64(3).Zeros(3);  // [[0, 0, 0]]
  r.KvU32("after", 5);
  auto f = GgufFile::OpenFromMemory(r.bytes, "nested.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->TypeOf("nested"), ValueType::kArray);
  EXPECT_EQ((*f)->ArrayTypeOf("nested"), ValueType::kArray);
  EXPECT_EQ(*(*f)->ArrayLength("nested"), 3u);
  EXPECT_EQ(*(*f)->GetU32("after"), 5u);  // parsing resumed at the right place
  EXPECT_THAT((*f)->ValueToString("nested"), HasSubstr("3 nested arrays"));
  EXPECT_EQ((*f)->GetArrayU32("nested").status().code(), absl::StatusCode::kInvalidArgument);

  RawGguf deep;
  deep.Header(0, 1).Str("deep").U32(9);
  for (int i = 0; i < 12; ++i) deep.U32(9).U64(1);
  deep.U32(4).U64(0);
  EXPECT_ERROR(deep, "arrays nested deeper than 8 levels");

  RawGguf bad_inner;
  bad_inner.Header(0, 1).Str("n").U32(9).U32(9).U64(1).U32(8).U64(1).U64(uint64_t{1} << 40);
  EXPECT_ERROR(bad_inner, "nested string");
}

TEST(GgufCorrupt, KeysMustBeUniqueAndNonEmpty) {
  RawGguf dup;
  dup.Header(0, 2).KvU32("same", 1).KvU32("same", 2);
  EXPECT_ERROR(dup, "duplicate key \"same\" (metadata entries 0 and 1)");
  RawGguf empty;
  empty.Header(0, 1).KvU32("", 1);
  EXPECT_ERROR(empty, "metadata entry 0 has an empty key");
}

TEST(GgufCorrupt, Alignment) {
  RawGguf not_pow2;
  not_pow2.Header(0, 1).KvU32("general.alignment", 48);
  EXPECT_ERROR(not_pow2, "key \"general.alignment\" is 48, not a power of two");
  RawGguf zero;
  zero.Header(0, 1).KvU32("general.alignment", 0);
  EXPECT_ERROR(zero, "not a power of two");
  RawGguf wrong_type;
  wrong_type.Header(0, 1).Str("general.alignment").U32(10).U64(32);
  EXPECT_ERROR(wrong_type, "key \"general.alignment\" has type u64, wanted u32");
  // A valid non-default alignment moves the data section.
  RawGguf a64;
  a64.Header(1, 1).KvU32("general.alignment", 64).Tensor("t", {8}, kF32, 0).PadTo(64).Zeros(32);
  auto f = GgufFile::OpenFromMemory(a64.bytes, "a64.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->tensors()[0].file_offset % 64, 0u);
}

TEST(GgufCorrupt, TensorTypes) {
  EXPECT_ERROR(OneTensor({8}, 99), "tensor \"t\" has unknown ggml type id 99");
  EXPECT_ERROR(OneTensor({8}, 4), "tensor \"t\" has unknown ggml type id 4");  // Q4_2, removed
  EXPECT_ERROR(OneTensor({16}, kQ8_0),
               "tensor \"t\" of type Q8_0 has ne[0] = 16, not a multiple of the block size 32");
}

TEST(GgufCorrupt, Shapes) {
  EXPECT_ERROR(OneTensor({int64_t{1} << 32, int64_t{1} << 32}),
               "tensor \"t\" shape {4294967296, 4294967296} overflows the element count");
  EXPECT_ERROR(OneTensor({INT64_MAX, 2}), "overflows the element count");
  EXPECT_ERROR(OneTensor({int64_t{1} << 62}),
               "tensor \"t\" shape {4611686018427387904} of type F32 "
               "overflows the byte count");
  EXPECT_ERROR(OneTensor({-8}), "tensor \"t\" has ne[0] = -8 < 0");
  EXPECT_ERROR(OneTensor({1, 1, 1, 1, 8}), "tensor \"t\" has 5 dimensions (must be 1 to 4)");
  EXPECT_ERROR(OneTensor({}), "tensor \"t\" has 0 dimensions");
}

TEST(GgufCorrupt, Offsets) {
  EXPECT_ERROR(OneTensor({8}, kF32, 16),
               "tensor \"t\" has data offset 16, not a multiple of the alignment 32");
  EXPECT_ERROR(OneTensor({8}, kF32, 1 << 20),
               "tensor \"t\" data [1048672, 1048704) lies past the end");
  EXPECT_ERROR(OneTensor({8}, kF32, ~uint64_t{31}),
               "tensor \"t\": data offset 18446744073709551584 + "
               "size 32 overflows");
  RawGguf overlap;
  overlap.Header(2, 0).Tensor("a", {16}, kF32, 0).Tensor("b", {8}, kF32, 32).PadTo(32).Zeros(64);
  EXPECT_ERROR(overlap, "tensors \"a\" [96, 160) and \"b\" [128, 160) overlap");
}

TEST(GgufCorrupt, DuplicateTensorNames) {
  RawGguf r;
  r.Header(2, 0).Tensor("t", {8}, kF32, 0).Tensor("t", {8}, kF32, 32).PadTo(32).Zeros(64);
  EXPECT_ERROR(r, "duplicate tensor name \"t\" (tensors 0 and 1)");
  RawGguf empty;
  empty.Header(1, 0).Tensor("", {8}, kF32, 0).PadTo(32).Zeros(32);
  EXPECT_ERROR(empty, "tensor 0 has an empty name");
}

TEST(GgufCorrupt, SplitKeys) {
  RawGguf count;
  count.Header(0, 1).Str("split.count").U32(2).Put<uint16_t>(2);
  EXPECT_ERROR(count, "split.count is 2, but 1 shard file(s) were opened");
  RawGguf no_type;
  no_type.Header(0, 1).KvU32("split.no", 0);
  EXPECT_ERROR(no_type, "key \"split.no\" has type u32, wanted u16");
  RawGguf total;
  total.Header(0, 1).Str("split.tensors.count").U32(5).Put<int32_t>(3);
  EXPECT_ERROR(total, "split.tensors.count is 3, but the 1 shard(s) hold 0 tensors");
}

// Every prefix of a valid file: an error naming the file (or, with allow_header_only, a
// header-only file when the cut falls between the tensor table and the data). Only the
// padding after the last tensor may be missing: its data is all there.
TEST(GgufCorrupt, TruncationAtEveryByte) {
  const std::vector<uint8_t> bytes = testing::SmallFileBytes();
  auto full = GgufFile::OpenFromMemory(bytes, "full");
  ASSERT_TRUE(full.ok()) << full.status();
  const uint64_t data_start = (*full)->tensors()[0].file_offset;
  const TensorInfo& last = (*full)->tensors().back();
  const uint64_t data_end = last.file_offset + last.n_bytes;
  ASSERT_LT(data_end, bytes.size());
  int header_only_opens = 0;
  for (size_t len = 0; len < bytes.size(); ++len) {
    const std::span<const uint8_t> prefix(bytes.data(), len);
    auto strict = GgufFile::OpenFromMemory(prefix, "trunc.gguf");
    if (len >= data_end) {
      EXPECT_TRUE(strict.ok()) << strict.status();
      continue;
    }
    ASSERT_FALSE(strict.ok()) << "opened at length " << len;
    EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(testing::Msg(strict.status()), StartsWith("trunc.gguf: "));
    auto lenient = GgufFile::OpenFromMemory(prefix, "trunc.gguf", /*allow_header_only=*/true);
    if (lenient.ok()) {
      ++header_only_opens;
      EXPECT_TRUE((*lenient)->header_only());
      EXPECT_LE(len, data_start);
    } else {
      EXPECT_THAT(testing::Msg(lenient.status()), StartsWith("trunc.gguf: "));
    }
  }
  EXPECT_GE(header_only_opens, 1);
  EXPECT_TRUE(GgufFile::OpenFromMemory(std::span(bytes.data(), data_start), "h", true).ok());
}

// The same through real files (the mmap path), every 13th length, including empty.
TEST(GgufCorrupt, TruncatedFilesOnDisk) {
  const std::vector<uint8_t> bytes = testing::SmallFileBytes();
  auto full = GgufFile::OpenFromMemory(bytes, "full");
  ASSERT_TRUE(full.ok()) << full.status();
  const TensorInfo& last = (*full)->tensors().back();
  testing::TempDir dir;
  const std::string path = dir.File("trunc.gguf");
  for (size_t len = 0; len < last.file_offset + last.n_bytes; len += 13) {
    testing::WriteAll(path, std::span(bytes.data(), len));
    const absl::Status s = GgufFile::Open(path).status();
    ASSERT_FALSE(s.ok()) << len;
    EXPECT_THAT(testing::Msg(s), StartsWith(path + ": "));
  }
}

// Every byte set to a few hostile values: whatever comes out, it is not a crash.
TEST(GgufCorrupt, SingleByteMutations) {
  const std::vector<uint8_t> bytes = testing::SmallFileBytes();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x7f}, uint8_t{0xff}}) {
      std::vector<uint8_t> m = bytes;
      m[i] = v;
      for (bool header_only : {false, true}) {
        auto f = GgufFile::OpenFromMemory(m, "m.gguf", header_only);
        if (!f.ok()) {
          EXPECT_THAT(testing::Msg(f.status()), StartsWith("m.gguf: "));
          continue;
        }
        for (const std::string& k : (*f)->Keys()) (void)(*f)->ValueToString(k);
        for (const TensorInfo& t : (*f)->tensors()) {
          if (t.data != nullptr && t.n_bytes > 0) {
            volatile uint8_t last = t.data[t.n_bytes - 1];
            (void)last;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace k3::gguf
