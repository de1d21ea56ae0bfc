// CpuDevice / CpuProgram: ORC LLJIT loading and thread-pool launches.
#include "backends/cpu/cpu_device.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <unistd.h>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/cpu/llvm_init.h"
#include "backends/cpu/thread_pool.h"
#include "engine/base/env.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Object/ELFObjectFile.h"
#include "llvm/Support/MemoryBuffer.h"

namespace kiln::backends {

struct CpuJit {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  absl::Mutex mu;  // serialises JITDylib creation/removal and perf map lines
  std::atomic<int64_t> next_id{0};
};

namespace {

// KILN_PERF_MAP=1: every loaded kernel's functions are appended to /tmp/perf-PID.map ("START SIZE NAME" in hex, the
// format `perf report` reads for JIT code), so a profile of a running step names its kernels instead of bare
// addresses. Off by default: the file grows with every load and is never cleaned up by kiln.
bool PerfMapOn() {
  static const bool on = EnvFlagOn("KILN_PERF_MAP");
  return on;
}

void WritePerfMap(llvm::orc::LLJIT& jit, llvm::orc::JITDylib& jd, const std::string& binary, absl::Mutex& mu) {
  auto obj = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(binary, "kernel"));
  if (!obj) {
    llvm::consumeError(obj.takeError());
    return;
  }
  std::string lines;
  for (const llvm::object::SymbolRef& sym : (*obj)->symbols()) {
    auto type = sym.getType();
    auto name = sym.getName();
    if (!type || !name || *type != llvm::object::SymbolRef::ST_Function) {
      if (!type) llvm::consumeError(type.takeError());
      if (!name) llvm::consumeError(name.takeError());
      continue;
    }
    const uint64_t size = llvm::object::ELFSymbolRef(sym).getSize();
    auto addr = jit.lookup(jd, *name);
    if (!addr) {
      llvm::consumeError(addr.takeError());
      continue;
    }
    absl::StrAppend(&lines, absl::Hex(addr->getValue()), " ", absl::Hex(size), " ", name->str(), "\n");
  }
  absl::MutexLock lock(&mu);
  static FILE* const map = std::fopen(absl::StrCat("/tmp/perf-", getpid(), ".map").c_str(), "a");
  if (map == nullptr) return;
  std::fputs(lines.c_str(), map);
  std::fflush(map);
}

}  // namespace

CpuProgram::~CpuProgram() {
  auto* jd = static_cast<llvm::orc::JITDylib*>(dylib_);
  absl::MutexLock lock(&jit_->mu);
  if (llvm::Error e = jit_->jit->getExecutionSession().removeJITDylib(*jd)) llvm::consumeError(std::move(e));
}

absl::StatusOr<double> CpuProgram::Launch(absl::Span<const runtime::DeviceMemory> bufs, absl::Span<const int64_t> vars,
                                          const runtime::LaunchDims& dims, bool timed) {
  if (static_cast<int>(bufs.size()) != nbufs_ || static_cast<int>(vars.size()) != nvars_)
    return absl::InvalidArgumentError(absl::StrCat("CPU launch: kernel takes ", nbufs_, " buffers and ", nvars_,
                                                   " vars, got ", bufs.size(), " and ", vars.size()));
  std::vector<void*> ptrs(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (reinterpret_cast<uintptr_t>(bufs[i].ptr) % 32 != 0)
      return absl::InvalidArgumentError(absl::StrCat("CPU launch: buffer ", i, " is not 32-byte aligned"));
    ptrs[i] = bufs[i].ptr;
  }
  std::vector<int64_t> vs(vars.begin(), vars.end());
  const int threads = std::max(1, dims.threads);
  if (threads > 1 && pool_ == nullptr) return absl::InternalError("CPU launch: no thread pool");
  const auto t0 = std::chrono::steady_clock::now();
  if (threads == 1) {
    fn_(ptrs.data(), vs.data(), 0);
  } else {
    EntryFn fn = fn_;
    void* const* p = ptrs.data();
    const int64_t* v = vs.data();
    pool_->ParallelFor(threads, [fn, p, v](int core) { fn(p, v, core); });
  }
  if (!timed) return 0.0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CpuDevice::CpuDevice(std::string name, std::shared_ptr<CpuJit> jit)
    : name_(std::move(name)), jit_(std::move(jit)),
      num_cores_(std::max(1u, std::thread::hardware_concurrency())) {}

CpuDevice::~CpuDevice() = default;

absl::StatusOr<std::unique_ptr<CpuDevice>> CpuDevice::Create(std::string name) {
  InitLlvmOnce();
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) return absl::InternalError(absl::StrCat("CPU device: cannot create LLJIT: ", LlvmErrorString(jit.takeError())));
  auto state = std::make_shared<CpuJit>();
  state->jit = std::move(*jit);
  return std::unique_ptr<CpuDevice>(new CpuDevice(std::move(name), std::move(state)));
}

std::shared_ptr<ThreadPool> CpuDevice::Pool() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (pool_ == nullptr) pool_ = std::make_shared<ThreadPool>(num_cores_);
  return pool_;
}

absl::Status CpuDevice::Synchronize() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (pool_ != nullptr) pool_->Rest();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<runtime::Program>> CpuDevice::Load(const std::string& binary, const std::string& name) {
  llvm::orc::LLJIT& jit = *jit_->jit;
  llvm::orc::JITDylib* jd = nullptr;
  {
    absl::MutexLock lock(&jit_->mu);
    auto created = jit.createJITDylib(absl::StrCat("kiln_kernel_", jit_->next_id.fetch_add(1)));
    if (!created) return absl::InternalError(absl::StrCat("CPU load: ", LlvmErrorString(created.takeError())));
    jd = &*created;
  }
  auto fail = [&](const std::string& what, llvm::Error e) -> absl::Status {
    std::string msg = LlvmErrorString(std::move(e));
    absl::MutexLock lock(&jit_->mu);
    if (llvm::Error r = jit.getExecutionSession().removeJITDylib(*jd)) llvm::consumeError(std::move(r));
    return absl::InvalidArgumentError(absl::StrCat("CPU load of ", name, ": ", what, ": ", msg));
  };
  if (llvm::Error e = jit.addObjectFile(*jd, llvm::MemoryBuffer::getMemBufferCopy(binary, name)))
    return fail("bad object", std::move(e));
  auto entry = jit.lookup(*jd, name + ".entry");
  if (!entry) return fail("entry symbol", entry.takeError());
  auto info = jit.lookup(*jd, name + ".info");
  if (!info) return fail("info symbol", info.takeError());
  const int32_t* counts = info->toPtr<const int32_t*>();
  if (PerfMapOn()) WritePerfMap(jit, *jd, binary, jit_->mu);
  return std::unique_ptr<runtime::Program>(new CpuProgram(jit_, jd, entry->toPtr<CpuProgram::EntryFn>(), counts[0],
                                                          counts[1], Pool()));
}

void RegisterCpuBackend(runtime::BackendRegistry& registry) {
  registry.Register("CPU", [](const std::string& name, int index) -> absl::StatusOr<std::unique_ptr<runtime::Device>> {
    if (index != 0) return absl::NotFoundError("the CPU device has only index 0");
    auto dev = CpuDevice::Create(name);
    if (!dev.ok()) return dev.status();
    return std::unique_ptr<runtime::Device>(std::move(*dev));
  });
}

}  // namespace kiln::backends
