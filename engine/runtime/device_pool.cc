#include "engine/runtime/device_pool.h"

#include <algorithm>
#include <future>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::runtime {

std::unique_ptr<DevicePool> DevicePool::Discover(BackendRegistry& registry) {
  std::unique_ptr<DevicePool> pool(new DevicePool());
  for (const std::string& kind : registry.ListDevices()) {
    if (kind == "NULL" || kind == "INTERP") continue;
    for (int i = 0; i < kMaxPerKind; ++i) {
      const std::string name = kind == "CPU" ? std::string("CPU") : absl::StrCat(kind, ":", i);
      absl::StatusOr<Device*> d = registry.GetDevice(name);
      if (!d.ok() || !(*d)->executes()) break;
      pool->names_.push_back(name);
      pool->devices_.emplace(name, *d);
      if (kind == "CPU") break;
    }
  }
  for (const std::string& n : pool->names_) {
    auto ex = std::make_unique<Executor>();
    Executor* e = ex.get();
    e->worker = std::thread([e] {
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock<std::mutex> lock(e->mu);
          e->cv.wait(lock, [e] { return e->stop || !e->queue.empty(); });
          if (e->queue.empty()) return;  // stop requested and nothing left
          task = std::move(e->queue.front());
          e->queue.pop_front();
        }
        task();
      }
    });
    pool->executors_.emplace(n, std::move(ex));
  }
  return pool;
}

DevicePool::~DevicePool() {
  for (auto& [name, e] : executors_) {
    {
      std::lock_guard<std::mutex> lock(e->mu);
      e->stop = true;
    }
    e->cv.notify_all();
  }
  for (auto& [name, e] : executors_) e->worker.join();
}

absl::StatusOr<std::string> DevicePool::Select(std::string_view spec) const {
  const std::string up = absl::AsciiStrToUpper(std::string(spec));
  std::string want;
  if (up == "GPU") {
    for (const char* kind : {"CUDA:", "CL:"})
      for (const std::string& n : names_)
        if (want.empty() && n.rfind(kind, 0) == 0) want = n;
    if (want.empty())
      return absl::NotFoundError(
          absl::StrCat("no GPU-class device (pool: ", absl::StrJoin(names_, ", "), ")"));
    return want;
  }
  auto parsed = BackendRegistry::ParseName(spec);
  if (!parsed.ok()) return parsed.status();
  want = parsed->kind == "CPU" ? (parsed->index == 0 ? "CPU" : parsed->canonical)
                               : absl::StrCat(parsed->kind, ":", parsed->index);
  if (!devices_.contains(want))
    return absl::NotFoundError(absl::StrCat(
        "device ", want, " is not on this machine (pool: ", absl::StrJoin(names_, ", "), ")"));
  return want;
}

absl::StatusOr<Device*> DevicePool::Get(std::string_view spec) const {
  absl::StatusOr<std::string> n = Select(spec);
  if (!n.ok()) return n.status();
  return devices_.at(*n);
}

absl::Status DevicePool::Run(std::string_view spec, std::function<absl::Status()> fn) {
  absl::StatusOr<std::string> n = Select(spec);
  if (!n.ok()) return n.status();
  Executor& e = *executors_.at(*n);
  auto done = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(e.mu);
    e.queue.push_back([fn = std::move(fn), done] { done->set_value(fn()); });
  }
  e.cv.notify_one();
  return result.get();
}

}  // namespace kiln::runtime
