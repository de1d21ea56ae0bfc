// Task<T>: recursion whose depth follows the data, without growing the C++ stack.
//
// A recursive algorithm over a UOp graph recurses as deep as the graph is long: a 100,000-op elementwise chain is a
// 100,000-frame recursion, which overflows a thread's stack (8 MiB on the main thread, less on pool threads). Written
// as coroutines returning Task<T>, the same recursion keeps its frames on the heap: `co_await Child(...)` suspends the
// caller and pushes the child on an explicit stack, and one driver loop (Run) resumes whichever task is on top, so
// the C++ stack stays one frame deep whatever the recursion depth.
//
//   Task<int> Depth(const UOp* u) {
//     int d = 0;
//     for (const UOpPtr& s : u->src()) d = std::max(d, co_await Depth(s.get()));
//     co_return d + 1;
//   }
//   int depth = Depth(root).Run();
//
// A function that has its answer at once (a memo hit) returns Task<T>::Ready(value): no coroutine frame, and an
// awaiting caller does not suspend. A coroutine's body runs later than its call (when awaited or Run), so await every
// task where it is made, in the same full expression (`co_await F(x)`, `F(x).Run()`): the caller is suspended inside
// that expression until the child finishes, so reference parameters to the caller's locals and to the expression's
// temporaries stay valid, and state the caller sets around `co_await` (a stack it pushes and pops) is what the child
// sees. A task kept for later must take its parameters by value. Exceptions are not used in kiln; one escaping a task
// terminates.
//
// Thread safety: a task and everything it awaits run on the thread that calls Run.
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

namespace kiln {
namespace task_internal {

// Coroutine frames come and go by the thousand in one lowering, a few sizes at a time: each thread keeps a short
// free list per 64-byte size class (up to 1 KiB) instead of going to malloc for every frame.
inline constexpr std::size_t kClass = 64, kClasses = 16, kKeep = 64;
struct FramePool {
  std::vector<void*> free[kClasses];
  ~FramePool() {
    for (auto& list : free)
      for (void* p : list) ::operator delete(p);
  }
};
inline FramePool& Pool() {
  thread_local FramePool pool;
  return pool;
}
inline void* AllocateFrame(std::size_t n) {
  const std::size_t c = (n + kClass - 1) / kClass;
  if (c == 0 || c > kClasses) return ::operator new(n);
  std::vector<void*>& list = Pool().free[c - 1];
  if (list.empty()) return ::operator new(c * kClass);
  void* p = list.back();
  list.pop_back();
  return p;
}
inline void FreeFrame(void* p, std::size_t n) {
  const std::size_t c = (n + kClass - 1) / kClass;
  if (c == 0 || c > kClasses) return ::operator delete(p);
  std::vector<void*>& list = Pool().free[c - 1];
  if (list.size() >= kKeep) return ::operator delete(p);
  list.push_back(p);
}

}  // namespace task_internal

template <typename T>
class [[nodiscard]] Task {
 public:
  struct promise_type {
    std::optional<T> value;
    std::vector<std::coroutine_handle<>>* stack = nullptr;  // the driver's, set when awaited or Run
    Task get_return_object() noexcept {
      return Task(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    template <typename U>
    void return_value(U&& v) {
      value.emplace(std::forward<U>(v));
    }
    void unhandled_exception() noexcept { std::terminate(); }
    static void* operator new(std::size_t n) { return task_internal::AllocateFrame(n); }
    static void operator delete(void* p, std::size_t n) { task_internal::FreeFrame(p, n); }
  };

  // A task that is already done: no coroutine frame.
  static Task Ready(T v) {
    Task t;
    t.ready_.emplace(std::move(v));
    return t;
  }

  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})), ready_(std::move(o.ready_)) {}
  Task& operator=(Task&&) = delete;
  Task(const Task&) = delete;
  ~Task() {
    if (h_) h_.destroy();
  }

  // Awaiting from another Task's coroutine: the caller suspends, the driver runs this task to completion, then
  // resumes the caller with the result.
  bool await_ready() const noexcept { return !h_; }
  template <typename P>
  void await_suspend(std::coroutine_handle<P> caller) noexcept {
    h_.promise().stack = caller.promise().stack;
    h_.promise().stack->push_back(h_);
  }
  T await_resume() { return h_ ? std::move(*h_.promise().value) : std::move(*ready_); }

  // Runs the task, and every task it awaits, to completion on this thread.
  T Run() && {
    if (!h_) return std::move(*ready_);
    std::vector<std::coroutine_handle<>> stack{h_};
    h_.promise().stack = &stack;
    while (!stack.empty()) {
      std::coroutine_handle<> top = stack.back();
      top.resume();  // runs until it finishes or awaits a child (pushed above it)
      if (top.done()) stack.pop_back();
    }
    return std::move(*h_.promise().value);
  }

 private:
  Task() = default;
  explicit Task(std::coroutine_handle<promise_type> h) : h_(h) {}
  std::coroutine_handle<promise_type> h_;
  std::optional<T> ready_;
};

}  // namespace kiln
