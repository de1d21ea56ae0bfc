// server/core GraphService + GraphSpecFromProto: a kiln.v1.Graph from text proto, run through the
// engine, registered once and executed again without compiling; errors name the field.
#include "server/core/graph_service.h"

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/core/graph_spec_codec.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

constexpr char kGraph[] = R"pb(
  name: "scale_sum"
  inputs { name: "X" dtype: "float32" shape: [ 2, 4 ] }
  nodes { op: "INPUT" dtype: "float32" arg { int_value: 0 } }
  nodes { op: "CONST" dtype: "float32" arg { float_value: 3 } }
  nodes { op: "MUL" dtype: "float32" src: [ 0, 1 ] }
  nodes { op: "REDUCE_AXIS" dtype: "float32" src: [ 2 ] arg { reduce { op: "ADD" axes: [ 1 ] } } }
  outputs { name: "Y" node: 3 }
)pb";

api::GraphSpec Spec() {
  kiln::v1::Graph g;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kGraph, &g));
  return GraphSpecFromProto(g);
}

TEST(GraphSpecFromProtoTest, CopiesEveryField) {
  api::GraphSpec s = Spec();
  ASSERT_EQ(s.nodes.size(), 4u);
  EXPECT_EQ(s.name, "scale_sum");
  EXPECT_EQ(s.inputs[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(s.nodes[0].arg.kind, api::NodeArgSpec::Kind::kInt);
  EXPECT_EQ(s.nodes[1].arg.kind, api::NodeArgSpec::Kind::kFloat);
  EXPECT_EQ(s.nodes[1].arg.float_value, 3.0);
  EXPECT_EQ(s.nodes[2].src, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(s.nodes[3].arg.kind, api::NodeArgSpec::Kind::kReduce);
  EXPECT_EQ(s.nodes[3].arg.reduce_op, "ADD");
  EXPECT_EQ(s.nodes[3].arg.reduce_axes, (std::vector<int64_t>{1}));
  EXPECT_EQ(s.outputs[0].name, "Y");
  EXPECT_EQ(s.outputs[0].node, 3u);
  EXPECT_TRUE(s.inputs[0].dim_names.empty());
  kiln::v1::Graph named;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(inputs { name: "X" dtype: "float32" shape: [ -1, 4 ] dim_names: [ "N", "" ] })pb", &named));
  EXPECT_EQ(GraphSpecFromProto(named).inputs[0].dim_names, (std::vector<std::string>{"N", ""}));
}

TEST(GraphServiceTest, RegisterOnceExecuteMany) {
  auto engine = api::Engine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  GraphService service(engine->get());
  auto reg = service.Register(Spec());
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_FALSE(reg->id.empty());
  EXPECT_GE(reg->kernel_count, 1u);

  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  std::string_view raw(reinterpret_cast<const char*>(x.data()), x.size() * 4);
  std::vector<GraphTensorIn> in = {{"X", "float32", {2, 4}, raw}};
  for (int i = 0; i < 5; ++i) {
    auto run = service.ExecuteRegistered(reg->id, in);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->kernels_compiled, 0);
    ASSERT_EQ(run->outputs.size(), 1u);
    float y[2];
    ASSERT_EQ(run->outputs[0].data.size(), sizeof(y));
    std::memcpy(y, run->outputs[0].data.data(), sizeof(y));
    EXPECT_EQ(y[0], 30.0f);
    EXPECT_EQ(y[1], 78.0f);
  }
  auto rows = service.Kernels(reg->id);
  ASSERT_TRUE(rows.ok());
  ASSERT_FALSE(rows->empty());
  for (const auto& r : *rows) {
    EXPECT_EQ(r.graph_runs, 6u);  // warm-up + 5
    EXPECT_LE(r.stats.compiles, 1u);
  }

  EXPECT_TRUE(absl::IsNotFound(service.ExecuteRegistered("nope", in).status()));
  std::vector<GraphTensorIn> wrong = {{"Z", "float32", {2, 4}, raw}};
  auto bad = service.Execute(Spec(), wrong);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("inputs[0].name"));
  std::vector<GraphTensorIn> twice = {in[0], in[0]};
  EXPECT_THAT(std::string(service.Execute(Spec(), twice).status().message()),
              HasSubstr("duplicate input 'X'"));
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

// 60,000-node NEG chains over a run-time-sized input (no warm-up, so registering is decoding only):
// the registry refuses the graph that would pass kMaxRegisteredGraphBytes, keeps serving the rest.
TEST(GraphServiceTest, RegisteredGraphsAreBoundedByBytes) {
  api::EngineOptions options;
  options.limits.max_nodes = 1 << 16;
  auto engine = api::Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  GraphService service(engine->get());
  int registered = 0;
  int64_t one = 0;
  absl::Status refused;
  for (int k = 0; k < 64 && refused.ok(); ++k) {
    api::GraphSpec spec;
    spec.inputs = {{"x" + std::to_string(k), "float32", {-1}}};
    api::NodeSpec in;
    in.op = "INPUT";
    in.dtype = "float32";
    in.arg.kind = api::NodeArgSpec::Kind::kInt;
    spec.nodes.push_back(in);
    for (uint32_t i = 1; i < 60000; ++i) spec.nodes.push_back({"NEG", "float32", {i - 1}, {}});
    spec.outputs = {{"y", 59999}};
    if (one == 0) {
      auto prepared = (*engine)->Prepare(spec);
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      one = (*prepared)->bytes();
      ASSERT_GT(one, 0);
    }
    absl::StatusOr<RegisteredGraphInfo> info = service.Register(spec);
    if (info.ok()) {
      ++registered;
    } else {
      refused = info.status();
    }
  }
  ASSERT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("limit of 268435456 bytes"));
  EXPECT_LE(registered * one, kMaxRegisteredGraphBytes);
  EXPECT_GT((registered + 1) * one, kMaxRegisteredGraphBytes);
  // The registry still answers.
  auto rows = service.Kernels("");
  EXPECT_TRUE(rows.ok()) << rows.status();
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

// A transport's own response cap (GraphCall::max_response_bytes) is applied before the run; a
// device the call names is honoured, an unknown one is INVALID_ARGUMENT naming `device`.
TEST(GraphServiceTest, CallLimitsAndDevice) {
  auto engine = api::Engine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  RunPolicy policy;
  GraphService service(engine->get(), &policy);
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  std::string_view raw(reinterpret_cast<const char*>(x.data()), x.size() * 4);
  std::vector<GraphTensorIn> in = {{"X", "float32", {2, 4}, raw}};
  GraphCall call;
  call.max_response_bytes = 7;  // Y is 2 floats: 8 bytes
  auto run = service.Execute(Spec(), in, call);
  ASSERT_TRUE(absl::IsResourceExhausted(run.status())) << run.status();
  EXPECT_THAT(std::string(run.status().message()), HasSubstr("the outputs take 8 bytes"));
  call.max_response_bytes = 8;
  run = service.Execute(Spec(), in, call);
  ASSERT_TRUE(run.ok()) << run.status();
  call.device = "NOT A DEVICE";
  run = service.Execute(Spec(), in, call);
  ASSERT_TRUE(absl::IsInvalidArgument(run.status())) << run.status();
  EXPECT_THAT(std::string(run.status().message()), HasSubstr("device: "));
}

}  // namespace
}  // namespace kiln::server
