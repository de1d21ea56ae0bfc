// engine/nn/models: MnistCnn and Mlp load a state dict written by tinygrad (safe_save(get_state_dict(model)) of the
// same Python classes, models_ref.py) and reproduce tinygrad's eval-mode logits; SaveModel writes the names, shapes
// and values tinygrad wrote; LoadStateDict rejects missing names, wrong shapes and (strict) extra names.
#include "engine/nn/models.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/register_all.h"
#include "engine/nn/state/safetensors.h"
#include "gtest/gtest.h"

namespace kiln::nn {
namespace {

class ModelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backends::RegisterAllBackends();
    ref_ok_ = Exists(Path("cnn_io.safetensors")) && Exists(Path("mlp_io.safetensors"));
    if (!ref_ok_) {  // not run under ctest's fixture: write the reference files now
      std::string cmd =
          absl::StrCat(KILN_TEST_PYTHON, " ", KILN_MODELS_REF, " write ", KILN_MODELS_REF_DIR);
      ref_ok_ = std::system(cmd.c_str()) == 0;
    }
  }
  void SetUp() override { ASSERT_TRUE(ref_ok_) << "models_ref.py (tinygrad) failed"; }
  static bool Exists(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f != nullptr) std::fclose(f);
    return f != nullptr;
  }
  static std::string Path(const std::string& name) {
    return absl::StrCat(KILN_MODELS_REF_DIR, "/", name);
  }

  static bool ref_ok_;
};
bool ModelsTest::ref_ok_ = false;

std::vector<float> Values(const Tensor& t) {
  absl::StatusOr<std::vector<float>> v = t.ToVector<float>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>{};
}

void ExpectClose(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<float> g = Values(got), w = Values(want);
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], w[i], 1e-4 + 1e-4 * std::abs(w[i])) << "at " << i;
}

TEST_F(ModelsTest, MnistCnnStateNames) {
  MnistCnn m;
  std::vector<std::string> names;
  for (const NamedTensor& nt : StateDict(m)) names.push_back(nt.name);
  std::vector<std::string> want = {
      "layers.0.weight",  "layers.0.bias",  "layers.2.weight",        "layers.2.bias",
      "layers.4.weight",  "layers.4.bias",  "layers.4.running_mean",  "layers.4.running_var",
      "layers.6.weight",  "layers.6.bias",  "layers.8.weight",        "layers.8.bias",
      "layers.10.weight", "layers.10.bias", "layers.10.running_mean", "layers.10.running_var",
      "layers.13.weight", "layers.13.bias"};
  EXPECT_EQ(names, want);
  int64_t trainable = 0;
  for (Tensor* t : TrainableParameters(m)) trainable += t->numel();
  EXPECT_EQ(trainable, 87850);  // reference/tinygrad.md §11
}

TEST_F(ModelsTest, MnistCnnMatchesTinygradEvalLogits) {
  MnistCnn m;
  // tinygrad's state dict also has BatchNorm's num_batches_tracked, which kiln does not keep: load non-strict
  ASSERT_TRUE(LoadModel(m, Path("cnn.safetensors"), /*strict=*/false).ok());
  EXPECT_FALSE(LoadModel(m, Path("cnn.safetensors"), /*strict=*/true).ok());
  auto io = SafeLoad(Path("cnn_io.safetensors"));
  ASSERT_TRUE(io.ok()) << io.status();
  TrainingScope eval(false);
  ExpectClose(m(io->at("x")), io->at("y"));
}

TEST_F(ModelsTest, MlpMatchesTinygrad) {
  Mlp m({12, 16, 8, 3});
  ASSERT_EQ(StateDict(m).size(), 6u);
  EXPECT_EQ(StateDict(m)[2].name, "layers.2.weight");
  absl::Status st = LoadModel(m, Path("mlp.safetensors"));
  ASSERT_TRUE(st.ok()) << st;
  auto io = SafeLoad(Path("mlp_io.safetensors"));
  ASSERT_TRUE(io.ok()) << io.status();
  ExpectClose(m(io->at("x")), io->at("y"));
}

TEST_F(ModelsTest, SaveWritesTinygradNamesAndValues) {
  MnistCnn m;
  ASSERT_TRUE(LoadModel(m, Path("cnn.safetensors"), /*strict=*/false).ok());
  std::string out = absl::StrCat(Path("kiln_cnn_"), ::getpid(), ".safetensors");
  absl::Status st = SaveModel(m, out, {{"producer", "kiln"}});
  ASSERT_TRUE(st.ok()) << st;
  std::string cmd = absl::StrCat(KILN_TEST_PYTHON, " ", KILN_MODELS_REF, " names ",
                                 KILN_MODELS_REF_DIR, " ", out);
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  // and back into a differently initialized model: same logits
  Tensor::ManualSeed(99);
  MnistCnn m2;
  st = LoadModel(m2, out);
  ASSERT_TRUE(st.ok()) << st;
  TrainingScope eval(false);
  Tensor x = Tensor::Rand({2, 1, 28, 28});
  ASSERT_TRUE(x.Realize().ok());
  ExpectClose(m2(x), m(x));
  std::remove(out.c_str());
}

TEST_F(ModelsTest, LoadIntoRealizedTargetWritesInPlace) {
  Mlp m({12, 16, 8, 3});
  ASSERT_TRUE(RealizeState(m).ok());
  Tensor& w = *StateDict(m)[0].tensor;
  const UOpPtr before = w.uop();  // the realized buffer's view (interned: same buffer, same node)
  ASSERT_TRUE(LoadModel(m, Path("mlp.safetensors")).ok());
  auto ref = SafeLoad(Path("mlp.safetensors"));
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(Values(w), Values(ref->at("layers.0.weight")));
  EXPECT_EQ(w.uop(),
            before);  // written in place: a JIT capture holding this buffer sees the new weights
}

TEST_F(ModelsTest, LoadStateDictErrors) {
  Mlp m({12, 16, 8, 3});
  auto state = SafeLoad(Path("mlp.safetensors"));
  ASSERT_TRUE(state.ok());
  std::vector<float> before = Values(*StateDict(m)[0].tensor);

  std::map<std::string, Tensor> missing = *state;
  missing.erase("layers.4.bias");
  absl::Status st = LoadStateDict(m, missing);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lacks layers.4.bias"), std::string::npos) << st;

  std::map<std::string, Tensor> wrong = *state;
  wrong.at("layers.2.weight") = Tensor::Zeros({8, 15});
  st = LoadStateDict(m, wrong);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layers.2.weight: shape (8, 15)"), std::string::npos) << st;

  std::map<std::string, Tensor> extra = *state;
  extra.emplace("layers.9.weight", Tensor::Zeros({1}));
  st = LoadStateDict(m, extra);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layers.9.weight"), std::string::npos) << st;
  EXPECT_TRUE(LoadStateDict(m, extra, /*strict=*/false).ok());

  // the failed loads changed nothing; the last one loaded the file's values
  EXPECT_NE(Values(*StateDict(m)[0].tensor), before);
  EXPECT_EQ(Values(*StateDict(m)[0].tensor), Values(state->at("layers.0.weight")));

  Mlp empty({5});
  EXPECT_EQ(empty(Tensor::Zeros({1, 5})).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::nn
