// The bad-input table: malformed ModelInfer / repository calls against a real kilnd, each with
// the exact gRPC code and the message's key words. After the table (run several times) the
// daemon is still live, ready and SERVING, and a valid request still gets its honest answer.
#include <climits>
#include <functional>
#include <string>
#include <vector>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/v1/engine.grpc.pb.h"
#include "tests/integration/kilnd_harness.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMaxRequestBytes = 4 << 20;  // fits the 10^6-node graph (2 bytes a node)

// A valid add_sub request: batch 1, two FP32 [1,16] inputs, raw contents.
inference::ModelInferRequest AddSub() {
  inference::ModelInferRequest req;
  req.set_model_name("add_sub");
  for (const char* name : {"INPUT0", "INPUT1"}) {
    auto* in = req.add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(16);
    req.add_raw_input_contents(std::string(64, '\0'));
  }
  return req;
}

struct Case {
  std::string name;
  std::function<void(inference::ModelInferRequest*)> mutate;
  grpc::StatusCode code;
  std::vector<std::string> words;  // substrings the message must contain
};

std::vector<Case> InferCases() {
  using R = inference::ModelInferRequest;
  return {
      {"unknown_model",
       [](R* r) { r->set_model_name("no_such_model"); },
       grpc::StatusCode::NOT_FOUND,
       {"model_name", "unknown model 'no_such_model'"}},
      {"traversal_model_name",
       [](R* r) { r->set_model_name("../etc/passwd"); },
       grpc::StatusCode::NOT_FOUND,
       {"unknown model"}},
      {"empty_model_name",
       [](R* r) { r->set_model_name(""); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"model_name", "empty"}},
      {"unknown_version",
       [](R* r) { r->set_model_version("7"); },
       grpc::StatusCode::NOT_FOUND,
       {"model_version", "unknown version 7"}},
      {"malformed_version",
       [](R* r) { r->set_model_version("1abc"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"model_version", "not a positive integer"}},
      {"missing_input",
       [](R* r) {
         r->mutable_inputs()->RemoveLast();
         r->mutable_raw_input_contents()->RemoveLast();
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"missing input 'INPUT1'"}},
      {"extra_input",
       [](R* r) {
         auto* in = r->add_inputs();
         *in = r->inputs(0);
         in->set_name("INPUT2");
         r->add_raw_input_contents(std::string(64, '\0'));
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[2].name", "unexpected input 'INPUT2'"}},
      {"duplicate_input",
       [](R* r) { r->mutable_inputs(1)->set_name("INPUT0"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[1].name", "duplicate input 'INPUT0'"}},
      {"wrong_datatype",
       [](R* r) { r->mutable_inputs(0)->set_datatype("INT32"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].datatype", "expects FP32, got INT32"}},
      {"unknown_datatype",
       [](R* r) { r->mutable_inputs(0)->set_datatype("FLOAT32"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].datatype", "unknown datatype 'FLOAT32'"}},
      {"byte_size_one_short",
       [](R* r) { r->mutable_raw_input_contents(0)->resize(63); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"raw_input_contents[0]", "byte size 63", "expected 64 bytes"}},
      {"byte_size_one_over",
       [](R* r) { r->mutable_raw_input_contents(1)->resize(65); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"raw_input_contents[1]", "byte size 65", "expected 64 bytes"}},
      {"negative_dim",
       [](R* r) { r->mutable_inputs(0)->set_shape(1, -16); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].shape[1]", "-16 is negative"}},
      {"huge_dims_overflow",
       [](R* r) {
         auto* shape = r->mutable_inputs(0)->mutable_shape();
         shape->Set(0, int64_t{1} << 40);
         shape->Set(1, int64_t{1} << 40);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].shape", "overflows int64"}},
      {"byte_size_overflow",
       [](R* r) {
         auto* shape = r->mutable_inputs(0)->mutable_shape();
         shape->Set(0, int64_t{1} << 31);
         shape->Set(1, int64_t{1} << 31);  // 2^62 elements fit; 2^64 bytes do not
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].shape", "byte size", "overflows int64"}},
      {"rank_300",
       [](R* r) {
         auto* shape = r->mutable_inputs(0)->mutable_shape();
         shape->Clear();
         for (int i = 0; i < 300; ++i) shape->Add(1);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].shape", "rank 300", "limit 64"}},
      {"wrong_rank",
       [](R* r) { r->mutable_inputs(0)->mutable_shape()->RemoveLast(); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].shape", "expects rank 2", "got rank 1"}},
      {"wrong_dim",
       [](R* r) {
         r->mutable_inputs(1)->set_shape(1, 15);
         r->mutable_raw_input_contents(1)->resize(60);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[1].shape[1]", "expects 16, got 15"}},
      {"batch_over_max",
       [](R* r) {
         for (int i = 0; i < 2; ++i) {
           r->mutable_inputs(i)->set_shape(0, 9);
           r->mutable_raw_input_contents(i)->resize(9 * 64);
         }
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].shape[0]", "batch size 9", "max_batch_size 8"}},
      {"batch_zero",
       [](R* r) { r->mutable_inputs(0)->set_shape(0, 0); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].shape[0]", "batch size 0"}},
      {"batch_mismatch",
       [](R* r) {
         r->mutable_inputs(1)->set_shape(0, 2);
         r->mutable_raw_input_contents(1)->resize(128);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[1].shape[0]", "differs from inputs[0]"}},
      {"raw_for_some_inputs",
       [](R* r) { r->mutable_raw_input_contents()->RemoveLast(); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"raw_input_contents", "1 entries for 2 inputs"}},
      {"raw_and_typed",
       [](R* r) { r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].contents", "raw_input_contents"}},
      {"typed_count_short",
       [](R* r) {
         r->clear_raw_input_contents();
         for (int i = 0; i < 2; ++i) {
           for (int k = 0; k < (i == 0 ? 16 : 15); ++k) {
             r->mutable_inputs(i)->mutable_contents()->add_fp32_contents(1.0f);
           }
         }
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[1].contents.fp32_contents", "holds 15 elements", "needs 16"}},
      {"typed_wrong_field",
       [](R* r) {
         r->clear_raw_input_contents();
         for (int k = 0; k < 16; ++k) {
           r->mutable_inputs(0)->mutable_contents()->add_int_contents(1);
         }
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"inputs[0].contents.int_contents", "FP32"}},
      {"unknown_output",
       [](R* r) { r->add_outputs()->set_name("OUTPUT9"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"outputs[0].name", "unknown output 'OUTPUT9'"}},
      {"duplicate_output",
       [](R* r) {
         r->add_outputs()->set_name("OUTPUT0");
         r->add_outputs()->set_name("OUTPUT0");
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"outputs[1].name", "duplicate output"}},
      {"oversized_message",
       [](R* r) { r->mutable_raw_input_contents(0)->assign(kMaxRequestBytes + 1024, 'x'); },
       grpc::StatusCode::RESOURCE_EXHAUSTED,
       {"larger than max"}},
  };
}

// A valid kiln.v1.Engine request: y = A + A over float32 [4].
kiln::v1::ExecuteRequest AddGraph() {
  kiln::v1::ExecuteRequest req;
  auto* g = req.mutable_graph();
  auto* in = g->add_inputs();
  in->set_name("A");
  in->set_dtype("float32");
  in->add_shape(4);
  auto* n0 = g->add_nodes();
  n0->set_op("INPUT");
  n0->set_dtype("float32");
  n0->mutable_arg()->set_int_value(0);
  auto* n1 = g->add_nodes();
  n1->set_op("ADD");
  n1->set_dtype("float32");
  n1->add_src(0);
  n1->add_src(0);
  auto* out = g->add_outputs();
  out->set_name("y");
  out->set_node(1);
  auto* t = req.add_inputs();
  t->set_name("A");
  t->set_dtype("float32");
  t->add_shape(4);
  t->set_raw(std::string(16, '\0'));
  return req;
}

struct GraphCase {
  std::string name;
  std::function<void(kiln::v1::ExecuteRequest*)> mutate;
  grpc::StatusCode code;
  std::vector<std::string> words;
};

std::vector<GraphCase> GraphCases() {
  using R = kiln::v1::ExecuteRequest;
  return {
      {"graph_missing", [](R* r) { r->clear_graph(); }, grpc::StatusCode::INVALID_ARGUMENT,
       {"graph: missing"}},
      {"graph_cycle", [](R* r) { r->mutable_graph()->mutable_nodes(1)->set_src(0, 1); },
       grpc::StatusCode::INVALID_ARGUMENT, {"nodes[1].src[0]"}},
      {"graph_dangling_source", [](R* r) { r->mutable_graph()->mutable_nodes(1)->set_src(1, 7); },
       grpc::StatusCode::INVALID_ARGUMENT, {"nodes[1].src[1]"}},
      {"graph_disallowed_op_custom",
       [](R* r) { r->mutable_graph()->mutable_nodes(1)->set_op("CUSTOM"); },
       grpc::StatusCode::INVALID_ARGUMENT, {"nodes[1].op", "CUSTOM"}},
      {"graph_disallowed_op_buffer",
       [](R* r) { r->mutable_graph()->mutable_nodes(1)->set_op("BUFFER"); },
       grpc::StatusCode::INVALID_ARGUMENT, {"nodes[1].op", "BUFFER"}},
      {"graph_unknown_op", [](R* r) { r->mutable_graph()->mutable_nodes(1)->set_op("FROB"); },
       grpc::StatusCode::INVALID_ARGUMENT, {"nodes[1].op", "unknown op 'FROB'"}},
      {"graph_output_out_of_range", [](R* r) { r->mutable_graph()->mutable_outputs(0)->set_node(9); },
       grpc::StatusCode::INVALID_ARGUMENT, {"outputs[0].node"}},
      {"graph_input_short_raw",
       [](R* r) { r->mutable_inputs(0)->set_raw(std::string(15, '\0')); },
       grpc::StatusCode::INVALID_ARGUMENT, {"inputs[0].raw"}},
      {"graph_million_nodes",
       [](R* r) {
         auto* nodes = r->mutable_graph()->mutable_nodes();
         nodes->Reserve(1000000);
         while (nodes->size() < 1000000) nodes->Add();  // empty nodes: refused by count first
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"graph.nodes", "1000000 nodes exceed the limit 65536"}},
  };
}

// kilnd's resident set (VmRSS) in KiB, from /proc.
int64_t RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      int64_t kib = -1;
      fields >> kib;
      return kib;
    }
  }
  return -1;
}

class BadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto started = KilndProcess::Start(BundledModels(),
                                       {"--max-request-bytes=" + std::to_string(kMaxRequestBytes)});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  // Runs every case once; returns the number that matched.
  static void RunTable(inference::GRPCInferenceService::Stub* stub) {
    for (const Case& c : InferCases()) {
      inference::ModelInferRequest req = AddSub();
      c.mutate(&req);
      inference::ModelInferResponse resp;
      grpc::Status s = stub->ModelInfer(Context().get(), req, &resp);
      EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
      for (const std::string& w : c.words) {
        EXPECT_THAT(s.error_message(), HasSubstr(w)) << c.name;
      }
      EXPECT_LT(s.error_message().size(), 512u) << c.name;
    }
  }

  static void RunGraphTable(kiln::v1::Engine::Stub* stub,
                            const std::vector<std::pair<GraphCase, kiln::v1::ExecuteRequest>>& cases) {
    for (const auto& [c, req] : cases) {
      kiln::v1::ExecuteResponse resp;
      grpc::Status s = stub->Execute(Context(30).get(), req, &resp);
      EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
      for (const std::string& w : c.words) {
        EXPECT_THAT(s.error_message(), HasSubstr(w)) << c.name;
      }
      EXPECT_LT(s.error_message().size(), 512u) << c.name;
    }
  }

  static std::vector<std::pair<GraphCase, kiln::v1::ExecuteRequest>> BuildGraphCases() {
    std::vector<std::pair<GraphCase, kiln::v1::ExecuteRequest>> out;
    for (const GraphCase& c : GraphCases()) {
      kiln::v1::ExecuteRequest req = AddGraph();
      c.mutate(&req);
      out.emplace_back(c, std::move(req));
    }
    return out;
  }

  static void ExpectHealthy() {
    auto stub = server_->Stub();
    inference::ServerLiveResponse live;
    ASSERT_TRUE(stub->ServerLive(Context().get(), {}, &live).ok());
    EXPECT_TRUE(live.live());
    inference::ServerReadyResponse ready;
    ASSERT_TRUE(stub->ServerReady(Context().get(), {}, &ready).ok());
    EXPECT_TRUE(ready.ready());
    grpc::health::v1::HealthCheckResponse health;
    ASSERT_TRUE(server_->HealthStub()->Check(Context().get(), {}, &health).ok());
    EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    inference::ModelInferResponse resp;
    grpc::Status s = stub->ModelInfer(Context().get(), AddSub(), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.raw_output_contents_size(), 2);
    EXPECT_EQ(resp.raw_output_contents(0), std::string(64, '\0'));  // 0 + 0
    EXPECT_EQ(resp.raw_output_contents(1), std::string(64, '\0'));  // 0 - 0
  }

  static KilndProcess* server_;
};
KilndProcess* BadInputTest::server_ = nullptr;

TEST_F(BadInputTest, TableHasEnoughCases) {
  EXPECT_GE(InferCases().size(), 25u);
  EXPECT_GE(InferCases().size() + GraphCases().size(), 35u);
}

TEST_F(BadInputTest, BaselineRequestIsValid) { ExpectHealthy(); }

TEST_F(BadInputTest, InferTableThenHealthy) {
  auto stub = server_->Stub();
  for (int round = 0; round < 5; ++round) RunTable(stub.get());
  ExpectHealthy();
  ASSERT_TRUE(server_->running());
}

TEST_F(BadInputTest, GraphTableThenHealthy) {
  auto stub = kiln::v1::Engine::NewStub(server_->channel());
  kiln::v1::ExecuteResponse ok;
  grpc::Status s = stub->Execute(Context().get(), AddGraph(), &ok);
  ASSERT_TRUE(s.ok()) << s.error_message();  // the base request is valid
  ASSERT_EQ(ok.outputs_size(), 1);
  RunGraphTable(stub.get(), BuildGraphCases());
  ExpectHealthy();
}

// Both tables 100 times: the daemon answers every case and its RSS grows < 32 MiB (error paths
// free what they allocate). The first round warms allocator pools and is not counted.
TEST_F(BadInputTest, TablesHundredTimesRssBounded) {
  auto stub = server_->Stub();
  auto engine = kiln::v1::Engine::NewStub(server_->channel());
  const auto graph_cases = BuildGraphCases();
  RunTable(stub.get());
  RunGraphTable(engine.get(), graph_cases);
  const int64_t before = RssKiB(server_->pid());
  ASSERT_GT(before, 0);
  for (int round = 0; round < 100; ++round) {
    RunTable(stub.get());
    RunGraphTable(engine.get(), graph_cases);
    if (HasFailure()) break;
  }
  const int64_t after = RssKiB(server_->pid());
  EXPECT_LT(after - before, 32 * 1024) << "RSS " << before << " KiB -> " << after << " KiB";
  ExpectHealthy();
}

TEST_F(BadInputTest, MetadataAndConfigErrors) {
  auto stub = server_->Stub();
  inference::ModelMetadataRequest mreq;
  inference::ModelMetadataResponse mresp;
  mreq.set_name("no_such_model");
  grpc::Status s = stub->ModelMetadata(Context().get(), mreq, &mresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("unknown model 'no_such_model'"));
  mreq.set_name("add_sub");
  mreq.set_version("2");
  s = stub->ModelMetadata(Context().get(), mreq, &mresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("unknown version 2"));

  inference::ModelConfigRequest creq;
  inference::ModelConfigResponse cresp;
  creq.set_name("add_sub");
  creq.set_version("-1");
  s = stub->ModelConfig(Context().get(), creq, &cresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("not a positive integer"));

  inference::ModelReadyRequest rreq;
  inference::ModelReadyResponse rresp;
  rreq.set_name("add_sub");
  rreq.set_version("x");
  EXPECT_EQ(stub->ModelReady(Context().get(), rreq, &rresp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  inference::ModelStatisticsRequest sreq;
  inference::ModelStatisticsResponse sresp;
  sreq.set_name("no_such_model");
  EXPECT_EQ(stub->ModelStatistics(Context().get(), sreq, &sresp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ExpectHealthy();
}

TEST_F(BadInputTest, RepositoryErrors) {
  auto stub = server_->Stub();
  inference::RepositoryModelLoadRequest load;
  inference::RepositoryModelLoadResponse load_resp;
  load.set_model_name("no_such_model");
  grpc::Status s = stub->RepositoryModelLoad(Context().get(), load, &load_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("no model 'no_such_model'"));

  for (const char* bad : {"../models", "/etc", ".hidden", "a/b", ""}) {
    load.set_model_name(bad);
    s = stub->RepositoryModelLoad(Context().get(), load, &load_resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(s.error_message(), HasSubstr("not a valid model name")) << bad;
  }

  load.set_model_name("add_sub");
  (*load.mutable_parameters())["file:1/model.graph"].set_bytes_param("x");
  s = stub->RepositoryModelLoad(Context().get(), load, &load_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("file:"));

  load.clear_parameters();
  (*load.mutable_parameters())["config"].set_int64_param(1);
  s = stub->RepositoryModelLoad(Context().get(), load, &load_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("parameters[config]"));

  (*load.mutable_parameters())["config"].set_string_param("{not json");
  s = stub->RepositoryModelLoad(Context().get(), load, &load_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("parameters[config]"));

  inference::RepositoryModelUnloadRequest unload;
  inference::RepositoryModelUnloadResponse unload_resp;
  unload.set_model_name("no_such_model");
  s = stub->RepositoryModelUnload(Context().get(), unload, &unload_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  // add_sub still serves after the failed loads.
  inference::ModelReadyRequest rreq;
  inference::ModelReadyResponse rresp;
  rreq.set_name("add_sub");
  ASSERT_TRUE(stub->ModelReady(Context().get(), rreq, &rresp).ok());
  EXPECT_TRUE(rresp.ready());
  ExpectHealthy();
}

TEST_F(BadInputTest, UnimplementedRpcsSayUnimplemented) {
  inference::CudaSharedMemoryStatusResponse resp;
  EXPECT_EQ(server_->Stub()->CudaSharedMemoryStatus(Context().get(), {}, &resp).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace kiln::testing
