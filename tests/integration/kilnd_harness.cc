#include "tests/integration/kilnd_harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace kiln::testing {

std::filesystem::path BundledModels() { return KILN_MODELS_DIR; }

TempDir::TempDir() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() / absl::StrCat("kiln_test_", getpid(), "_", rd());
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::unique_ptr<grpc::ClientContext> Context(int seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

absl::StatusOr<std::unique_ptr<KilndProcess>> KilndProcess::Start(
    const std::filesystem::path& repository, const std::vector<std::string>& extra_flags) {
  std::unique_ptr<KilndProcess> p(new KilndProcess());
  p->scratch_ = std::make_unique<TempDir>();
  const std::filesystem::path port_file = p->scratch_->path() / "port";
  std::vector<std::string> args = {KILN_KILND_PATH, "--model-repository=" + repository.string(),
                                   "--grpc-address=127.0.0.1", "--grpc-port=0", "--http-port=0",
                                   "--port-file=" + port_file.string()};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  p->pid_ = pid;

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      p->pid_ = -1;
      return absl::InternalError(absl::StrCat("kilnd exited early with status ", status));
    }
    std::ifstream in(port_file);
    if (in >> p->port_ && p->port_ > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (p->port_ <= 0) return absl::DeadlineExceededError("kilnd did not write its port file");

  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(INT_MAX);
  channel_args.SetMaxSendMessageSize(INT_MAX);
  p->channel_ =
      grpc::CreateCustomChannel(p->address(), grpc::InsecureChannelCredentials(), channel_args);
  if (!p->channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    return absl::DeadlineExceededError("kilnd did not accept a connection");
  }
  return p;
}

KilndProcess::~KilndProcess() {
  if (pid_ > 0) Stop(std::chrono::seconds(10));
}

std::string KilndProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

std::unique_ptr<inference::GRPCInferenceService::Stub> KilndProcess::Stub() const {
  return inference::GRPCInferenceService::NewStub(channel_);
}

std::unique_ptr<grpc::health::v1::Health::Stub> KilndProcess::HealthStub() const {
  return grpc::health::v1::Health::NewStub(channel_);
}

int KilndProcess::WaitExit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int KilndProcess::Stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  channel_.reset();  // close our idle connection so the drain does not wait for it
  kill(pid_, SIGTERM);
  const int code = WaitExit(timeout);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
  }
  return code;
}

}  // namespace kiln::testing
