// kilnd over real gRPC: health, metadata, config, repository index, load/unload/reload,
// statistics, a repository with broken and binary-graph models, and SIGTERM shutdown.
#include <chrono>
#include <cstring>
#include <fstream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/v1/graph.pb.h"
#include "onnx/onnx-ml.pb.h"
#include "tests/integration/kilnd_harness.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;

class KilndTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto started = KilndProcess::Start(BundledModels());
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static KilndProcess* server_;
};
KilndProcess* KilndTest::server_ = nullptr;

TEST_F(KilndTest, LiveAndReady) {
  auto stub = server_->Stub();
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub->ServerLive(Context().get(), {}, &live).ok());
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub->ServerReady(Context().get(), {}, &ready).ok());
  EXPECT_TRUE(ready.ready());
  for (const char* model : {"add_sub", "reduce_sum"}) {
    inference::ModelReadyRequest req;
    req.set_name(model);
    inference::ModelReadyResponse resp;
    ASSERT_TRUE(stub->ModelReady(Context().get(), req, &resp).ok());
    EXPECT_TRUE(resp.ready()) << model;
    req.set_version("1");
    ASSERT_TRUE(stub->ModelReady(Context().get(), req, &resp).ok());
    EXPECT_TRUE(resp.ready()) << model;
  }
  inference::ModelReadyRequest req;
  req.set_name("no_such_model");
  inference::ModelReadyResponse resp;
  ASSERT_TRUE(stub->ModelReady(Context().get(), req, &resp).ok());
  EXPECT_FALSE(resp.ready());
}

TEST_F(KilndTest, HealthIsServing) {
  auto health = server_->HealthStub();
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(Context().get(), req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  req.set_service("inference.GRPCInferenceService");
  ASSERT_TRUE(health->Check(Context().get(), req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(KilndTest, ServerMetadata) {
  inference::ServerMetadataResponse resp;
  ASSERT_TRUE(server_->Stub()->ServerMetadata(Context().get(), {}, &resp).ok());
  EXPECT_EQ(resp.name(), "kiln");
  EXPECT_FALSE(resp.version().empty());
  EXPECT_THAT(resp.extensions(), ::testing::UnorderedElementsAre(
                                     "model_repository", "model_configuration", "statistics",
                                     "logging", "trace"));
}

TEST_F(KilndTest, ModelMetadataAddSub) {
  inference::ModelMetadataRequest req;
  req.set_name("add_sub");
  inference::ModelMetadataResponse resp;
  ASSERT_TRUE(server_->Stub()->ModelMetadata(Context().get(), req, &resp).ok());
  EXPECT_EQ(resp.name(), "add_sub");
  EXPECT_EQ(resp.platform(), "kiln_graph");
  EXPECT_THAT(resp.versions(), ::testing::ElementsAre("1"));
  ASSERT_EQ(resp.inputs_size(), 2);
  ASSERT_EQ(resp.outputs_size(), 2);
  EXPECT_EQ(resp.inputs(0).name(), "INPUT0");
  EXPECT_EQ(resp.inputs(0).datatype(), "FP32");
  EXPECT_THAT(resp.inputs(0).shape(), ::testing::ElementsAre(-1, 16));  // batch dim prepended
  EXPECT_EQ(resp.outputs(1).name(), "OUTPUT1");
  EXPECT_THAT(resp.outputs(1).shape(), ::testing::ElementsAre(-1, 16));
}

TEST_F(KilndTest, ModelMetadataReduceSumHasNoBatchDim) {
  inference::ModelMetadataRequest req;
  req.set_name("reduce_sum");
  req.set_version("1");
  inference::ModelMetadataResponse resp;
  ASSERT_TRUE(server_->Stub()->ModelMetadata(Context().get(), req, &resp).ok());
  ASSERT_EQ(resp.inputs_size(), 1);
  EXPECT_THAT(resp.inputs(0).shape(), ::testing::ElementsAre(-1, 8));
  EXPECT_THAT(resp.outputs(0).shape(), ::testing::ElementsAre(-1, 1));
}

TEST_F(KilndTest, ModelConfigKeepsScheduling) {
  inference::ModelConfigRequest req;
  req.set_name("add_sub");
  inference::ModelConfigResponse resp;
  ASSERT_TRUE(server_->Stub()->ModelConfig(Context().get(), req, &resp).ok());
  const inference::ModelConfig& c = resp.config();
  EXPECT_EQ(c.name(), "add_sub");
  EXPECT_EQ(c.platform(), "kiln_graph");
  EXPECT_EQ(c.max_batch_size(), 8);
  ASSERT_EQ(c.input_size(), 2);
  EXPECT_EQ(c.input(0).data_type(), inference::TYPE_FP32);
  EXPECT_THAT(c.input(0).dims(), ::testing::ElementsAre(16));
  EXPECT_TRUE(c.has_dynamic_batching());
  EXPECT_EQ(c.dynamic_batching().max_queue_delay_microseconds(), 100u);
  ASSERT_EQ(c.instance_group_size(), 1);
  EXPECT_EQ(c.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(c.version_policy().latest().num_versions(), 1u);
}

TEST_F(KilndTest, RepositoryIndexListsBundledModels) {
  inference::RepositoryIndexRequest req;
  inference::RepositoryIndexResponse resp;
  ASSERT_TRUE(server_->Stub()->RepositoryIndex(Context().get(), req, &resp).ok());
  std::map<std::string, std::string> state;
  for (const auto& m : resp.models()) state[m.name()] = m.state();
  EXPECT_EQ(state["add_sub"], "READY");
  EXPECT_EQ(state["reduce_sum"], "READY");
}

TEST_F(KilndTest, InferReduceSumReturnsRowSums) {
  inference::ModelStatisticsRequest sreq;
  sreq.set_name("reduce_sum");
  inference::ModelStatisticsResponse before;
  ASSERT_TRUE(server_->Stub()->ModelStatistics(Context().get(), sreq, &before).ok());
  ASSERT_EQ(before.model_stats_size(), 1);

  inference::ModelInferRequest req;
  req.set_model_name("reduce_sum");
  req.set_id("sum-1");
  auto* in = req.add_inputs();
  in->set_name("X");
  in->set_datatype("FP32");
  in->add_shape(3);
  in->add_shape(8);
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[i] = static_cast<float>(i);
  req.add_raw_input_contents(std::string(reinterpret_cast<const char*>(x.data()), 24 * 4));
  inference::ModelInferResponse resp;
  grpc::Status s = server_->Stub()->ModelInfer(Context().get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.model_name(), "reduce_sum");
  EXPECT_EQ(resp.model_version(), "1");
  EXPECT_EQ(resp.id(), "sum-1");
  ASSERT_EQ(resp.outputs_size(), 1);
  EXPECT_EQ(resp.outputs(0).name(), "SUM");
  EXPECT_EQ(resp.outputs(0).datatype(), "FP32");
  EXPECT_THAT(resp.outputs(0).shape(), ::testing::ElementsAre(3, 1));
  ASSERT_EQ(resp.raw_output_contents_size(), 1);
  ASSERT_EQ(resp.raw_output_contents(0).size(), 12u);
  float sums[3];
  std::memcpy(sums, resp.raw_output_contents(0).data(), sizeof(sums));
  EXPECT_EQ(sums[0], 28.0f);   // 0 + ... + 7
  EXPECT_EQ(sums[1], 92.0f);   // 8 + ... + 15
  EXPECT_EQ(sums[2], 156.0f);  // 16 + ... + 23

  inference::ModelStatisticsResponse after;
  ASSERT_TRUE(server_->Stub()->ModelStatistics(Context().get(), sreq, &after).ok());
  ASSERT_EQ(after.model_stats_size(), 1);
  const auto& b = before.model_stats(0);
  const auto& a = after.model_stats(0);
  EXPECT_EQ(a.version(), "1");
  EXPECT_EQ(a.inference_stats().success().count(), b.inference_stats().success().count() + 1);
  EXPECT_EQ(a.inference_stats().fail().count(), b.inference_stats().fail().count());
  EXPECT_EQ(a.execution_count(), b.execution_count() + 1);
  EXPECT_EQ(a.inference_count(), b.inference_count() + 1);  // no batch dim: one inference
}

TEST_F(KilndTest, InferAddSubTypedContents) {
  inference::ModelInferRequest req;
  req.set_model_name("add_sub");
  for (const char* name : {"INPUT0", "INPUT1"}) {
    auto* in = req.add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    in->add_shape(2);
    in->add_shape(16);
    for (int i = 0; i < 32; ++i) {
      in->mutable_contents()->add_fp32_contents(name[5] == '0' ? static_cast<float>(i) : 2.0f);
    }
  }
  inference::ModelInferResponse resp;
  grpc::Status s = server_->Stub()->ModelInfer(Context().get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.raw_output_contents_size(), 2);
  std::vector<float> sum(32), diff(32);
  ASSERT_EQ(resp.raw_output_contents(0).size(), 128u);
  std::memcpy(sum.data(), resp.raw_output_contents(0).data(), 128);
  std::memcpy(diff.data(), resp.raw_output_contents(1).data(), 128);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(sum[i], static_cast<float>(i) + 2.0f) << i;
    EXPECT_EQ(diff[i], static_cast<float>(i) - 2.0f) << i;
  }
  EXPECT_THAT(resp.outputs(1).shape(), ::testing::ElementsAre(2, 16));
}

TEST_F(KilndTest, StatisticsForAllModels) {
  inference::ModelStatisticsResponse resp;
  ASSERT_TRUE(server_->Stub()->ModelStatistics(Context().get(), {}, &resp).ok());
  EXPECT_GE(resp.model_stats_size(), 2);
}

TEST_F(KilndTest, UnloadLoadReload) {
  auto stub = server_->Stub();
  auto ready = [&] {
    inference::ModelReadyRequest req;
    req.set_name("add_sub");
    inference::ModelReadyResponse resp;
    EXPECT_TRUE(stub->ModelReady(Context().get(), req, &resp).ok());
    return resp.ready();
  };
  inference::RepositoryModelUnloadRequest unload;
  unload.set_model_name("add_sub");
  (*unload.mutable_parameters())["unload_dependents"].set_bool_param(false);
  inference::RepositoryModelUnloadResponse unload_resp;
  ASSERT_TRUE(stub->RepositoryModelUnload(Context().get(), unload, &unload_resp).ok());
  EXPECT_FALSE(ready());

  inference::RepositoryIndexRequest ireq;
  inference::RepositoryIndexResponse iresp;
  ASSERT_TRUE(stub->RepositoryIndex(Context().get(), ireq, &iresp).ok());
  bool seen = false;
  for (const auto& m : iresp.models()) {
    if (m.name() != "add_sub") continue;
    seen = true;
    EXPECT_EQ(m.state(), "UNAVAILABLE");
    EXPECT_EQ(m.reason(), "unloaded");
  }
  EXPECT_TRUE(seen);
  ireq.set_ready(true);
  ASSERT_TRUE(stub->RepositoryIndex(Context().get(), ireq, &iresp).ok());
  for (const auto& m : iresp.models()) EXPECT_NE(m.name(), "add_sub");

  // Metadata of an unloaded model is UNAVAILABLE, not NOT_FOUND: the model exists.
  inference::ModelMetadataRequest mreq;
  mreq.set_name("add_sub");
  inference::ModelMetadataResponse mresp;
  EXPECT_EQ(stub->ModelMetadata(Context().get(), mreq, &mresp).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  inference::RepositoryModelLoadRequest load;
  load.set_model_name("add_sub");
  inference::RepositoryModelLoadResponse load_resp;
  ASSERT_TRUE(stub->RepositoryModelLoad(Context().get(), load, &load_resp).ok());
  EXPECT_TRUE(ready());
  // Reload of a loaded model succeeds and keeps it ready.
  ASSERT_TRUE(stub->RepositoryModelLoad(Context().get(), load, &load_resp).ok());
  EXPECT_TRUE(ready());
}

// ** a scratch repository: binary graph, JSON config override, broken models **

void WriteFile(const std::filesystem::path& path, const std::string& data) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

constexpr char kScaleConfig[] = R"pb(
  name: "scale"
  platform: "kiln_graph"
  max_batch_size: 0 input
  [ {
    name: "A"
    data_type: TYPE_INT32
    dims: [ 4 ]
  }] output
  [ {
    name: "B"
    data_type: TYPE_INT32
    dims: [ 4 ]
  }]
  version_policy { all {} }
)pb";

std::string ScaleGraphBinary() {
  kiln::v1::Graph g;
  g.set_name("scale");
  auto* in = g.add_inputs();
  in->set_name("A");
  in->set_dtype("int32");
  in->add_shape(4);
  auto* n0 = g.add_nodes();
  n0->set_op("INPUT");
  n0->set_dtype("int32");
  n0->mutable_arg()->set_int_value(0);
  auto* n1 = g.add_nodes();
  n1->set_op("CONST");
  n1->set_dtype("int32");
  n1->mutable_arg()->set_int_value(3);
  auto* n2 = g.add_nodes();
  n2->set_op("MUL");
  n2->set_dtype("int32");
  n2->add_src(0);
  n2->add_src(1);
  auto* out = g.add_outputs();
  out->set_name("B");
  out->set_node(2);
  return g.SerializeAsString();
}

TEST(KilndRepositoryTest, BrokenModelsAndVersionPolicies) {
  TempDir repo;
  WriteFile(repo.path() / "scale" / "config.pbtxt", kScaleConfig);
  WriteFile(repo.path() / "scale" / "1" / "model.graph", ScaleGraphBinary());
  WriteFile(repo.path() / "scale" / "3" / "model.graph", ScaleGraphBinary());
  WriteFile(repo.path() / "bad_config" / "config.pbtxt",
            "platform: \"kiln_graph\"\nnot_a_field: 1\n");
  WriteFile(repo.path() / "bad_platform" / "config.pbtxt",
            "platform: \"tensorflow_savedmodel\"\ninput [{name: \"x\" data_type: TYPE_FP32 "
            "dims: [1]}]\noutput [{name: \"y\" data_type: TYPE_FP32 dims: [1]}]\n");
  std::string cyclic = ScaleGraphBinary();
  kiln::v1::Graph g;
  ASSERT_TRUE(g.ParseFromString(cyclic));
  g.mutable_nodes(0)->add_src(2);  // INPUT depends on a later node: a cycle
  WriteFile(
      repo.path() / "cyclic" / "config.pbtxt",
      std::string(kScaleConfig).replace(std::string(kScaleConfig).find("scale"), 5, "cyclic"));
  WriteFile(repo.path() / "cyclic" / "1" / "model.graph", g.SerializeAsString());

  auto server = KilndProcess::Start(repo.path());
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = (*server)->Stub();

  inference::RepositoryIndexRequest ireq;
  inference::RepositoryIndexResponse iresp;
  ASSERT_TRUE(stub->RepositoryIndex(Context().get(), ireq, &iresp).ok());
  std::map<std::string, inference::RepositoryIndexResponse::ModelIndex> rows;
  for (const auto& m : iresp.models()) rows[m.name() + "/" + m.version()] = m;
  EXPECT_EQ(rows["scale/1"].state(), "READY");  // version_policy all: both versions
  EXPECT_EQ(rows["scale/3"].state(), "READY");
  EXPECT_EQ(rows["bad_config/"].state(), "UNAVAILABLE");
  // The place and kind of the error, never the file's text (issue #26: a config.pbtxt linked to a
  // secret leaked its first token here).
  EXPECT_THAT(rows["bad_config/"].reason(), HasSubstr("config.pbtxt: line 2:"));
  EXPECT_THAT(rows["bad_config/"].reason(), HasSubstr("unknown field name"));
  EXPECT_THAT(rows["bad_config/"].reason(), ::testing::Not(HasSubstr("not_a_field")));
  EXPECT_THAT(rows["bad_platform/"].reason(), HasSubstr("unknown platform"));
  EXPECT_THAT(rows["cyclic/"].reason(), HasSubstr("nodes[0].src[0]"));
  for (const auto& [key, row] : rows) {
    EXPECT_THAT(row.reason(), ::testing::Not(HasSubstr(repo.path().string()))) << key;
  }

  inference::ModelMetadataRequest mreq;
  mreq.set_name("scale");
  inference::ModelMetadataResponse mresp;
  ASSERT_TRUE(stub->ModelMetadata(Context().get(), mreq, &mresp).ok());
  EXPECT_THAT(mresp.versions(), ::testing::ElementsAre("1", "3"));

  // Loading a broken model reports why.
  inference::RepositoryModelLoadRequest load;
  inference::RepositoryModelLoadResponse load_resp;
  load.set_model_name("bad_platform");
  grpc::Status s = stub->RepositoryModelLoad(Context().get(), load, &load_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("unknown platform 'tensorflow_savedmodel'"));

  // A JSON config override (the `config` load parameter) replaces config.pbtxt: latest 1.
  load.set_model_name("scale");
  (*load.mutable_parameters())["config"].set_string_param(
      R"({"name":"scale","platform":"kiln_graph","max_batch_size":0,
          "input":[{"name":"A","data_type":"TYPE_INT32","dims":[4]}],
          "output":[{"name":"B","data_type":"TYPE_INT32","dims":[4]}],
          "version_policy":{"latest":{"num_versions":1}}})");
  ASSERT_TRUE(stub->RepositoryModelLoad(Context().get(), load, &load_resp).ok());
  ASSERT_TRUE(stub->ModelMetadata(Context().get(), mreq, &mresp).ok());
  EXPECT_THAT(mresp.versions(), ::testing::ElementsAre("3"));

  // A failed reload keeps the versions that serve.
  (*load.mutable_parameters())["config"].set_string_param(R"({"platform":"nope"})");
  s = stub->RepositoryModelLoad(Context().get(), load, &load_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  inference::ModelReadyRequest rreq;
  rreq.set_name("scale");
  inference::ModelReadyResponse rresp;
  ASSERT_TRUE(stub->ModelReady(Context().get(), rreq, &rresp).ok());
  EXPECT_TRUE(rresp.ready());

  // Once the folder is fixed, a load succeeds.
  WriteFile(repo.path() / "bad_platform" / "config.pbtxt",
            "platform: \"kiln_onnx\"\ninput [{name: \"x\" data_type: TYPE_FP32 dims: [1]}]\n"
            "output [{name: \"y\" data_type: TYPE_FP32 dims: [1]}]\n");
  {  // a real ONNX model (y = Identity(x)): kilnd loads model.onnx through engine/onnx at load time
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    for (const char* io : {"x", "y"}) {
      auto* vi = std::string(io) == "x" ? g->add_input() : g->add_output();
      vi->set_name(io);
      vi->mutable_type()->mutable_tensor_type()->set_elem_type(1);
      vi->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1);
    }
    auto* n = g->add_node();
    n->set_op_type("Identity");
    n->add_input("x");
    n->add_output("y");
    WriteFile(repo.path() / "bad_platform" / "1" / "model.onnx", m.SerializeAsString());
  }
  load.clear_parameters();
  load.set_model_name("bad_platform");
  EXPECT_TRUE(stub->RepositoryModelLoad(Context().get(), load, &load_resp).ok());
}

TEST(KilndShutdownTest, SigtermExitsCleanlyWithinTimeout) {
  auto server = KilndProcess::Start(BundledModels(), {"--exit-timeout-secs=5"});
  ASSERT_TRUE(server.ok()) << server.status();
  inference::ServerLiveResponse live;
  ASSERT_TRUE((*server)->Stub()->ServerLive(Context().get(), {}, &live).ok());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ((*server)->Stop(std::chrono::seconds(5)), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(KilndStartupTest, MissingRepositoryFailsFast) {
  auto server = KilndProcess::Start("/nonexistent/kiln/models");
  EXPECT_FALSE(server.ok());
}

}  // namespace
}  // namespace kiln::testing
