// Named run-time dims of a kiln.v1 graph's inputs (GraphInput.dim_names, ONNX's dim_param): the checks at Prepare
// (one name per dim or none; a name only on a -1 dim), one size per name across the inputs at Run, and the symbolic
// batch dim (RunOptions::max_batch) taken only when the inputs' first dims are one name: one JIT trace for every batch
// size then, a trace per size when they name different dims. Expected values are x + y computed here.
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::api {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

NodeSpec Node(std::string op, std::vector<uint32_t> src = {}) {
  NodeSpec n;
  n.op = std::move(op);
  n.dtype = "float32";
  n.src = std::move(src);
  return n;
}
NodeSpec Input(int index) {
  NodeSpec n = Node("INPUT");
  n.arg.kind = NodeArgSpec::Kind::kInt;
  n.arg.int_value = index;
  return n;
}

// out = x + y, x and y (-1, 4) with dim 0 named `nx` and `ny`.
GraphSpec AddRows(std::string nx, std::string ny) {
  GraphSpec g;
  g.inputs = {{"x", "float32", {-1, 4}, {nx, ""}}, {"y", "float32", {-1, 4}, {ny, ""}}};
  g.nodes = {Input(0), Input(1), Node("ADD", {0, 1})};
  g.outputs = {{"out", 2}};
  return g;
}

std::string_view Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}

class DimNamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = Engine::Create();
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(DimNamesTest, PrepareChecksTheNames) {
  GraphSpec g = AddRows("N", "N");
  g.inputs[1].dim_names = {"N"};  // one name for rank 2
  auto p = engine_->Prepare(g);
  ASSERT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("inputs[1].dim_names"));
  g.inputs[1].dim_names = {"N", "C"};  // a name on the static dim 4
  p = engine_->Prepare(g);
  ASSERT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("inputs[1].dim_names[1]"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("run-time dim (-1)"));
}

TEST_F(DimNamesTest, DimsOfOneNameCarryOneSize) {
  auto g = engine_->Prepare(AddRows("N", "N"));
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<float> x(3 * 4), y(2 * 4);
  auto r = engine_->Run(**g, {{"float32", {3, 4}, Bytes(x)}, {"float32", {2, 4}, Bytes(y)}}, RunOptions{});
  ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("inputs[1].shape[0]"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("inputs[0].shape[0] = 3: both are dim 'N'"));
  // Unnamed (or differently named) run-time dims are independent: that ADD then broadcasts or fails on its own.
  auto u = engine_->Prepare(AddRows("N", "M"));
  ASSERT_TRUE(u.ok()) << u.status();
  r = engine_->Run(**u, {{"float32", {3, 4}, Bytes(x)}, {"float32", {2, 4}, Bytes(y)}}, RunOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr("both are dim")));
}

// Batches of 1..8 rows through a graph with max_batch 8: the trace count after all sizes.
int64_t TracesForBatches(Engine& engine, const GraphSpec& spec) {
  auto g = engine.Prepare(spec);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return -1;
  RunOptions o;
  o.max_batch = 8;
  const int64_t before = engine.stats().traces.misses;
  for (int64_t n = 1; n <= 8; ++n) {
    std::vector<float> x(n * 4), y(n * 4);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<float>(i) * 0.5f + static_cast<float>(n);
      y[i] = 1.0f - static_cast<float>(i);
    }
    auto r = engine.Run(**g, {{"float32", {n, 4}, Bytes(x)}, {"float32", {n, 4}, Bytes(y)}}, o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return -1;
    EXPECT_EQ(r->outputs[0].shape, (std::vector<int64_t>{n, 4}));
    const auto* out = reinterpret_cast<const float*>(r->outputs[0].data.data());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(out[i], x[i] + y[i]) << "n=" << n << " i=" << i;
  }
  return engine.stats().traces.misses - before;
}

TEST_F(DimNamesTest, OneNamedBatchDimIsOneTrace) {
  EXPECT_EQ(TracesForBatches(*engine_, AddRows("N", "N")), 1);
  // First dims named apart are not one batch: a trace per batch size.
  EXPECT_EQ(TracesForBatches(*engine_, AddRows("N", "M")), 8);
}

}  // namespace
}  // namespace kiln::api
