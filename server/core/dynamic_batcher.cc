#include "server/core/dynamic_batcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

using Clock = DynamicBatcher::Clock;

QueuePolicy ToPolicy(const inference::ModelQueuePolicy& p) {
  QueuePolicy q;
  q.delay_on_timeout = p.timeout_action() == inference::ModelQueuePolicy::DELAY;
  q.default_timeout_us = p.default_timeout_microseconds();
  q.allow_timeout_override = p.allow_timeout_override();
  q.max_queue_size = p.max_queue_size();
  return q;
}

// Datatypes and non-batch dims of the inputs, in config order: requests merge only when equal.
std::string Signature(const InferTask& task, bool batching) {
  std::vector<std::pair<int, const InferInput*>> inputs;
  for (size_t i = 0; i < task.valid.inputs.size() && i < task.request.inputs.size(); ++i) {
    inputs.emplace_back(task.valid.inputs[i].config_index, &task.request.inputs[i]);
  }
  std::sort(inputs.begin(), inputs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string key;
  for (const auto& [index, in] : inputs) {
    absl::StrAppend(&key, index, ":", in->datatype, "[");
    for (size_t d = batching ? 1 : 0; d < in->shape.size(); ++d) absl::StrAppend(&key, in->shape[d], ",");
    absl::StrAppend(&key, "]");
  }
  return key;
}

}  // namespace

absl::StatusOr<BatchingPolicy> BatchingPolicy::FromConfig(const inference::ModelConfig& config) {
  const inference::ModelDynamicBatching& db = config.dynamic_batching();
  BatchingPolicy p;
  p.max_batch_size = std::max<int64_t>(0, config.max_batch_size());
  p.max_queue_delay_us = db.max_queue_delay_microseconds();
  p.preserve_ordering = db.preserve_ordering();
  for (int i = 0; i < db.preferred_batch_size_size(); ++i) {
    const int64_t size = db.preferred_batch_size(i);
    if (size < 1 || size > std::max<int64_t>(1, p.max_batch_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dynamic_batching.preferred_batch_size[", i, "]: ", size, " is outside [1, max_batch_size ",
          std::max<int64_t>(1, p.max_batch_size), "]"));
    }
    p.preferred.push_back(size);
  }
  std::sort(p.preferred.begin(), p.preferred.end());
  p.preferred.erase(std::unique(p.preferred.begin(), p.preferred.end()), p.preferred.end());
  constexpr uint64_t kMaxLevels = 1024;  // a queue per level: bounded
  if (db.priority_levels() > kMaxLevels) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic_batching.priority_levels: ",
                                                   db.priority_levels(), " exceeds the limit of ",
                                                   kMaxLevels));
  }
  p.priority_levels = std::max<uint32_t>(1, static_cast<uint32_t>(db.priority_levels()));
  if (db.priority_levels() == 0) {
    p.default_level = 1;
  } else if (db.default_priority_level() < 1 || db.default_priority_level() > db.priority_levels()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic_batching.default_priority_level: ", db.default_priority_level(),
        " is outside [1, priority_levels ", db.priority_levels(), "]"));
  } else {
    p.default_level = static_cast<uint32_t>(db.default_priority_level());
  }
  p.levels.assign(p.priority_levels, ToPolicy(db.default_queue_policy()));
  for (const auto& [level, policy] : db.priority_queue_policy()) {
    if (level < 1 || level > p.priority_levels || db.priority_levels() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dynamic_batching.priority_queue_policy: level ", level, " is outside [1, priority_levels ",
          db.priority_levels(), "]"));
    }
    p.levels[level - 1] = ToPolicy(policy);
  }
  return p;
}

absl::StatusOr<uint32_t> DynamicBatcher::LevelOf(uint64_t priority) const {
  if (priority == 0) return policy_.default_level;
  if (priority > policy_.priority_levels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters.priority: ", priority, " exceeds the model's priority_levels (",
        policy_.priority_levels, "; 1 is the highest, 0 the default)"));
  }
  return static_cast<uint32_t>(priority);
}

absl::StatusOr<bool> DynamicBatcher::Push(std::unique_ptr<InferTask>* task, Clock::time_point now) {
  absl::StatusOr<uint32_t> level = LevelOf((*task)->request.priority);
  if (!level.ok()) return level.status();
  const QueuePolicy& policy = policy_.levels[*level - 1];
  Entry e;
  e.signature = Signature(**task, policy_.max_batch_size > 0);
  e.rows = policy_.max_batch_size > 0 ? std::max<int64_t>(1, (*task)->valid.batch_size) : 1;
  e.enqueued = now;
  uint64_t timeout_us = policy.default_timeout_us;
  if (policy.allow_timeout_override && (*task)->request.timeout_us > 0) {
    timeout_us = static_cast<uint64_t>((*task)->request.timeout_us);
  }
  if (timeout_us > 0) e.timeout_at = now + std::chrono::microseconds(timeout_us);
  absl::MutexLock lock(&mu_);
  Level& l = levels_[*level - 1];
  if (policy.max_queue_size > 0 && l.waiting.size() + l.delayed.size() >= policy.max_queue_size) {
    return absl::UnavailableError(absl::StrCat(
        "model '", (*task)->model->name, "' version ", (*task)->model->version,
        ": exceeds the maximum queue size (dynamic_batching max_queue_size ", policy.max_queue_size,
        " at priority level ", *level, "); retry later"));
  }
  e.task = std::move(*task);
  l.waiting.push_back(std::move(e));
  ++queued_;
  arrived_.Signal();
  if (pulls_ >= max_pulls_) return false;
  ++pulls_;
  return true;
}

std::optional<Clock::time_point> DynamicBatcher::ExpireLocked(Clock::time_point now,
                                                              absl::Time wall_now, Step* step) {
  std::optional<Clock::time_point> earliest;
  for (size_t li = 0; li < levels_.size(); ++li) {
    Level& level = levels_[li];
    for (std::deque<Entry>* list : {&level.waiting, &level.delayed}) {
      for (auto it = list->begin(); it != list->end();) {
        const InferRequest& r = it->task->request;
        absl::Status refusal;
        // The deadline first: a transport cancels a call whose deadline passed, too.
        if (wall_now >= r.deadline) {
          refusal = absl::DeadlineExceededError("the request's deadline passed while it waited in the queue");
        } else if (r.cancellation != nullptr && r.cancellation->cancelled()) {
          refusal = absl::CancelledError("the request was cancelled while it waited in the queue");
        } else if (it->timeout_at.has_value() && now >= *it->timeout_at) {
          if (policy_.levels[li].delay_on_timeout) {
            it->timeout_at.reset();
            level.delayed.push_back(std::move(*it));
            it = list->erase(it);
            continue;
          }
          refusal = absl::UnavailableError(absl::StrCat(
              "request timeout expired: the request waited ",
              std::chrono::duration_cast<std::chrono::microseconds>(now - it->enqueued).count(),
              " us in the queue (dynamic_batching queue policy of priority level ", li + 1,
              ", timeout_action REJECT)"));
        }
        if (!refusal.ok()) {
          step->refused.emplace_back(std::move(it->task), std::move(refusal));
          --queued_;
          it = list->erase(it);
          continue;
        }
        if (it->timeout_at.has_value() && (!earliest || *it->timeout_at < *earliest)) {
          earliest = it->timeout_at;
        }
        ++it;
      }
    }
  }
  return earliest;
}

bool DynamicBatcher::EmptyLocked() const { return queued_ == 0; }

DynamicBatcher::Step DynamicBatcher::TryNext(Clock::time_point now, absl::Time wall_now) {
  absl::MutexLock lock(&mu_);
  return TryNextLocked(now, wall_now, /*flush=*/false);
}

DynamicBatcher::Step DynamicBatcher::TryNextLocked(Clock::time_point now, absl::Time wall_now,
                                                   bool flush) {
  Step step;
  const std::optional<Clock::time_point> timeout = ExpireLocked(now, wall_now, &step);
  if (EmptyLocked()) return step;
  // The candidate: levels in order, each level's waiting then delayed entries; the first entry's
  // signature; stop where the next entry would exceed max_batch_size.
  const int64_t max_rows = std::max<int64_t>(1, policy_.max_batch_size);
  std::vector<Entry*> chosen;
  std::vector<int64_t> prefix;  // rows after each chosen entry
  bool blocked = false;
  Clock::time_point oldest = Clock::time_point::max();
  for (Level& level : levels_) {
    for (std::deque<Entry>* list : {&level.waiting, &level.delayed}) {
      for (Entry& e : *list) {
        if (blocked) break;
        if (!chosen.empty() && e.signature != chosen.front()->signature) {
          if (policy_.preserve_ordering) blocked = true;
          continue;
        }
        const int64_t rows = prefix.empty() ? 0 : prefix.back();
        if (rows + e.rows > max_rows) {
          blocked = true;
          break;
        }
        chosen.push_back(&e);
        prefix.push_back(rows + e.rows);
        oldest = std::min(oldest, e.enqueued);
      }
    }
  }
  const int64_t rows = prefix.back();
  size_t take = 0;  // entries of `chosen` to send now
  const auto largest_preferred_prefix = [&]() -> size_t {
    for (size_t k = prefix.size(); k > 0; --k) {
      if (std::binary_search(policy_.preferred.begin(), policy_.preferred.end(), prefix[k - 1])) return k;
    }
    return chosen.size();
  };
  const Clock::time_point delay_end = oldest + std::chrono::microseconds(policy_.max_queue_delay_us);
  if (rows >= max_rows || blocked || flush || now >= delay_end) {
    take = chosen.size();
  } else if (!policy_.preferred.empty() && rows >= policy_.preferred.back()) {
    take = largest_preferred_prefix();
  } else {
    step.wake = timeout.has_value() ? std::min(*timeout, delay_end) : delay_end;
    return step;
  }
  for (size_t k = 0; k < take; ++k) {
    step.batch.push_back(std::move(chosen[k]->task));
    step.rows += chosen[k]->rows;
  }
  for (Level& level : levels_) {
    for (std::deque<Entry>* list : {&level.waiting, &level.delayed}) {
      std::erase_if(*list, [](const Entry& e) { return e.task == nullptr; });
    }
  }
  queued_ -= static_cast<int64_t>(take);
  return step;
}

DynamicBatcher::Step DynamicBatcher::Next(const std::atomic<bool>& stop) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    const Clock::time_point now = Clock::now();
    Step step = TryNextLocked(now, absl::Now(), stop.load(std::memory_order_acquire));
    if (!step.batch.empty() || !step.refused.empty() || !step.wake.has_value()) return step;
    const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(*step.wake - now);
    arrived_.WaitWithTimeout(&mu_, absl::FromChrono(wait));
  }
}

bool DynamicBatcher::ContinueOrStop() {
  absl::MutexLock lock(&mu_);
  if (!EmptyLocked()) return true;
  --pulls_;
  return false;
}

int64_t DynamicBatcher::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_;
}

}  // namespace kiln::server
