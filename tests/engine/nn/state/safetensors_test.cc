// safetensors: round trips of every dtype, determinism and alignment, interop with an independent numpy
// reader/writer (state_ref.py), and malformed files -> error Status.
#include "engine/nn/state/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"

namespace kiln::nn {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/kiln_st_", ::getpid(), "_", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Bytes(const Tensor& t) {
  std::string out(static_cast<size_t>(t.numel() * t.dtype().ItemSize()), '\0');
  absl::Status st = t.CopyToHost(out.data(), out.size());
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// A safetensors file from a header string and a data section.
std::string File(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

int RunPython(const std::string& args) {
  std::string cmd = absl::StrCat(KILN_TEST_PYTHON, " ", KILN_STATE_REF, " ", args);
  return std::system(cmd.c_str());
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice("CPU").ok()) GTEST_SKIP() << "CPU backend not available";
  }
};

TEST_F(SafetensorsTest, RoundTripEveryDType) {
  const DType all[] = {dtypes::kBool,  dtypes::kUInt8,   dtypes::kInt8,     dtypes::kUInt16,
                       dtypes::kInt16, dtypes::kFloat16, dtypes::kBFloat16, dtypes::kUInt32,
                       dtypes::kInt32, dtypes::kFloat32, dtypes::kFloat64,  dtypes::kUInt64,
                       dtypes::kInt64};
  std::mt19937 rng(7);
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> bytes;
  for (DType d : all) {
    const std::vector<int64_t> shape = {3, 5};
    std::string raw(15 * d.ItemSize(), '\0');
    for (char& c : raw) c = static_cast<char>(rng());
    if (d == dtypes::kBool)
      for (char& c : raw) c = static_cast<char>(c & 1);
    std::string name = absl::StrCat("t_", d.Name());
    tensors.emplace(name, Tensor::FromHost(raw.data(), d, shape));
    bytes[name] = raw;
  }
  float s = 3.5f;
  tensors.emplace("scalar", Tensor::FromHost(&s, dtypes::kFloat32, {}));
  tensors.emplace("empty", Tensor::Zeros({0, 4}));
  tensors.emplace(
      "lazy", Tensor::Arange(0, 6, 1, dtypes::kInt32).Reshape({2, 3}) * 2);  // realized by SafeSave
  const std::string path = TempPath("roundtrip.safetensors");
  ASSERT_TRUE(SafeSave(tensors, path, {{"k", "v\"quoted\""}}).ok());
  std::map<std::string, std::string> meta;
  auto loaded = SafeLoad(path, &meta);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->size(), tensors.size());
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"k", "v\"quoted\""}}));
  for (const auto& [name, raw] : bytes) {
    const Tensor& t = loaded->at(name);
    EXPECT_EQ(t.dtype(), tensors.at(name).dtype()) << name;
    EXPECT_EQ(t.shape(), (Shape{3, 5})) << name;
    EXPECT_EQ(Bytes(t), raw) << name;
  }
  EXPECT_EQ(loaded->at("scalar").shape(), Shape{});
  EXPECT_EQ(*loaded->at("scalar").Item<float>(), 3.5f);
  EXPECT_EQ(loaded->at("empty").shape(), (Shape{0, 4}));
  EXPECT_EQ(*loaded->at("lazy").ToVector<int32_t>(), (std::vector<int32_t>{0, 2, 4, 6, 8, 10}));
  std::remove(path.c_str());
}

TEST_F(SafetensorsTest, SaveIsDeterministicAndAligned) {
  std::map<std::string, Tensor> t = {
      {"z8", Tensor::FromVector(std::vector<uint8_t>{1, 2, 3}, {3})},
      {"a64", Tensor::FromVector(std::vector<double>{1, 2}, {2})},
      {"m32", Tensor::FromVector(std::vector<float>{1, 2, 3}, {3})},
  };
  const std::string p1 = TempPath("det1.safetensors"), p2 = TempPath("det2.safetensors");
  ASSERT_TRUE(SafeSave(t, p1).ok());
  ASSERT_TRUE(SafeSave(t, p2).ok());
  const std::string f1 = ReadFile(p1);
  EXPECT_EQ(f1, ReadFile(p2));
  auto h = ParseSafetensors(f1);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->data_offset % 8, 0u);
  ASSERT_EQ(h->entries.size(), 3u);
  EXPECT_EQ(h->entries[0].name, "a64");  // item size 8 first
  EXPECT_EQ(h->entries[1].name, "m32");
  EXPECT_EQ(h->entries[2].name, "z8");
  uint64_t end = 0;
  for (const SafetensorsEntry& e : h->entries) {
    EXPECT_EQ(e.begin, end);  // packed
    EXPECT_EQ(e.begin % e.dtype.ItemSize(), 0u);
    end = e.end;
  }
  EXPECT_EQ(h->data_offset + end, f1.size());
  std::remove(p1.c_str());
  std::remove(p2.c_str());
}

TEST_F(SafetensorsTest, LoadsFileWrittenByNumpy) {
  const std::string path = TempPath("numpy.safetensors");
  ASSERT_EQ(RunPython("write " + path), 0);
  std::map<std::string, std::string> meta;
  auto t = SafeLoad(path, &meta);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(t->size(), 9u);
  EXPECT_EQ(t->at("a.weight").shape(), (Shape{3, 4}));
  auto a = t->at("a.weight").ToVector<float>();
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ((*a)[i], i * 0.5f);
  EXPECT_EQ(*t->at("b").ToVector<int64_t>(), (std::vector<int64_t>{-3, -2, -1, 0, 1, 2, 3}));
  auto c = t->at("c_half").Cast(dtypes::kFloat32).ToVector<float>();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, (std::vector<float>{1.5f, -2.0f, 65504.0f}));
  EXPECT_EQ(*t->at("d").ToVector<uint8_t>(), (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(t->at("d").shape(), (Shape{2, 5}));
  EXPECT_EQ(*t->at("e").ToVector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(*t->at("f64").ToVector<double>(), (std::vector<double>{1e-300, -2.5}));
  EXPECT_EQ(*t->at("i16").ToVector<int16_t>(), (std::vector<int16_t>{-32768, 32767}));
  EXPECT_EQ(*t->at("scalar").Item<float>(), 7.25f);
  EXPECT_EQ(t->at("scalar").shape(), Shape{});
  EXPECT_EQ(t->at("empty").shape(), (Shape{0, 3}));

  // ... and kiln writes what numpy reads back (state_ref.py check verifies every tensor and the packing).
  const std::string back = TempPath("kiln.safetensors");
  ASSERT_TRUE(SafeSave(*t, back, meta).ok());
  EXPECT_EQ(RunPython("check " + back), 0);
  std::remove(path.c_str());
  std::remove(back.c_str());
}

struct BadCase {
  const char* name;
  std::string file;
  const char* message;  // key words of the error
};

TEST_F(SafetensorsTest, MalformedFilesAreErrors) {
  const std::string ok_entry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::string huge(8, '\0');
  huge[5] = 1;  // N = 2^40
  std::vector<BadCase> cases = {
      {"empty", "", "too short"},
      {"short", std::string(5, '\0'), "too short"},
      {"huge header", huge + "{}", "exceeds the limit"},
      {"truncated header", File("{" + ok_entry + "}", std::string(8, '\0')).substr(0, 20),
       "truncated"},
      {"bad json", File("{\"x\":{\"dtype\":", ""), "bad header"},
      {"trailing garbage", File("{} x", ""), "bad header"},
      {"not an object", File("[1,2]", ""), "not a JSON object"},
      {"deep nesting", File(std::string(100, '[') + std::string(100, ']'), ""), "nesting too deep"},
      {"duplicate key", File("{" + ok_entry + "," + ok_entry + "}", std::string(8, '\0')),
       "duplicate key"},
      {"unknown dtype",
       File(R"({"x":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", std::string(16, '\0')),
       "unknown dtype"},
      {"dtype not string",
       File(R"({"x":{"dtype":3,"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       "dtype is not a string"},
      {"negative dim",
       File(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       "non-negative integer"},
      {"float dim",
       File(R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", std::string(4, '\0')),
       "non-negative integer"},
      {"offsets out of range", File("{" + ok_entry + "}", std::string(4, '\0')), "out of range"},
      {"offsets reversed",
       File(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, '\0')),
       "out of range"},
      {"size mismatch",
       File(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "shape and dtype need"},
      {"overflowing shape",
       File(
           R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
           std::string(8, '\0')),
       "overflows"},
      // Found by fuzz_safetensors' oracle: a zero dim used to hide the overflow of the others.
      {"zero dim hides an overflowing shape",
       File(R"({"x":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", ""),
       "overflows"},
      {"overlap",
       File(
           R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           std::string(12, '\0')),
       "overlap"},
      {"missing key", File(R"({"x":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')),
       "exactly the keys"},
      {"extra key", File(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"z":1}})", ""),
       "exactly the keys"},
      {"bad metadata", File(R"({"__metadata__":{"a":1}})", ""), "not a string"},
      {"bad escape", File(R"({"x\q":1})", ""), "bad header"},
  };
  for (const BadCase& c : cases) {
    auto h = ParseSafetensors(c.file);
    ASSERT_FALSE(h.ok()) << c.name;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(h.status().message().find(c.message), std::string::npos)
        << c.name << ": " << h.status();
    // Through the file path too (mmap).
    const std::string path = TempPath("bad.safetensors");
    WriteFile(path, c.file);
    auto t = SafeLoad(path);
    EXPECT_FALSE(t.ok()) << c.name;
    std::remove(path.c_str());
  }
  auto missing = SafeLoad(TempPath("does_not_exist.safetensors"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, ValidEdgeCases) {
  // Empty header object, zero-size tensors at any offset, metadata only, a gap between tensors, escapes in names.
  auto h = ParseSafetensors(File("{}", ""));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->entries.empty());
  h = ParseSafetensors(File(R"({"a\u00e9\n":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},)"
                            R"("b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}})",
                            std::string(4, '\0')));
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->entries.size(), 2u);
  EXPECT_EQ(h->entries[0].name, "a\xc3\xa9\n");
}

// A header of many keys (the limit allows 100 MiB of them) parses in time linear in its size; the
// duplicate-key check used to compare every key with every earlier one (found while writing
// fuzz_safetensors: 20,000 keys took 41 s in the fuzz build).
TEST_F(SafetensorsTest, ManyKeysParseAndADuplicateIsStillFound) {
  std::string meta;
  for (int i = 0; i < 200000; ++i) absl::StrAppend(&meta, i == 0 ? "" : ",", "\"k", i, "\":\"\"");
  auto h = ParseSafetensors(File("{\"__metadata__\":{" + meta + "}}", ""));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->metadata.size(), 200000u);
  EXPECT_EQ(h->metadata["k199999"], "");
  h = ParseSafetensors(File("{\"__metadata__\":{" + meta + ",\"k123456\":\"x\"}}", ""));
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("duplicate key \"k123456\""), std::string::npos) << h.status();
}

TEST_F(SafetensorsTest, SaveRejectsBadNames) {
  EXPECT_FALSE(SafeSave({{"", Tensor::Zeros({1})}}, TempPath("x")).ok());
  EXPECT_FALSE(SafeSave({{"__metadata__", Tensor::Zeros({1})}}, TempPath("x")).ok());
}

}  // namespace
}  // namespace kiln::nn
