// IDX loader: the real Fashion-MNIST files (dataset-fashion-mnist), cross-checked with a gzip + numpy read
// (state_ref.py), and malformed files.
#include "engine/nn/state/idx.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "backends/register_all.h"
#include "engine/runtime/registry.h"

namespace kiln::nn {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/kiln_idx_", ::getpid(), "_", name);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

std::string Idx(std::vector<uint32_t> dims, size_t payload, uint8_t type = 0x08) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>(d >> (8 * i)));
  for (size_t i = 0; i < payload; ++i) s.push_back(static_cast<char>(i % 251));
  return s;
}

std::string RunPython(const std::string& args) {
  std::string cmd = absl::StrCat(KILN_TEST_PYTHON, " ", KILN_STATE_REF, " ", args);
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  ::pclose(p);
  return out;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice("CPU").ok()) GTEST_SKIP() << "CPU backend not available";
  }
};

TEST_F(IdxTest, FashionMnist) {
  const std::string dir = KILN_FASHION_MNIST_DIR;
  if (::access((dir + "/train-images-idx3-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (" << dir << ")";
  auto ds = LoadMnist(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->train_images.shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(ds->train_labels.shape(), (Shape{60000}));
  EXPECT_EQ(ds->test_images.shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(ds->test_labels.shape(), (Shape{10000}));
  EXPECT_EQ(ds->train_images.dtype(), dtypes::kUInt8);
  for (const Tensor* labels : {&ds->train_labels, &ds->test_labels}) {
    auto v = labels->ToVector<uint8_t>();
    ASSERT_TRUE(v.ok());
    std::vector<int> count(256, 0);
    for (uint8_t l : *v) ++count[l];
    for (int c = 0; c < 10; ++c)
      EXPECT_EQ(count[c], static_cast<int>(v->size()) / 10) << "class " << c;  // balanced
    for (int c = 10; c < 256; ++c) EXPECT_EQ(count[c], 0);
  }
  // A few images against an independent gzip + numpy read.
  const std::vector<int> idx = {0, 1, 12345, 59999};
  std::string out = RunPython(absl::StrCat("mnist ", dir, " 0 1 12345 59999"));
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1 + idx.size()) << out;
  EXPECT_EQ(lines[0], "60000 10000");
  auto images = ds->train_images.ToVector<uint8_t>();
  auto labels = ds->train_labels.ToVector<uint8_t>();
  ASSERT_TRUE(images.ok() && labels.ok());
  for (size_t k = 0; k < idx.size(); ++k) {
    int64_t sum = 0;
    for (int p = 0; p < 784; ++p) sum += (*images)[idx[k] * 784 + p];
    std::string want =
        absl::StrCat(sum, " ", static_cast<int>((*images)[idx[k] * 784 + 14 * 28 + 14]), " ",
                     static_cast<int>((*labels)[idx[k]]));
    EXPECT_EQ(want, lines[1 + k]) << "image " << idx[k];
  }
}

TEST_F(IdxTest, RawAndGzipSmallFiles) {
  const std::string raw = TempPath("imgs-idx3-ubyte"), gz = TempPath("imgs-idx3-ubyte.gz");
  WriteFile(raw, Idx({2, 3, 4}, 24));
  WriteGz(gz, Idx({2, 3, 4}, 24));
  for (const std::string& p : {raw, gz}) {
    auto t = LoadMnistImages(p);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->shape(), (Shape{2, 1, 3, 4}));
    auto v = t->ToVector<uint8_t>();
    ASSERT_TRUE(v.ok());
    for (int i = 0; i < 24; ++i) EXPECT_EQ((*v)[i], i);
  }
  const std::string lab = TempPath("labels-idx1-ubyte.gz");
  WriteGz(lab, Idx({5}, 5));
  auto l = LoadMnistLabels(lab);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->shape(), (Shape{5}));
  std::remove(raw.c_str());
  std::remove(gz.c_str());
  std::remove(lab.c_str());
}

TEST_F(IdxTest, MalformedFilesAreErrors) {
  struct Case {
    const char* name;
    std::string bytes;
    bool gz;
    const char* message;
  };
  std::string bad_magic = Idx({2, 3, 4}, 24);
  bad_magic[1] = 1;
  std::string corrupt_gz =
      std::string("\x1f\x8b\x08", 3) + std::string(1, '\0') + "garbage-garbage-garbage";
  const std::vector<Case> cases = {
      {"short", std::string(2, '\0'), false, "too short"},
      {"bad magic", bad_magic, false, "bad magic"},
      {"labels where images expected", Idx({5}, 5), false, "bad magic"},
      {"int32 type", Idx({2, 3, 4}, 96, 0x0C), false, "unsupported element type"},
      {"truncated data", Idx({2, 3, 4}, 20), false, "truncated"},
      {"overlong data", Idx({2, 3, 4}, 30), false, "need 24 data bytes"},
      {"truncated header", Idx({2, 3, 4}, 0).substr(0, 10), false, "truncated header"},
      {"truncated gzip", "", true, "truncated gzip"},
      {"corrupt gzip", corrupt_gz, false, "gzip"},
  };
  for (const Case& c : cases) {
    std::string path = TempPath(c.gz ? "bad.gz" : "bad");
    if (c.gz) {
      WriteGz(path, Idx({2, 3, 4}, 24));
      std::ifstream f(path, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      WriteFile(path, ss.str().substr(0, ss.str().size() / 2));
    } else {
      WriteFile(path, c.bytes);
    }
    auto t = LoadMnistImages(path);
    ASSERT_FALSE(t.ok()) << c.name;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(t.status().message().find(c.message), std::string::npos)
        << c.name << ": " << t.status();
    std::remove(path.c_str());
  }
  EXPECT_EQ(LoadMnistImages(TempPath("missing")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::nn
