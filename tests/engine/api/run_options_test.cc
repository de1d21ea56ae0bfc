// engine/api RunOptions: output and memory admission before anything is allocated, deadlines and
// cancellation, the warm-up's zero inputs counted, count caps and one-pass name checks, and the
// prepared-graph cache bounded by bytes. Expected figures are the byte counts of the tensors.
// Named run-time dims of the inputs (GraphInput.dim_names, ONNX's dim_param): the checks at Prepare (one name per
// dim or none; a name only on a -1 dim), one size per name across the inputs at Run, and the symbolic batch dim
// (RunOptions::max_batch) taken only when the inputs' first dims are one name: one JIT trace for every batch size
// then, a trace per size when they name different dims. Expected values are x + y computed here.
#include <algorithm>
#include <cstring>
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

// y = x + x over `n` floats; two outputs of it when `twice`.
GraphSpec Double(int64_t n, bool twice = false, std::string input = "x") {
  GraphSpec g;
  g.inputs = {{std::move(input), "float32", {n}}};
  g.nodes = {Input(0), Node("ADD", {0, 0})};
  g.outputs = {{"y", 1}};
  if (twice) g.outputs.push_back({"z", 1});
  return g;
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

class RunOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = Engine::Create();
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(RunOptionsTest, OutputsOverTheResponseLimitAreRefused) {
  auto g = engine_->Prepare(Double(1024, /*twice=*/true));
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<float> x(1024, 1.0f);
  RunOptions o;
  o.limits.max_output_bytes = 2 * 1024 * 4 - 1;  // the two outputs take 8192 bytes
  auto r = engine_->Run(**g, {{"float32", {1024}, Bytes(x)}}, o);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("the outputs take 8192 bytes"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("max_output_bytes"));
  o.limits.max_output_bytes = 2 * 1024 * 4;
  r = engine_->Run(**g, {{"float32", {1024}, Bytes(x)}}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs.size(), 2u);
}

TEST_F(RunOptionsTest, MemoryCountsInputsOutputsAndHostCopies) {
  auto g = engine_->Prepare(Double(1024));
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<float> x(1024, 1.0f);
  RunOptions o;
  o.limits.output_copies = 2;
  // 4096 bytes of input, 4096 of output on the device and twice on the host: 16384.
  o.limits.max_memory_bytes = 16384 - 1;
  auto r = engine_->Run(**g, {{"float32", {1024}, Bytes(x)}}, o);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("at least 16384 bytes"));
  o.limits.max_memory_bytes = 16384;
  r = engine_->Run(**g, {{"float32", {1024}, Bytes(x)}}, o);
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST_F(RunOptionsTest, DeadlineAndCancellationBeforeTheStart) {
  auto g = engine_->Prepare(Double(16));
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<float> x(16, 1.0f);
  RunOptions o;
  o.deadline = absl::Now() - absl::Milliseconds(1);
  auto r = engine_->Run(**g, {{"float32", {16}, Bytes(x)}}, o);
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  RunOptions c;
  auto token = std::make_shared<CancellationToken>();
  token->Cancel();
  c.cancellation = token;
  r = engine_->Run(**g, {{"float32", {16}, Bytes(x)}}, c);
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_EQ((*g)->runs(), 0u);
}

TEST_F(RunOptionsTest, WarmUpCountsItsZeroInputs) {
  auto g = engine_->Prepare(Double(1 << 20));  // 4 MiB in, 4 MiB out
  ASSERT_TRUE(g.ok()) << g.status();
  RunOptions o;
  o.limits.max_memory_bytes = 8 << 20;  // the zeros and their device copy alone fill it
  auto r = engine_->Warm(**g, o);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("max_memory_bytes"));
  EXPECT_EQ((*g)->runs(), 0u);
  o.limits.max_memory_bytes = 20 << 20;  // zeros 4 + input 4 + output 4 + host copy 4 MiB
  r = engine_->Warm(**g, o);
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST_F(RunOptionsTest, CountsAreCappedAndNamesCheckedInOnePass) {
  GraphSpec g = Double(1);
  g.inputs.clear();
  for (int i = 0; i <= (1 << 12); ++i) g.inputs.push_back({"i" + std::to_string(i), "float32", {1}});
  auto r = engine_->Prepare(g);
  ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("4097 inputs exceed the limit 4096"));
  g.inputs.pop_back();
  g.inputs.back().name = "i0";
  r = engine_->Prepare(g);
  ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("inputs[4095].name: duplicate 'i0'"));
  g = Double(4);
  g.outputs = {{"y", 1}, {"z", 1}, {"y", 1}};
  r = engine_->Prepare(g);
  ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("outputs[2].name: duplicate 'y'"));
}

TEST(PreparedCacheTest, BoundedByBytes) {
  EngineOptions options;
  options.prepared_cache_bytes = 1;  // every graph is larger: only the newest stays
  auto e = Engine::Create(options);
  ASSERT_TRUE(e.ok()) << e.status();
  for (int k = 0; k < 5; ++k) ASSERT_TRUE((*e)->Prepare(Double(8, false, "x" + std::to_string(k))).ok());
  EngineStats s = (*e)->stats();
  EXPECT_EQ(s.prepared.entries, 1);
  EXPECT_EQ(s.prepared.evictions, 4);
  EXPECT_GT(s.prepared.bytes, 0);
  EXPECT_EQ(s.prepared.max_bytes, 1);
}

// A graph evicted from the prepared cache takes its JIT traces with it. The traces were keyed by the
// graph's content, so the same graph prepared again found the evicted graph's trace, whose function
// read the freed graph: kilnd answered "an exception in the engine" or crashed (found by the 65,536-node
// chain of test_kilnd_limits.py, whose 1.8 MB graph evicted every other one).
TEST(PreparedCacheTest, AnEvictedGraphTakesItsTracesAlong) {
  EngineOptions options;
  options.prepared_cache_bytes = 1;  // only the newest graph stays
  auto e = Engine::Create(options);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  auto run = [&](const PreparedGraph& g) -> std::vector<float> {
    auto r = (*e)->Run(g, {{"float32", {8}, Bytes(x)}}, RunOptions{});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->outputs.size() != 1) return {};
    std::vector<float> y(8);
    EXPECT_EQ(r->outputs[0].data.size(), y.size() * sizeof(float));
    std::memcpy(y.data(), r->outputs[0].data.data(), std::min(r->outputs[0].data.size(), y.size() * sizeof(float)));
    return y;
  };
  const std::vector<float> twice = {2, 4, 6, 8, 10, 12, 14, 16};
  {
    auto a = (*e)->Prepare(Double(8));
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(run(**a), twice);  // the first call of the signature: a trace entry exists from now on
    EXPECT_EQ((*e)->stats().traces.entries, 1);
  }
  ASSERT_TRUE((*e)->Prepare(Double(8, false, "other")).ok());  // evicts and destroys the first graph
  EXPECT_EQ((*e)->stats().traces.entries, 0);
  auto again = (*e)->Prepare(Double(8));
  ASSERT_TRUE(again.ok()) << again.status();
  for (int call = 0; call < 3; ++call) EXPECT_EQ(run(**again), twice) << call;  // run, capture, replay
}

TEST_F(RunOptionsTest, DimNamesPrepareChecksTheNames) {
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

TEST_F(RunOptionsTest, DimNamesDimsOfOneNameCarryOneSize) {
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

TEST_F(RunOptionsTest, DimNamesOneNamedBatchDimIsOneTrace) {
  EXPECT_EQ(TracesForBatches(*engine_, AddRows("N", "N")), 1);
  // First dims named apart are not one batch: a trace per batch size.
  EXPECT_EQ(TracesForBatches(*engine_, AddRows("N", "M")), 8);
}

}  // namespace
}  // namespace kiln::api
