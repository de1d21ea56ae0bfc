// DynamicBatcher's policy on its own, with an injected clock: batch formation (max_batch_size,
// the delay, preferred sizes), shapes that must not merge (with and without preserve_ordering),
// priority levels, queue timeouts (REJECT vs DELAY, the request's override), max_queue_size,
// cancelled and expired requests, and the pull flag. The expected batches follow from Triton's
// documented dynamic_batching semantics (docs: "Dynamic Batcher", "Queue Policy").
#include "server/core/dynamic_batcher.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using Clock = DynamicBatcher::Clock;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using std::chrono::microseconds;

inference::ModelConfig Config(const std::string& text) {
  inference::ModelConfig c;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &c)) << text;
  return c;
}

DynamicBatcher Make(const std::string& text) {
  absl::StatusOr<BatchingPolicy> p = BatchingPolicy::FromConfig(Config(text));
  EXPECT_TRUE(p.ok()) << p.status();
  return DynamicBatcher(*p);
}

// A queued request: `rows` of a [rows, width] FP32 input; its id names it.
struct Fixture {
  std::shared_ptr<ModelVersion> model = [] {
    auto m = std::make_shared<ModelVersion>();
    m->name = "m";
    m->version = 1;
    return m;
  }();
  std::vector<std::unique_ptr<std::vector<int64_t>>> shapes;

  std::unique_ptr<InferTask> Task(const std::string& id, int64_t rows, int64_t width = 4,
                                  uint64_t priority = 0, int64_t timeout_us = 0) {
    auto t = std::make_unique<InferTask>();
    t->model = model;
    t->request.id = id;
    t->request.priority = priority;
    t->request.timeout_us = timeout_us;
    shapes.push_back(std::make_unique<std::vector<int64_t>>(std::vector<int64_t>{rows, width}));
    InferInput in;
    in.name = "X";
    in.datatype = "FP32";
    in.shape = *shapes.back();
    t->request.inputs.push_back(in);
    t->valid.batch_size = rows;
    t->valid.inputs.push_back({0, rows * width, rows * width * 4});
    return t;
  }
};

std::vector<std::string> Ids(const DynamicBatcher::Step& s) {
  std::vector<std::string> ids;
  for (const auto& t : s.batch) ids.push_back(t->request.id);
  return ids;
}

std::vector<std::string> RefusedIds(const DynamicBatcher::Step& s) {
  std::vector<std::string> ids;
  for (const auto& [t, status] : s.refused) ids.push_back(t->request.id);
  return ids;
}

bool Push(DynamicBatcher& b, std::unique_ptr<InferTask> t, Clock::time_point now) {
  absl::StatusOr<bool> r = b.Push(&t, now);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() && *r;
}

const absl::Time kWall = absl::Now();

TEST(DynamicBatcher, WaitsForTheDelayThenSendsWhatIsQueued) {
  Fixture f;
  DynamicBatcher b = Make("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 1000 }");
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(Push(b, f.Task("a", 1), t0));   // the first push asks for a pull
  EXPECT_FALSE(Push(b, f.Task("b", 2), t0 + microseconds(100)));  // one is scheduled
  DynamicBatcher::Step s = b.TryNext(t0 + microseconds(500), kWall);
  EXPECT_TRUE(s.batch.empty());
  ASSERT_TRUE(s.wake.has_value());
  EXPECT_EQ(*s.wake, t0 + microseconds(1000));  // the oldest request's delay
  s = b.TryNext(t0 + microseconds(1000), kWall);
  EXPECT_THAT(Ids(s), ElementsAre("a", "b"));
  EXPECT_EQ(s.rows, 3);
  EXPECT_FALSE(b.ContinueOrStop());  // empty: the pull ends, the next push asks again
  EXPECT_TRUE(Push(b, f.Task("c", 1), t0 + microseconds(2000)));
}

TEST(DynamicBatcher, AFullBatchGoesAtOnceAndTheRestWaits) {
  Fixture f;
  DynamicBatcher b = Make("max_batch_size: 4 dynamic_batching { max_queue_delay_microseconds: 1000000 }");
  const Clock::time_point t0 = Clock::now();
  for (const char* id : {"a", "b", "c"}) Push(b, f.Task(id, 1), t0);
  Push(b, f.Task("d", 2), t0);  // does not fit beside a, b, c (4 rows max)
  DynamicBatcher::Step s = b.TryNext(t0, kWall);
  EXPECT_THAT(Ids(s), ElementsAre("a", "b", "c"));  // blocked by d: cannot grow, sent now
  EXPECT_TRUE(b.ContinueOrStop());
  Push(b, f.Task("e", 2), t0);
  s = b.TryNext(t0, kWall);
  EXPECT_THAT(Ids(s), ElementsAre("d", "e"));  // exactly max_batch_size rows
  EXPECT_EQ(s.rows, 4);
}

TEST(DynamicBatcher, ZeroDelaySendsImmediately) {
  Fixture f;
  DynamicBatcher b = Make("max_batch_size: 8 dynamic_batching { }");
  const Clock::time_point t0 = Clock::now();
  Push(b, f.Task("a", 1), t0);
  Push(b, f.Task("b", 1), t0);
  EXPECT_THAT(Ids(b.TryNext(t0, kWall)), ElementsAre("a", "b"));
}

TEST(DynamicBatcher, PreferredSizeSentWithoutWaiting) {
  Fixture f;
  DynamicBatcher b = Make(
      "max_batch_size: 16 dynamic_batching { preferred_batch_size: [2, 4] "
      "max_queue_delay_microseconds: 1000000 }");
  const Clock::time_point t0 = Clock::now();
  for (const char* id : {"a", "b", "c"}) Push(b, f.Task(id, 1), t0);
  EXPECT_TRUE(b.TryNext(t0, kWall).batch.empty());  // 3 rows: below the largest preferred size
  Push(b, f.Task("d", 1), t0);
  Push(b, f.Task("e", 1), t0);
  DynamicBatcher::Step s = b.TryNext(t0, kWall);  // 5 rows queued: the largest preferred prefix
  EXPECT_THAT(Ids(s), ElementsAre("a", "b", "c", "d"));
  s = b.TryNext(t0 + microseconds(1000000), kWall);  // e alone, once its delay ends
  EXPECT_THAT(Ids(s), ElementsAre("e"));
}

TEST(DynamicBatcher, DifferentShapesNeverMerge) {
  Fixture f;
  DynamicBatcher b = Make("max_batch_size: 8 dynamic_batching { }");
  const Clock::time_point t0 = Clock::now();
  Push(b, f.Task("a", 1, 4), t0);
  Push(b, f.Task("wide", 1, 5), t0);
  Push(b, f.Task("b", 1, 4), t0);
  EXPECT_THAT(Ids(b.TryNext(t0, kWall)), ElementsAre("a", "b"));  // wide is skipped ...
  EXPECT_THAT(Ids(b.TryNext(t0, kWall)), ElementsAre("wide"));    // ... and runs next
}

TEST(DynamicBatcher, PreserveOrderingStopsAtADifferentShape) {
  Fixture f;
  DynamicBatcher b = Make("max_batch_size: 8 dynamic_batching { preserve_ordering: true }");
  const Clock::time_point t0 = Clock::now();
  Push(b, f.Task("a", 1, 4), t0);
  Push(b, f.Task("wide", 1, 5), t0);
  Push(b, f.Task("b", 1, 4), t0);
  EXPECT_THAT(Ids(b.TryNext(t0, kWall)), ElementsAre("a"));
  EXPECT_THAT(Ids(b.TryNext(t0, kWall)), ElementsAre("wide"));
  EXPECT_THAT(Ids(b.TryNext(t0, kWall)), ElementsAre("b"));
}

TEST(DynamicBatcher, HigherPriorityFirst) {
  Fixture f;
  DynamicBatcher b = Make(
      "max_batch_size: 2 dynamic_batching { priority_levels: 3 default_priority_level: 2 }");
  const Clock::time_point t0 = Clock::now();
  Push(b, f.Task("low", 1, 4, 3), t0);
  Push(b, f.Task("default", 1, 4, 0), t0);
  Push(b, f.Task("high", 1, 4, 1), t0);
  EXPECT_THAT(Ids(b.TryNext(t0, kWall)), ElementsAre("high", "default"));
  EXPECT_THAT(Ids(b.TryNext(t0, kWall)), ElementsAre("low"));
  EXPECT_THAT(b.LevelOf(4).status().message(), HasSubstr("parameters.priority: 4 exceeds"));
}

TEST(DynamicBatcher, QueueTimeoutRejectOrDelay) {
  Fixture f;
  DynamicBatcher reject = Make(
      "max_batch_size: 1 dynamic_batching { max_queue_delay_microseconds: 0 default_queue_policy { "
      "timeout_action: REJECT default_timeout_microseconds: 100 } }");
  const Clock::time_point t0 = Clock::now();
  Push(reject, f.Task("a", 1), t0);
  Push(reject, f.Task("b", 1), t0);
  EXPECT_THAT(Ids(reject.TryNext(t0, kWall)), ElementsAre("a"));
  DynamicBatcher::Step s = reject.TryNext(t0 + microseconds(100), kWall);  // b timed out
  EXPECT_TRUE(s.batch.empty());
  EXPECT_THAT(RefusedIds(s), ElementsAre("b"));
  EXPECT_TRUE(absl::IsUnavailable(s.refused[0].second));
  EXPECT_THAT(s.refused[0].second.message(), HasSubstr("request timeout expired"));

  DynamicBatcher delay = Make(
      "max_batch_size: 1 dynamic_batching { default_queue_policy { timeout_action: DELAY "
      "default_timeout_microseconds: 100 } }");
  Push(delay, f.Task("old", 1), t0);
  Push(delay, f.Task("young", 1), t0 + microseconds(90));
  // At 150 us "old" timed out under DELAY: it goes behind "young", which has not.
  EXPECT_THAT(Ids(delay.TryNext(t0 + microseconds(150), kWall)), ElementsAre("young"));
  s = delay.TryNext(t0 + microseconds(150), kWall);
  EXPECT_THAT(Ids(s), ElementsAre("old"));  // delayed, never refused
  EXPECT_TRUE(s.refused.empty());
}

TEST(DynamicBatcher, RequestTimeoutOverridesOnlyWhenAllowed) {
  Fixture f;
  const Clock::time_point t0 = Clock::now();
  DynamicBatcher allowed = Make(
      "max_batch_size: 1 dynamic_batching { default_queue_policy { allow_timeout_override: true "
      "default_timeout_microseconds: 1000000 } }");
  Push(allowed, f.Task("busy", 1), t0);
  Push(allowed, f.Task("hurry", 1, 4, 0, /*timeout_us=*/50), t0);
  allowed.TryNext(t0, kWall);  // "busy" runs
  EXPECT_THAT(RefusedIds(allowed.TryNext(t0 + microseconds(60), kWall)), ElementsAre("hurry"));

  DynamicBatcher ignored = Make(
      "max_batch_size: 1 dynamic_batching { default_queue_policy { default_timeout_microseconds: "
      "1000000 } }");
  Push(ignored, f.Task("busy", 1), t0);
  Push(ignored, f.Task("hurry", 1, 4, 0, /*timeout_us=*/50), t0);
  ignored.TryNext(t0, kWall);
  EXPECT_THAT(Ids(ignored.TryNext(t0 + microseconds(60), kWall)), ElementsAre("hurry"));
}

TEST(DynamicBatcher, MaxQueueSizePerLevel) {
  Fixture f;
  DynamicBatcher b = Make(
      "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 2 "
      "default_queue_policy { max_queue_size: 2 } priority_queue_policy { key: 1 value { "
      "max_queue_size: 1 } } }");
  const Clock::time_point t0 = Clock::now();
  Push(b, f.Task("a", 1), t0);
  Push(b, f.Task("b", 1), t0);
  std::unique_ptr<InferTask> c = f.Task("c", 1);
  absl::StatusOr<bool> r = b.Push(&c, t0);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnavailable(r.status()));
  EXPECT_THAT(r.status().message(), HasSubstr("max_queue_size 2"));
  ASSERT_NE(c, nullptr);  // handed back to the caller, which answers it
  Push(b, f.Task("h", 1, 4, 1), t0);  // level 1 has its own bound
  std::unique_ptr<InferTask> h2 = f.Task("h2", 1, 4, 1);
  EXPECT_THAT(b.Push(&h2, t0).status().message(), HasSubstr("max_queue_size 1 at priority level 1"));
}

TEST(DynamicBatcher, CancelledAndExpiredRequestsAreDroppedUnrun) {
  Fixture f;
  DynamicBatcher b = Make("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 1000 }");
  const Clock::time_point t0 = Clock::now();
  auto token = std::make_shared<api::CancellationToken>();
  std::unique_ptr<InferTask> cancelled = f.Task("cancelled", 1);
  cancelled->request.cancellation = token;
  std::unique_ptr<InferTask> late = f.Task("late", 1);
  late->request.deadline = kWall + absl::Milliseconds(5);
  Push(b, std::move(cancelled), t0);
  Push(b, std::move(late), t0);
  Push(b, f.Task("ok", 1), t0);
  token->Cancel();
  DynamicBatcher::Step s = b.TryNext(t0 + microseconds(1000), kWall + absl::Milliseconds(10));
  EXPECT_THAT(RefusedIds(s), ElementsAre("cancelled", "late"));
  EXPECT_TRUE(absl::IsCancelled(s.refused[0].second));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s.refused[1].second));
  EXPECT_THAT(Ids(s), ElementsAre("ok"));
  EXPECT_EQ(b.queued(), 0);
}

TEST(DynamicBatcher, PolicyErrorsNameTheField) {
  EXPECT_THAT(BatchingPolicy::FromConfig(Config("max_batch_size: 4 dynamic_batching { "
                                                "preferred_batch_size: [8] }"))
                  .status()
                  .message(),
              HasSubstr("dynamic_batching.preferred_batch_size[0]: 8 is outside [1, max_batch_size 4]"));
  EXPECT_THAT(BatchingPolicy::FromConfig(Config("max_batch_size: 4 dynamic_batching { "
                                                "priority_levels: 2 }"))
                  .status()
                  .message(),
              HasSubstr("dynamic_batching.default_priority_level: 0 is outside [1, priority_levels 2]"));
  EXPECT_THAT(BatchingPolicy::FromConfig(
                  Config("max_batch_size: 4 dynamic_batching { priority_levels: 2 "
                         "default_priority_level: 1 priority_queue_policy { key: 3 value { } } }"))
                  .status()
                  .message(),
              HasSubstr("priority_queue_policy: level 3 is outside"));
}

}  // namespace
}  // namespace kiln::server
