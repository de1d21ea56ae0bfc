// Embedding lookups built as tinygrad's OneHot(idx).Where(table, 0).Sum() (Tensor::Gather, ONNX Gather): codegen's
// "collapse one-hot reduces" turns the sum over the vocabulary into one read of the indexed row. Realized on CPU and
// INTERP and compared with a plain lookup, out-of-range indices (0, as the one-hot gives) included; and the lowered
// kernel has no loop over the vocabulary.
#include <cmath>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/graph_util.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"
#include "tests/engine/cpu_target.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

constexpr int64_t kVocab = 5000, kDim = 24;

std::vector<float> Table() {
  std::vector<float> t(kVocab * kDim);
  for (size_t i = 0; i < t.size(); ++i) t[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
  return t;
}

class OneHotGatherTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok()) GTEST_SKIP() << GetParam() << " backend not available";
  }
};

TEST_P(OneHotGatherTest, EmbeddingRowsMatchALookup) {
  const std::vector<float> table = Table();
  // The last two indices are outside the table: their one-hot row is all zeros, so their output row is 0.
  const std::vector<int64_t> ids = {0, 4999, 17, 2500, 17, 5000, -3};
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor t = Tensor::FromVector(table, {kVocab, kDim}, GetParam());
  Tensor idx = Tensor::FromVector(ids, {n, 1}, GetParam());
  // rows[i, d] = table[ids[i], d] through Gather along dim 0 with the index broadcast over d.
  Tensor rows = t.Gather(0, idx.Expand({n, kDim}));
  auto got = rows.ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), static_cast<size_t>(n * kDim));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < kDim; ++d) {
      const bool in = ids[i] >= 0 && ids[i] < kVocab;
      const float want = in ? table[ids[i] * kDim + d] : 0.0f;
      ASSERT_EQ((*got)[i * kDim + d], want) << "row " << i << " (id " << ids[i] << ") dim " << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, OneHotGatherTest, ::testing::Values("CPU", "INTERP"));

TEST(OneHotGatherKernel, HasNoLoopOverTheVocabulary) {
  backends::RegisterAllBackends();
  Tensor t = Tensor::FromVector(Table(), {kVocab, kDim}, "NULL");
  Tensor idx = Tensor::FromVector(std::vector<int64_t>{3, 1, 4}, {3, 1}, "NULL");
  Tensor rows = t.Gather(0, idx.Expand({3, kDim}));
  codegen::Target target;
  target.renderer = "llvm";
  target.has_threads = true;
  target.max_threads = 2;
  target.supports_vectors = true;
  target.vector_bytes = 32;
  auto programs = test_util::LowerScheduledKernels(rows.uop(), target);
  ASSERT_TRUE(programs.ok()) << programs.status();
  for (const codegen::Program& p : *programs) {
    for (const UOpPtr& u : p.uops) {
      int64_t size = 0;
      if (u->op() == Op::RANGE && codegen::ConstInt(u->src(0), &size)) {
        EXPECT_LE(size, kDim) << p.name;  // rows or dims only: no loop over (a split of) the vocabulary
      }
    }
  }
  EXPECT_GE(programs->size(), 1u);
}

}  // namespace
}  // namespace kiln
