// Device lanes: FIFO queues and executors (inference_lanes.h).
#include "server/core/inference_lanes.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace kiln::server {

DeviceLane::DeviceLane(std::string device, std::unique_ptr<api::Engine> engine, int instance)
    : device_(std::move(device)), instance_(instance), engine_(std::move(engine)) {
  executor_ = std::thread([this] { ExecutorLoop(); });
}

DeviceLane::~DeviceLane() { Stop(); }

void DeviceLane::Submit(Work work, bool may_inline) {
  {
    absl::MutexLock lock(&mu_);
    if (!may_inline || busy_ || !queue_.empty()) {
      queue_.push_back(std::move(work));  // FIFO behind what runs or waits
      return;
    }
    busy_ = true;  // the device is ours: the executor waits until we release it
  }
  work();
}

int64_t DeviceLane::load() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size()) + (busy_ ? 1 : 0);
}

void DeviceLane::Release() {
  absl::MutexLock lock(&mu_);
  busy_ = false;
}

void DeviceLane::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (executor_.joinable()) executor_.join();
}

void DeviceLane::ExecutorLoop() {
  for (;;) {
    Work work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DeviceLane* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu_) {
            return !l->busy_ && (!l->queue_.empty() || l->stop_);
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    work();
  }
}

DeviceLane* DeviceLanes::Start(const std::string& device, std::unique_ptr<api::Engine> engine) {
  absl::MutexLock lock(&mu_);
  auto lane = std::make_unique<DeviceLane>(device, std::move(engine));
  DeviceLane* raw = lane.get();
  lanes_[{device, 0}] = std::move(lane);
  return raw;
}

DeviceLane* DeviceLanes::Find(const std::string& device, int instance) const {
  absl::MutexLock lock(&mu_);
  auto it = lanes_.find({device, instance});
  return it == lanes_.end() ? nullptr : it->second.get();
}

absl::StatusOr<DeviceLane*> DeviceLanes::For(const std::string& device, int instance) {
  absl::MutexLock lock(&mu_);
  if (auto it = lanes_.find({device, instance}); it != lanes_.end()) return it->second.get();
  // Engine creation (a device context) is rare; it runs under mu_ so one lane gets one.
  absl::StatusOr<std::unique_ptr<api::Engine>> engine = factory_(device);
  if (!engine.ok()) return engine.status();
  spdlog::info("device {} instance {}: engine and executor started", device, instance);
  auto lane = std::make_unique<DeviceLane>(device, *std::move(engine), instance);
  DeviceLane* raw = lane.get();
  lanes_.emplace(std::make_pair(device, instance), std::move(lane));
  return raw;
}

std::vector<std::string> DeviceLanes::Devices() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [key, lane] : lanes_) {
    if (key.second == 0) out.push_back(key.first);
  }
  return out;
}

std::vector<DeviceLane*> DeviceLanes::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<DeviceLane*> out;
  for (const auto& [key, lane] : lanes_) out.push_back(lane.get());
  return out;
}

void DeviceLanes::StopAll() {
  for (DeviceLane* lane : All()) lane->Stop();
}

}  // namespace kiln::server
