// TSan build only (KILN_SANITIZE=thread): tells ThreadSanitizer what Debian's abseil synchronization does.
//
// Debian's libabsl is not compiled with -fsanitize=thread, so absl::Mutex, CondVar and Notification carry no
// happens-before annotations and TSan reports every access guarded by them as a race (first seen as a "race" on
// LruCache counters read and written inside RealizeContext::Impl::GetKernel, both under its absl::MutexLock). We
// may not rebuild abseil, so each test executable of the tsan build defines the few abseil entry points kiln uses;
// the definitions call the library's own (found with dlsym(RTLD_NEXT)) and add __tsan_acquire / __tsan_release on
// the object's address: release before a mutex is given up (unlock, the wait inside Await and CondVar::Wait,
// Notify), acquire after it is taken (lock, a successful try-lock, the return from a wait, and before a wait's
// Condition is evaluated). Symbols are named by
// their Itanium mangling under abseil's inline namespace (absl/base/options.h).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)

std::string Prefix() {
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const std::string ns = KILN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return "4absl" + std::to_string(ns.size()) + ns;
#else
  return "4absl";
#endif
}

template <typename Fn>
Fn Real(const char* qual, const char* rest) {
  const std::string name = std::string(qual) + Prefix() + rest;
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "absl_tsan_interpose: %s not found\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

// abseil's own deadlock detection (on in this -O1 -g build) keeps a lock graph under abseil's internal, equally
// unannotated spinlock; TSan then reports the graph's memmove in GraphCycles::InsertEdge as a race. TSan is the race
// checker here, so the detector is off.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

// A Condition is evaluated inside LockWhen / Await with the mutex held, possibly before the wrapper's own acquire
// (abseil re-takes the mutex internally, and an unlocking thread may evaluate a waiter's condition for it). The
// wrappers pass this one instead, which acquires the mutex for TSan before the caller's condition reads anything
// and releases it after (a false condition is followed by abseil giving the mutex up inside the wait, unseen).
struct GuardedCondition {
  absl::Mutex* mu;
  const absl::Condition* cond;
};
bool EvalAcquired(GuardedCondition* g) {
  __tsan_acquire(g->mu);
  const bool ok = g->cond->Eval();
  __tsan_release(g->mu);
  return ok;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}
void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}
bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>("_ZN", "5Mutex7TryLockEv");
  const bool ok = real(this);
  if (ok) __tsan_acquire(this);
  return ok;
}
void Mutex::LockWhen(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>("_ZN", "5Mutex8LockWhenERKNS0_9ConditionE");
  GuardedCondition g{this, &cond};
  real(this, Condition(&EvalAcquired, &g));
  __tsan_acquire(this);
}
void Mutex::Await(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>("_ZN", "5Mutex5AwaitERKNS0_9ConditionE");
  GuardedCondition g{this, &cond};
  __tsan_release(this);
  real(this, Condition(&EvalAcquired, &g));
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "_ZN", "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  GuardedCondition g{this, &cond};
  __tsan_release(this);
  const bool ok = real(this, Condition(&EvalAcquired, &g), timeout);
  __tsan_acquire(this);
  return ok;
}
void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>("_ZN", "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      "_ZN", "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool ok = real(this, mu, timeout);
  __tsan_acquire(mu);
  return ok;
}
void Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>("_ZN", "12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}
void Notification::WaitForNotification() const {
  static auto real =
      Real<void (*)(const Notification*)>("_ZNK", "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}
bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, absl::Duration)>(
      "_ZNK", "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool ok = real(this, timeout);
  if (ok) __tsan_acquire(const_cast<Notification*>(this));
  return ok;
}

ABSL_NAMESPACE_END
}  // namespace absl
