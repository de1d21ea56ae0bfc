// OpenCL backend: ICD loader calls (contract in cl_device.h).
#include "backends/opencl/cl_device.h"

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kiln::backends {

struct ClState {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  std::string device_name, platform_name, versions;
  absl::Mutex mu;  // serialises queue use and kernel-argument setting
  ~ClState() {
    if (queue != nullptr) clReleaseCommandQueue(queue);
    if (context != nullptr) clReleaseContext(context);
  }
};

namespace {

absl::Status ClError(const char* what, cl_int err) {
  return absl::InternalError(absl::StrCat("OpenCL ", what, " failed with error ", err));
}

std::string DeviceInfo(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string PlatformInfo(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (clGetPlatformInfo(p, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// Every (platform, device) pair, in platform order. Empty without an ICD.
std::vector<std::pair<cl_platform_id, cl_device_id>> AllDevices() {
  std::vector<std::pair<cl_platform_id, cl_device_id>> out;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) return out;
  std::vector<cl_platform_id> ps(np);
  if (clGetPlatformIDs(np, ps.data(), nullptr) != CL_SUCCESS) return out;
  for (cl_platform_id p : ps) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> ds(nd);
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ds.data(), nullptr) != CL_SUCCESS) continue;
    for (cl_device_id d : ds) out.push_back({p, d});
  }
  return out;
}

cl_mem Mem(runtime::DeviceMemory m) {
  return reinterpret_cast<cl_mem>(static_cast<uintptr_t>(m.handle));
}

std::string BuildLog(cl_program prog, cl_device_id dev) {
  size_t n = 0;
  if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS ||
      n == 0)
    return "";
  std::string log(n, '\0');
  clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  constexpr size_t kMaxLog = 8192;
  if (log.size() > kMaxLog) log = log.substr(0, kMaxLog) + "\n...(build log truncated)";
  return log;
}

class ClProgram final : public runtime::Program {
 public:
  ClProgram(std::shared_ptr<ClState> st, cl_program prog, cl_kernel kernel)
      : st_(std::move(st)), prog_(prog), kernel_(kernel) {}
  ~ClProgram() override {
    clReleaseKernel(kernel_);
    clReleaseProgram(prog_);
  }
  absl::StatusOr<double> Launch(absl::Span<const runtime::DeviceMemory> bufs,
                                absl::Span<const int64_t> vars, const runtime::LaunchDims& dims,
                                bool timed) override {
    size_t global[3], local[3];
    bool any_local = false;
    cl_uint work_dim = 1;
    for (int i = 0; i < 3; ++i) {
      if (dims.global[i] < 1 || dims.local[i] < 1)
        return absl::InvalidArgumentError("CL launch: bad launch dims");
      local[i] = static_cast<size_t>(dims.local[i]);
      global[i] = static_cast<size_t>(dims.global[i]) * local[i];
      any_local |= dims.local[i] > 1;
      if (dims.global[i] > 1 || dims.local[i] > 1) work_dim = static_cast<cl_uint>(i + 1);
    }
    absl::MutexLock lock(&st_->mu);
    cl_uint arg = 0;
    for (const runtime::DeviceMemory& m : bufs) {
      cl_mem mem = Mem(m);
      if (cl_int e = clSetKernelArg(kernel_, arg++, sizeof(cl_mem), &mem); e != CL_SUCCESS)
        return ClError("clSetKernelArg (buffer)", e);
    }
    for (int64_t v : vars) {
      cl_long x = v;
      if (cl_int e = clSetKernelArg(kernel_, arg++, sizeof(cl_long), &x); e != CL_SUCCESS)
        return ClError("clSetKernelArg (var)", e);
    }
    cl_event ev = nullptr;
    if (cl_int e = clEnqueueNDRangeKernel(st_->queue, kernel_, work_dim, nullptr, global,
                                          any_local ? local : nullptr, 0, nullptr, &ev);
        e != CL_SUCCESS)
      return ClError("clEnqueueNDRangeKernel", e);
    cl_int e = clWaitForEvents(1, &ev);
    double secs = 0;
    if (e == CL_SUCCESS && timed) {
      cl_ulong t0 = 0, t1 = 0;
      if (clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof(t0), &t0, nullptr) ==
              CL_SUCCESS &&
          clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof(t1), &t1, nullptr) ==
              CL_SUCCESS &&
          t1 >= t0)
        secs = static_cast<double>(t1 - t0) * 1e-9;
    }
    clReleaseEvent(ev);
    if (e != CL_SUCCESS) return ClError("kernel execution", e);
    return secs;
  }

 private:
  std::shared_ptr<ClState> st_;
  cl_program prog_;
  cl_kernel kernel_;
};

}  // namespace

absl::StatusOr<runtime::DeviceMemory> ClAllocator::Alloc(size_t nbytes) {
  cl_int err = CL_SUCCESS;
  cl_mem m =
      clCreateBuffer(st_->context, CL_MEM_READ_WRITE, std::max<size_t>(nbytes, 1), nullptr, &err);
  if (err != CL_SUCCESS || m == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CL: cannot allocate ", nbytes, " bytes (error ", err, ")"));
  }
  runtime::DeviceMemory mem;
  mem.handle = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(m));
  mem.nbytes = nbytes;
  return mem;
}

void ClAllocator::Free(runtime::DeviceMemory mem) {
  if (mem.handle != 0) clReleaseMemObject(Mem(mem));
}

absl::Status ClAllocator::CopyIn(runtime::DeviceMemory dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  if (nbytes > dst.nbytes) return absl::InvalidArgumentError("CL copy-in larger than the buffer");
  absl::MutexLock lock(&st_->mu);
  cl_int e =
      clEnqueueWriteBuffer(st_->queue, Mem(dst), CL_TRUE, 0, nbytes, src, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? absl::OkStatus() : ClError("clEnqueueWriteBuffer", e);
}

absl::Status ClAllocator::CopyOut(void* dst, runtime::DeviceMemory src, size_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  if (nbytes > src.nbytes) return absl::InvalidArgumentError("CL copy-out larger than the buffer");
  absl::MutexLock lock(&st_->mu);
  cl_int e =
      clEnqueueReadBuffer(st_->queue, Mem(src), CL_TRUE, 0, nbytes, dst, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? absl::OkStatus() : ClError("clEnqueueReadBuffer", e);
}

ClCompiler::ClCompiler(std::shared_ptr<ClState> st) : st_(std::move(st)) {
  cache_key_ =
      absl::StrCat("opencl|", st_->platform_name, "|", st_->device_name, "|", st_->versions, "|v2");
}

namespace {

// The compile-cache artifact: this tag, then the OpenCL C source that built once in Compile.
constexpr absl::string_view kSourceTag = "kiln-cl-source-v2\n";

absl::StatusOr<cl_program> BuildFromSource(const ClState& st, absl::string_view source,
                                           const std::string& name) {
  const char* text = source.data();
  const size_t len = source.size();
  cl_int err = CL_SUCCESS;
  cl_program prog = clCreateProgramWithSource(st.context, 1, &text, &len, &err);
  if (err != CL_SUCCESS) return ClError("clCreateProgramWithSource", err);
  err = clBuildProgram(prog, 1, &st.device, "", nullptr, nullptr);
  if (err != CL_SUCCESS) {
    std::string log = BuildLog(prog, st.device);
    clReleaseProgram(prog);
    return absl::InvalidArgumentError(
        absl::StrCat("CL compile of ", name, " failed (error ", err, "); build log:\n", log));
  }
  return prog;
}

}  // namespace

absl::StatusOr<std::string> ClCompiler::Compile(const std::string& source,
                                                const std::string& name) {
  auto prog = BuildFromSource(*st_, source, name);
  if (!prog.ok()) return prog.status();
  clReleaseProgram(*prog);
  return absl::StrCat(kSourceTag, source);
}

ClDevice::ClDevice(std::string name, std::shared_ptr<ClState> st)
    : name_(std::move(name)), st_(st), allocator_(st), compiler_(st) {}

const std::string& ClDevice::device_name() const { return st_->device_name; }

absl::StatusOr<std::unique_ptr<ClDevice>> ClDevice::Create(std::string name, int index) {
  auto all = AllDevices();
  if (index < 0 || index >= static_cast<int>(all.size()))
    return absl::NotFoundError(
        absl::StrCat("no OpenCL device ", index, " (found ", all.size(), ")"));
  auto st = std::make_shared<ClState>();
  st->platform = all[index].first;
  st->device = all[index].second;
  st->device_name = DeviceInfo(st->device, CL_DEVICE_NAME);
  st->platform_name = PlatformInfo(st->platform, CL_PLATFORM_NAME);
  st->versions = absl::StrCat(DeviceInfo(st->device, CL_DEVICE_VERSION), "|",
                              DeviceInfo(st->device, CL_DRIVER_VERSION), "|",
                              PlatformInfo(st->platform, CL_PLATFORM_VERSION));
  cl_int err = CL_SUCCESS;
  st->context = clCreateContext(nullptr, 1, &st->device, nullptr, nullptr, &err);
  if (err != CL_SUCCESS) return ClError("clCreateContext", err);
  st->queue = clCreateCommandQueue(st->context, st->device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (err != CL_SUCCESS) return ClError("clCreateCommandQueue", err);
  return std::unique_ptr<ClDevice>(new ClDevice(std::move(name), std::move(st)));
}

absl::StatusOr<std::unique_ptr<runtime::Program>> ClDevice::Load(const std::string& binary,
                                                                 const std::string& name) {
  if (!absl::StartsWith(binary, kSourceTag))
    return absl::InvalidArgumentError(
        absl::StrCat("CL load of ", name, ": not a kiln CL artifact (", kSourceTag.size() - 1,
                     "-byte tag missing)"));
  auto built = BuildFromSource(*st_, absl::string_view(binary).substr(kSourceTag.size()), name);
  if (!built.ok()) return built.status();
  cl_program prog = *built;
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(prog, name.c_str(), &err);
  if (err != CL_SUCCESS) {
    clReleaseProgram(prog);
    return absl::InvalidArgumentError(
        absl::StrCat("CL load of ", name, ": no such kernel (error ", err, ")"));
  }
  return std::unique_ptr<runtime::Program>(new ClProgram(st_, prog, k));
}

absl::Status ClDevice::Synchronize() {
  absl::MutexLock lock(&st_->mu);
  cl_int e = clFinish(st_->queue);
  return e == CL_SUCCESS ? absl::OkStatus() : ClError("clFinish", e);
}

int CountOpenClDevices() { return static_cast<int>(AllDevices().size()); }

void RegisterOpenClBackend(runtime::BackendRegistry& registry) {
  if (CountOpenClDevices() == 0) return;
  registry.Register(
      "CL",
      [](const std::string& name, int index) -> absl::StatusOr<std::unique_ptr<runtime::Device>> {
        auto dev = ClDevice::Create(name, index);
        if (!dev.ok()) return dev.status();
        return std::unique_ptr<runtime::Device>(std::move(*dev));
      });
}

}  // namespace kiln::backends
