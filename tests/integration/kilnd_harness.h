// Test harness: starts a real kilnd process on a free loopback port and hands out stubs.
//
// KilndProcess::Start forks/execs the kilnd binary (path compiled in as KILN_KILND_PATH) with
// --grpc-address 127.0.0.1 --grpc-port 0 --port-file <tmp>, waits for the port file, then for
// ServerLive. Stop() sends SIGTERM and reaps the process; the destructor stops it if still up.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "inference/grpc_service.grpc.pb.h"

namespace kiln::testing {

// The bundled model repository (<repo>/models).
std::filesystem::path BundledModels();

// A fresh empty folder under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

class KilndProcess {
 public:
  // Starts kilnd with --model-repository `repository` plus `extra_flags`.
  static absl::StatusOr<std::unique_ptr<KilndProcess>> Start(
      const std::filesystem::path& repository, const std::vector<std::string>& extra_flags = {});
  ~KilndProcess();

  int port() const { return port_; }
  std::string address() const;
  pid_t pid() const { return pid_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  std::unique_ptr<inference::GRPCInferenceService::Stub> Stub() const;
  std::unique_ptr<grpc::health::v1::Health::Stub> HealthStub() const;

  // SIGTERM, then waits up to `timeout` for exit. Returns the exit status (WEXITSTATUS) or -1
  // if the process had to be killed (SIGKILL) or ended by a signal.
  int Stop(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Without a signal: waits up to `timeout` for the process to exit. -1 if it did not.
  int WaitExit(std::chrono::milliseconds timeout);
  bool running() const { return pid_ > 0; }

 private:
  KilndProcess() = default;

  pid_t pid_ = -1;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<TempDir> scratch_;
};

// A client context with a deadline of `seconds` from now.
std::unique_ptr<grpc::ClientContext> Context(int seconds = 10);

}  // namespace kiln::testing
