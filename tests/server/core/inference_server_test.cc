// InferenceServer in process, on real engines: placement by instance_group, one executor per
// device (concurrency across devices), inline execution when a device is idle (ordering, queue
// time, threads), shutdown, per-model queue limits, and model memory accounting. The models are
// copies of the bundled ones (models/add_sub, models/fashion_mnist) under new configs. Tests that
// need a second device use OpenCL (PoCL in CI) and skip where the machine has none.
#include "server/core/inference_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/api/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool HasCl() {
  static const bool has = [] {
    std::vector<std::string> d = api::ListDevices();
    return std::find(d.begin(), d.end(), "CL:0") != d.end();
  }();
  return has;
}

// A temporary model repository holding copies of bundled models under new names and configs.
class TempRepository {
 public:
  TempRepository() {
    std::random_device rd;
    root_ = fs::temp_directory_path() / ("kiln_server_test_" + std::to_string(rd()));
    fs::create_directories(root_);
  }
  ~TempRepository() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // models/<from> as <name>: its version folders, and its config without its name,
  // instance_group and dynamic_batching lines plus `extra` (e.g. an instance_group).
  void Add(const std::string& name, const std::string& from, const std::string& extra = "") {
    const fs::path src = fs::path(KILN_MODELS_DIR) / from;
    fs::create_directories(root_ / name);
    fs::copy(src / "1", root_ / name / "1", fs::copy_options::recursive);
    std::istringstream config(ReadFile(src / "config.pbtxt"));
    std::string out, line;
    while (std::getline(config, line)) {
      // The copies run unbatched unless `extra` says otherwise (add_sub's config batches).
      if (line.rfind("name:", 0) == 0 || line.rfind("instance_group", 0) == 0 ||
          line.rfind("dynamic_batching", 0) == 0) {
        continue;
      }
      out += line + "\n";
    }
    std::ofstream(root_ / name / "config.pbtxt") << out << extra << "\n";
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_;
};

// An inference request that owns the bytes its views point at.
struct OwnedRequest {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> raws;
  InferRequest request;
};

std::unique_ptr<OwnedRequest> AddSubRequest(const std::string& model, float a, float b) {
  auto r = std::make_unique<OwnedRequest>();
  r->shapes = {{1, 16}, {1, 16}};
  for (float v : {a, b}) {
    std::vector<float> data(16);
    for (int i = 0; i < 16; ++i) data[static_cast<size_t>(i)] = v + static_cast<float>(i);
    r->raws.emplace_back(reinterpret_cast<const char*>(data.data()), data.size() * 4);
  }
  r->request.model_name = model;
  const char* names[] = {"INPUT0", "INPUT1"};
  for (size_t i = 0; i < 2; ++i) {
    InferInput in;
    in.name = names[i];
    in.datatype = "FP32";
    in.shape = r->shapes[i];
    in.raw = r->raws[i];
    r->request.inputs.push_back(in);
  }
  r->request.raw_input_count = 2;
  return r;
}

std::unique_ptr<OwnedRequest> CnnRequest(const std::string& model, int64_t batch, uint32_t seed) {
  auto r = std::make_unique<OwnedRequest>();
  r->shapes = {{batch, 1, 28, 28}};
  std::vector<float> data(static_cast<size_t>(batch) * 784);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  for (float& v : data) v = dist(gen);
  r->raws.emplace_back(reinterpret_cast<const char*>(data.data()), data.size() * 4);
  r->request.model_name = model;
  InferInput in;
  in.name = "INPUT";
  in.datatype = "FP32";
  in.shape = r->shapes[0];
  in.raw = r->raws[0];
  r->request.inputs.push_back(in);
  r->request.raw_input_count = 1;
  return r;
}

std::vector<float> Floats(const InferOutput& out) {
  std::vector<float> v(out.raw.size() / 4);
  std::memcpy(v.data(), out.raw.data(), v.size() * 4);
  return v;
}

// Records what the server reports (the real server/metrics is one such sink).
class RecordingObserver : public InferObserver {
 public:
  void ObserveInfer(const InferObservation& o) override {
    absl::MutexLock l(&mu_);
    infers.push_back(o);
  }
  void ObserveKernels(const std::string&, absl::Span<const api::KernelTiming> kernels) override {
    absl::MutexLock l(&mu_);
    for (const auto& k : kernels) kernel_devices.push_back(k.device);
  }
  void ObservePending(const std::string& model, const std::string&, int delta) override {
    if (delta < 0) {
      {
        absl::MutexLock l(&mu_);
        started.push_back(model);
      }
      // A test that needs a request to hold the device while it queues others (on the executing thread, as the
      // request starts; see InlineWhenIdleQueuedBehindInArrivalOrder).
      if (hold_next_start.exchange(false)) release_start.WaitForNotification();
    }
  }
  void ObserveModels(absl::Span<const ModelMemoryObservation> loaded,
                     absl::Span<const api::DeviceMemoryUsage> devices) override {
    absl::MutexLock l(&mu_);
    models.assign(loaded.begin(), loaded.end());
    device_memory.assign(devices.begin(), devices.end());
  }
  void ObserveModelMemory(const ModelMemoryObservation& m) override {
    absl::MutexLock l(&mu_);
    for (auto& o : models) {
      if (o.model == m.model && o.version == m.version) o.bytes = m.bytes;
    }
  }
  size_t Started() {
    absl::MutexLock l(&mu_);
    return started.size();
  }
  template <typename F>
  auto Locked(F f) {
    absl::MutexLock l(&mu_);
    return f();
  }

  std::atomic<bool> hold_next_start{false};
  absl::Notification release_start;
  absl::Mutex mu_;
  std::vector<InferObservation> infers;
  std::vector<std::string> kernel_devices;
  std::vector<std::string> started;
  std::vector<ModelMemoryObservation> models;
  std::vector<api::DeviceMemoryUsage> device_memory;
};

std::unique_ptr<InferenceServer> Start(const TempRepository& repo, ServerOptions options = {}) {
  options.model_repository = repo.root();
  auto server = InferenceServer::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

void ExpectAddSub(const absl::StatusOr<InferResponse>& r, float a, float b) {
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs.size(), 2u);
  std::vector<float> sum = Floats(r->outputs[0]), diff = Floats(r->outputs[1]);
  ASSERT_EQ(sum.size(), 16u);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(sum[static_cast<size_t>(i)], (a + i) + (b + i));
    EXPECT_EQ(diff[static_cast<size_t>(i)], (a + i) - (b + i));
  }
}

// ---- placement ----

TEST(InferenceServerPlacementTest, KindCpuDefaultAndMissingGpu) {
  TempRepository repo;
  repo.Add("cpu_add", "add_sub", "instance_group [{ kind: KIND_CPU count: 1 }]");
  repo.Add("auto_add", "add_sub");
  repo.Add("missing_gpu", "add_sub", "instance_group [{ kind: KIND_GPU gpus: [ 7 ] }]");
  auto server = Start(repo);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->default_device(), "CPU");
  EXPECT_EQ(*server->ModelDevice("cpu_add", ""), "CPU");
  EXPECT_EQ(*server->ModelDevice("auto_add", ""), "CPU");
  // The config echoes the placement (Triton fills instance_group in).
  auto config = server->GetModelConfig("auto_add", "");
  ASSERT_TRUE(config.ok());
  ASSERT_EQ((*config)->instance_group_size(), 1);
  EXPECT_EQ((*config)->instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);

  EXPECT_FALSE(*server->ModelReady("missing_gpu", ""));
  bool found = false;
  for (const RepositoryIndexEntry& e : server->RepositoryIndex(false)) {
    if (e.name != "missing_gpu") continue;
    found = true;
    EXPECT_EQ(e.state, "UNAVAILABLE");
    EXPECT_THAT(e.reason, HasSubstr("instance_group[0].gpus: GPU 7 does not exist"));
    EXPECT_THAT(e.reason, HasSubstr("CPU"));
  }
  EXPECT_TRUE(found);
  absl::Status load = server->LoadModel("missing_gpu", {});
  EXPECT_EQ(load.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(load.message()),
              HasSubstr("instance_group[0].gpus: GPU 7 does not exist"));
  // A bad config through the load API is refused the same way, and the daemon keeps serving.
  LoadOptions bad;
  bad.config_json = R"({"platform": "kiln_graph", "max_batch_size": 8,
      "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]},
                {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [16]}],
      "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]},
                 {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]}],
      "instance_group": [{"kind": "KIND_GPU", "gpus": [99]}]})";
  load = server->LoadModel("cpu_add", bad);
  EXPECT_EQ(load.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(load.message()), HasSubstr("instance_group[0].gpus: GPU 99"));
  auto r = AddSubRequest("cpu_add", 1.5f, 2.0f);
  ExpectAddSub(server->Infer(r->request), 1.5f, 2.0f);
}

TEST(InferenceServerPlacementTest, KindGpuZeroRunsOnOpenCl) {
  if (!HasCl()) GTEST_SKIP() << "needs an OpenCL device (pocl-opencl-icd)";
  TempRepository repo;
  repo.Add("cpu_add", "add_sub", "instance_group [{ kind: KIND_CPU }]");
  repo.Add("gpu_add", "add_sub", "instance_group [{ kind: KIND_GPU gpus: [ 0 ] }]");
  repo.Add("gpu_cnn", "fashion_mnist", "instance_group [{ kind: KIND_GPU }]");
  auto server = Start(repo);
  ASSERT_NE(server, nullptr);
  RecordingObserver observer;
  server->SetObserver(&observer);
  EXPECT_EQ(*server->ModelDevice("gpu_add", ""), "CL:0");
  EXPECT_EQ(*server->ModelDevice("gpu_cnn", ""), "CL:0");
  EXPECT_EQ(*server->ModelDevice("cpu_add", ""), "CPU");
  EXPECT_THAT(server->ActiveDevices(), ElementsAre("CL:0", "CPU"));
  auto config = server->GetModelConfig("gpu_add", "");
  ASSERT_TRUE(config.ok());
  ASSERT_EQ((*config)->instance_group_size(), 1);
  EXPECT_EQ((*config)->instance_group(0).kind(), inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_THAT((*config)->instance_group(0).gpus(), ElementsAre(0));

  auto on_cl = AddSubRequest("gpu_add", 3.0f, -1.25f);
  ExpectAddSub(server->Infer(on_cl->request), 3.0f, -1.25f);
  std::vector<std::string> devices = observer.Locked([&] { return observer.kernel_devices; });
  ASSERT_FALSE(devices.empty());
  EXPECT_THAT(devices, ::testing::Each(std::string("CL:0")));

  observer.Locked([&] {
    observer.kernel_devices.clear();
    return 0;
  });
  auto on_cpu = AddSubRequest("cpu_add", 3.0f, -1.25f);
  ExpectAddSub(server->Infer(on_cpu->request), 3.0f, -1.25f);
  devices = observer.Locked([&] { return observer.kernel_devices; });
  ASSERT_FALSE(devices.empty());
  EXPECT_THAT(devices, ::testing::Each(std::string("CPU")));

  // The builtin CNN on CL answers like the CPU engine (same weights, same input).
  auto cnn = CnnRequest("gpu_cnn", 2, 5);
  absl::StatusOr<InferResponse> got = server->Infer(cnn->request);
  ASSERT_TRUE(got.ok()) << got.status();
  auto cpu_engine = api::Engine::Create({});
  ASSERT_TRUE(cpu_engine.ok());
  auto model =
      (*cpu_engine)
          ->LoadBuiltin("mnist_cnn",
                        (fs::path(KILN_MODELS_DIR) / "fashion_mnist/1/model.safetensors").string());
  ASSERT_TRUE(model.ok()) << model.status();
  api::HostTensorView view{"float32", {2, 1, 28, 28}, cnn->raws[0]};
  auto want = (*cpu_engine)->RunBuiltin(**model, view);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<float> g = Floats(got->outputs[0]);
  std::vector<float> w(want->outputs[0].data.size() / 4);
  std::memcpy(w.data(), want->outputs[0].data.data(), w.size() * 4);
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-4f * (1 + std::abs(w[i])));
}

TEST(InferenceServerPlacementTest, DeviceFlagIsTheDefaultOnly) {
  if (!HasCl()) GTEST_SKIP() << "needs an OpenCL device (pocl-opencl-icd)";
  TempRepository repo;
  repo.Add("cpu_add", "add_sub", "instance_group [{ kind: KIND_CPU }]");
  repo.Add("auto_add", "add_sub", "instance_group [{ kind: KIND_AUTO }]");
  ServerOptions options;
  options.device = "cl";
  auto server = Start(repo, options);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->default_device(), "CL:0");
  EXPECT_EQ(*server->ModelDevice("auto_add", ""), "CL:0");
  EXPECT_EQ(*server->ModelDevice("cpu_add", ""), "CPU");
  auto config = server->GetModelConfig("auto_add", "");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ((*config)->instance_group(0).kind(), inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_THAT((*config)->instance_group(0).gpus(), ElementsAre(0));
  auto r = AddSubRequest("auto_add", 0.5f, 0.25f);
  ExpectAddSub(server->Infer(r->request), 0.5f, 0.25f);
}

// ---- executors ----

// With one executor for every device, a CL request sent behind a queue of slow CPU requests
// would answer after all of them; with one executor per device it answers while they still run.
TEST(InferenceServerExecutorTest, DevicesRunConcurrently) {
  if (!HasCl()) GTEST_SKIP() << "needs an OpenCL device (pocl-opencl-icd)";
  TempRepository repo;
  repo.Add("cpu_cnn", "fashion_mnist", "instance_group [{ kind: KIND_CPU }]");
  repo.Add("gpu_add", "add_sub", "instance_group [{ kind: KIND_GPU gpus: [ 0 ] }]");
  ServerOptions options;
  options.inline_execution = false;  // every request goes through its device's queue
  auto server = Start(repo, options);
  ASSERT_NE(server, nullptr);
  auto warm_cl = AddSubRequest("gpu_add", 1, 2);
  ExpectAddSub(server->Infer(warm_cl->request), 1, 2);
  std::vector<std::unique_ptr<OwnedRequest>> cnn;
  for (int i = 0; i < 3; ++i) {  // compile, capture, replay: later runs are steady
    cnn.push_back(CnnRequest("cpu_cnn", 64, static_cast<uint32_t>(i)));
    ASSERT_TRUE(server->Infer(cnn.back()->request).ok());
  }
  constexpr int kQueued = 12;
  std::atomic<int> cpu_done{0};
  for (int i = 0; i < kQueued; ++i) {
    cnn.push_back(CnnRequest("cpu_cnn", 64, static_cast<uint32_t>(10 + i)));
    server->InferAsync(cnn.back()->request, [&](absl::StatusOr<InferResponse> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      cpu_done.fetch_add(1);
    });
  }
  auto on_cl = AddSubRequest("gpu_add", 4, 5);
  ExpectAddSub(server->Infer(on_cl->request), 4, 5);
  const int done_when_cl_answered = cpu_done.load();
  EXPECT_LT(done_when_cl_answered, kQueued) << "the CL request waited for the CPU queue";
  while (cpu_done.load() < kQueued) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// Inline when idle: the first request runs on its caller's thread with ~0 queue time; requests
// that arrive while it runs queue behind it, run on the executor after it, in arrival order, and
// wait longer in the queue than it did.
TEST(InferenceServerExecutorTest, InlineWhenIdleQueuedBehindInArrivalOrder) {
  TempRepository repo;
  repo.Add("cnn", "fashion_mnist");
  ServerOptions options;
  options.inline_max_compute_us = 60'000'000;  // the slow batch-64 request may run inline too
  auto server = Start(repo, options);
  ASSERT_NE(server, nullptr);
  RecordingObserver observer;
  server->SetObserver(&observer);
  auto warm = CnnRequest("cnn", 64, 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(server->Infer(warm->request).ok());
  const size_t started_before = observer.Started();
  observer.Locked([&] {
    observer.infers.clear();
    return 0;
  });

  absl::Mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads(6);
  auto first = CnnRequest("cnn", 64, 2);
  std::thread::id first_caller;
  // Request 0 holds the device until the others are queued: with fast kernels its batch of 64 had finished
  // before request 1 was sent, which then ran inline on an idle device (seen under load).
  observer.hold_next_start = true;
  std::thread inline_caller([&] {
    first_caller = std::this_thread::get_id();
    server->InferAsync(first->request, [&](absl::StatusOr<InferResponse> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      absl::MutexLock l(&mu);
      order.push_back(0);
      threads[0] = std::this_thread::get_id();
    });
  });
  // Wait until the first request executes, then send the rest while it does.
  while (observer.Started() == started_before) std::this_thread::yield();
  std::vector<std::unique_ptr<OwnedRequest>> rest;
  for (int i = 1; i < 6; ++i) {
    rest.push_back(CnnRequest("cnn", 1, static_cast<uint32_t>(100 + i)));
    server->InferAsync(rest.back()->request, [&, i](absl::StatusOr<InferResponse> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      absl::MutexLock l(&mu);
      order.push_back(i);
      threads[static_cast<size_t>(i)] = std::this_thread::get_id();
    });
  }
  observer.release_start.Notify();
  inline_caller.join();
  for (;;) {
    absl::MutexLock l(&mu);
    if (order.size() == 6) break;
    mu.AwaitWithTimeout(absl::Condition(
                            +[](std::vector<int>* o) { return o->size() == 6; }, &order),
                        absl::Seconds(30));
  }
  absl::MutexLock l(&mu);
  // Request 0 held the device from before the others were sent; they ran after it, in arrival
  // order, on the one executor (each answers before the next starts). Request 0's answer comes
  // after it releases the device, so it may be written after request 1's: ordering answers
  // across threads is the transport's job (ModelStreamInfer reorders).
  std::vector<int> queued_order;
  for (int i : order) {
    if (i != 0) queued_order.push_back(i);
  }
  EXPECT_THAT(queued_order, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_EQ(threads[0], first_caller) << "the idle device's request did not run inline";
  for (int i = 1; i < 6; ++i) {
    EXPECT_NE(threads[static_cast<size_t>(i)], std::this_thread::get_id())
        << "request " << i << " ran inline while the device was busy";
    EXPECT_NE(threads[static_cast<size_t>(i)], first_caller);
  }
  std::vector<InferObservation> infers = observer.Locked([&] { return observer.infers; });
  ASSERT_EQ(infers.size(), 6u);
  std::sort(infers.begin(), infers.end(),
            [](const auto& a, const auto& b) { return a.batch_size > b.batch_size; });
  EXPECT_EQ(infers[0].batch_size, 64u);
  // Inline means no queue: its queue time is below every queued request's (which waited for it), with no
  // wall-clock bound (a loaded CI machine took 4 ms to schedule the inline caller's thread).
  for (size_t i = 1; i < infers.size(); ++i) {
    EXPECT_GT(infers[i].queue_ns, infers[0].queue_ns) << "a queued request waited less";
  }
  // Statistics agree: 3 warm-ups + 6, every one a success.
  auto stats = server->Statistics("cnn", "1");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].stats.success.count, 9u);
  EXPECT_EQ((*stats)[0].stats.queue.count, 9u);
}

// The thread `done` ran on for one synchronous-looking InferAsync from this thread.
std::thread::id DoneThread(InferenceServer& server, const InferRequest& request) {
  absl::Notification finished;
  std::thread::id where;
  server.InferAsync(request, [&](absl::StatusOr<InferResponse> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    where = std::this_thread::get_id();
    finished.Notify();
  });
  finished.WaitForNotification();
  return where;
}

// Only requests known to be short run inline: a version's first request (its runs compile) and
// requests whose expected engine time exceeds inline_max_compute_us go to the executor.
TEST(InferenceServerExecutorTest, InlineOnlyForShortKnownRequests) {
  TempRepository repo;
  repo.Add("add", "add_sub");
  repo.Add("cnn", "fashion_mnist");
  ServerOptions options;
  options.inline_max_compute_us = 60'000'000;
  auto server = Start(repo, options);
  ASSERT_NE(server, nullptr);
  const std::thread::id me = std::this_thread::get_id();
  auto add = AddSubRequest("add", 1, 2);
  EXPECT_NE(DoneThread(*server, add->request), me) << "a first (compiling) request ran inline";
  EXPECT_EQ(DoneThread(*server, add->request), me) << "a known short request on an idle device";

  options.inline_max_compute_us = 1;  // nothing is that short
  auto strict = Start(repo, options);
  ASSERT_NE(strict, nullptr);
  auto cnn = CnnRequest("cnn", 4, 1);
  for (int i = 0; i < 3; ++i) EXPECT_NE(DoneThread(*strict, cnn->request), me);
}

TEST(InferenceServerExecutorTest, ShutdownRefusesNewWorkAndFinishesAdmitted) {
  TempRepository repo;
  repo.Add("cnn", "fashion_mnist");
  ServerOptions options;
  options.inline_execution = false;
  auto server = Start(repo, options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<OwnedRequest>> requests;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    requests.push_back(CnnRequest("cnn", 16, static_cast<uint32_t>(i)));
    server->InferAsync(requests.back()->request, [&](absl::StatusOr<InferResponse> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      ok.fetch_add(1);
    });
  }
  server->BeginShutdown();
  auto late = CnnRequest("cnn", 1, 99);
  absl::StatusOr<InferResponse> refused = server->Infer(late->request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  server.reset();  // the destructor runs what was admitted
  EXPECT_EQ(ok.load(), 6);
}

TEST(InferenceServerExecutorTest, PerModelQueueLimitHolds) {
  TempRepository repo;
  repo.Add("cnn", "fashion_mnist");
  ServerOptions options;
  options.inline_execution = false;
  options.max_queue_size = 2;
  auto server = Start(repo, options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<OwnedRequest>> requests;
  std::atomic<int> ok{0}, exhausted{0};
  for (int i = 0; i < 8; ++i) {
    requests.push_back(CnnRequest("cnn", 64, static_cast<uint32_t>(i)));
    server->InferAsync(requests.back()->request, [&](absl::StatusOr<InferResponse> r) {
      if (r.ok()) ok.fetch_add(1);
      if (r.status().code() == absl::StatusCode::kResourceExhausted) {
        EXPECT_THAT(r.status().message(), HasSubstr("max_queue_size 2"));
        exhausted.fetch_add(1);
      }
    });
  }
  server.reset();
  EXPECT_EQ(ok.load() + exhausted.load(), 8);
  // At most one running and two waiting when the eighth arrives.
  EXPECT_GE(exhausted.load(), 1);
  EXPECT_LE(ok.load(), 7);
}

// ---- memory ----

// Bytes of tensor data in a safetensors file: its size minus the 8-byte length and the header.
uint64_t SafetensorsDataBytes(const fs::path& p) {
  std::string bytes = ReadFile(p);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  return bytes.size() - 8 - header;
}

TEST(InferenceServerMemoryTest, BuiltinWeightsAndTracesGraphZeroUnloadRemoves) {
  TempRepository repo;
  repo.Add("cnn", "fashion_mnist");
  repo.Add("add", "add_sub");
  auto server = Start(repo);
  ASSERT_NE(server, nullptr);
  RecordingObserver observer;
  server->SetObserver(&observer);  // publishes the loaded versions at once
  const uint64_t weights =
      SafetensorsDataBytes(fs::path(KILN_MODELS_DIR) / "fashion_mnist/1/model.safetensors");
  auto find = [&](const std::string& model) {
    return observer.Locked([&]() -> std::optional<ModelMemoryObservation> {
      for (const auto& m : observer.models) {
        if (m.model == model) return m;
      }
      return std::nullopt;
    });
  };
  std::optional<ModelMemoryObservation> cnn = find("cnn");
  ASSERT_TRUE(cnn.has_value());
  EXPECT_EQ(cnn->device, "CPU");
  EXPECT_EQ(cnn->version, "1");
  // Weights are float32 in the file and on the device (BatchNorm's counters may add a little).
  EXPECT_GE(cnn->bytes, weights);
  EXPECT_LT(cnn->bytes, weights + 4096);
  std::optional<ModelMemoryObservation> add = find("add");
  ASSERT_TRUE(add.has_value());
  EXPECT_EQ(add->bytes, 0u);
  uint64_t device_bytes = observer.Locked([&] {
    uint64_t b = 0;
    for (const auto& d : observer.device_memory) {
      if (d.device == "CPU") b = d.bytes;
    }
    return b;
  });
  EXPECT_GE(device_bytes, cnn->bytes);

  // Run, capture, replay: the captured trace holds its intermediates and output (batch 8).
  auto r = CnnRequest("cnn", 8, 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(server->Infer(r->request).ok());
  const uint64_t after = find("cnn")->bytes;
  EXPECT_GT(after, cnn->bytes + 8 * 10 * 4) << "the JIT trace's buffers are not counted";
  std::vector<ModelMemoryObservation> direct = server->ModelMemory();  // by name: add, cnn
  ASSERT_EQ(direct.size(), 2u);
  EXPECT_EQ(direct[1].model, "cnn");
  EXPECT_EQ(direct[1].bytes, after);
  ASSERT_TRUE(server->UnloadModel("cnn").ok());
  EXPECT_FALSE(find("cnn").has_value());
  EXPECT_TRUE(find("add").has_value());
}

}  // namespace
}  // namespace kiln::server
