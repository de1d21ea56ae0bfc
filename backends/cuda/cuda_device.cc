// CUDA backend: NVRTC compiles, driver-API loads and launches (contract in cuda_device.h).
#include "backends/cuda/cuda_device.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_api.h"
#include "engine/base/status.h"

namespace kiln::backends {

using cuda::CudaError;
using cuda::kCudaSuccess;

struct CudaState {
  const cuda::DriverApi* api = nullptr;
  cuda::CUdevice device = 0;
  cuda::CUcontext ctx = nullptr;
  cuda::CUstream stream = nullptr;
  std::string arch;
  absl::Mutex mu;  // serialises launches and copies on the stream
  absl::Status Bind() const {
    cuda::CUresult r = api->cuCtxSetCurrent(ctx);
    return r == kCudaSuccess ? absl::OkStatus() : CudaError("cuCtxSetCurrent", r);
  }
};

namespace {

class CudaProgram final : public runtime::Program {
 public:
  CudaProgram(std::shared_ptr<CudaState> st, cuda::CUmodule mod, cuda::CUfunction fn, int nparams)
      : st_(std::move(st)), mod_(mod), fn_(fn), nparams_(nparams) {}
  cuda::CUfunction fn() const { return fn_; }
  int nparams() const { return nparams_; }
  const CudaState* state() const { return st_.get(); }
  ~CudaProgram() override {
    if (st_->Bind().ok()) st_->api->cuModuleUnload(mod_);
  }
  absl::StatusOr<double> Launch(absl::Span<const runtime::DeviceMemory> bufs,
                                absl::Span<const int64_t> vars, const runtime::LaunchDims& dims,
                                bool timed) override {
    for (int i = 0; i < 3; ++i)
      if (dims.global[i] < 1 || dims.local[i] < 1 || dims.global[i] > (int64_t{1} << 31) - 1 ||
          dims.local[i] > 1024)
        return absl::InvalidArgumentError("CUDA launch: launch dims out of range");
    if (nparams_ >= 0 && static_cast<size_t>(nparams_) != bufs.size() + vars.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "CUDA launch: kernel takes ", nparams_, " arguments, got ", bufs.size() + vars.size()));
    std::vector<cuda::CUdeviceptr> ptrs(bufs.size());
    std::vector<long long> vs(vars.begin(),
                              vars.end());  // NOLINT(runtime/int): the kernel's `long long` args
    std::vector<void*> args;
    for (size_t i = 0; i < bufs.size(); ++i) {
      ptrs[i] = static_cast<cuda::CUdeviceptr>(bufs[i].handle);
      args.push_back(&ptrs[i]);
    }
    for (auto& v : vs) args.push_back(&v);
    const cuda::DriverApi& a = *st_->api;
    absl::MutexLock lock(&st_->mu);
    KILN_RETURN_IF_ERROR(st_->Bind());
    cuda::CUevent start = nullptr, stop = nullptr;
    if (timed) {
      if (a.cuEventCreate(&start, 0) != kCudaSuccess || a.cuEventCreate(&stop, 0) != kCudaSuccess)
        return absl::InternalError("CUDA launch: cannot create events");
      a.cuEventRecord(start, st_->stream);
    }
    cuda::CUresult r = a.cuLaunchKernel(
        fn_, static_cast<unsigned>(dims.global[0]), static_cast<unsigned>(dims.global[1]),
        static_cast<unsigned>(dims.global[2]), static_cast<unsigned>(dims.local[0]),
        static_cast<unsigned>(dims.local[1]), static_cast<unsigned>(dims.local[2]), 0, st_->stream,
        args.data(), nullptr);
    double secs = 0;
    if (r == kCudaSuccess && timed) {
      a.cuEventRecord(stop, st_->stream);
      r = a.cuEventSynchronize(stop);
      float ms = 0;
      if (r == kCudaSuccess && a.cuEventElapsedTime(&ms, start, stop) == kCudaSuccess)
        secs = ms * 1e-3;
    }
    if (r == kCudaSuccess) r = a.cuStreamSynchronize(st_->stream);
    if (start != nullptr) a.cuEventDestroy(start);
    if (stop != nullptr) a.cuEventDestroy(stop);
    if (r != kCudaSuccess) return CudaError("cuLaunchKernel", r);
    return secs;
  }

 private:
  std::shared_ptr<CudaState> st_;
  cuda::CUmodule mod_;
  cuda::CUfunction fn_;
  int nparams_;  // kernel parameters declared in the PTX entry (-1: unknown)
};

// A JIT replay's kernels as one CUDA graph: a chain of kernel nodes (each depends on the previous one), instantiated
// once; Launch is one cuGraphLaunch on the device's stream. New buffers for a node are patched into the instantiated
// graph with cuGraphExecKernelNodeSetParams (no re-instantiation). Node arguments live in per-node storage whose
// addresses stay fixed for the graph's lifetime.
class CudaGraph final : public runtime::GraphExec {
 public:
  static absl::StatusOr<std::unique_ptr<CudaGraph>> Create(std::shared_ptr<CudaState> st,
                                                          std::vector<runtime::GraphItem> items) {
    const cuda::DriverApi& a = *st->api;
    std::unique_ptr<CudaGraph> g(new CudaGraph(st));
    absl::MutexLock lock(&st->mu);
    KILN_RETURN_IF_ERROR(st->Bind());
    if (cuda::CUresult r = a.cuGraphCreate(&g->graph_, 0); r != kCudaSuccess) return CudaError("cuGraphCreate", r);
    cuda::CUgraphNode prev = nullptr;
    for (runtime::GraphItem& it : items) {
      const auto* prog = dynamic_cast<const CudaProgram*>(it.program);
      if (prog == nullptr || prog->state() != st.get())
        return absl::InvalidArgumentError("CUDA graph: a program not loaded by this device");
      if (prog->nparams() >= 0 && static_cast<size_t>(prog->nparams()) != it.bufs.size() + it.vars.size())
        return absl::InvalidArgumentError("CUDA graph: argument count differs from the kernel's");
      for (int i = 0; i < 3; ++i)
        if (it.dims.global[i] < 1 || it.dims.local[i] < 1 || it.dims.global[i] > (int64_t{1} << 31) - 1 ||
            it.dims.local[i] > 1024)
          return absl::InvalidArgumentError("CUDA graph: launch dims out of range");
      auto n = std::make_unique<Node>();
      n->ptrs.resize(it.bufs.size());
      for (size_t i = 0; i < it.bufs.size(); ++i) n->ptrs[i] = static_cast<cuda::CUdeviceptr>(it.bufs[i].handle);
      n->vars.assign(it.vars.begin(), it.vars.end());
      for (auto& p : n->ptrs) n->args.push_back(&p);
      for (auto& v : n->vars) n->args.push_back(&v);
      n->params.func = prog->fn();
      n->params.grid_x = static_cast<unsigned>(it.dims.global[0]);
      n->params.grid_y = static_cast<unsigned>(it.dims.global[1]);
      n->params.grid_z = static_cast<unsigned>(it.dims.global[2]);
      n->params.block_x = static_cast<unsigned>(it.dims.local[0]);
      n->params.block_y = static_cast<unsigned>(it.dims.local[1]);
      n->params.block_z = static_cast<unsigned>(it.dims.local[2]);
      n->params.kernel_params = n->args.data();
      if (cuda::CUresult r = a.cuGraphAddKernelNode(&n->node, g->graph_, prev == nullptr ? nullptr : &prev,
                                                    prev == nullptr ? 0 : 1, &n->params);
          r != kCudaSuccess)
        return CudaError("cuGraphAddKernelNode", r);
      prev = n->node;
      g->nodes_.push_back(std::move(n));
    }
    if (cuda::CUresult r = a.cuGraphInstantiateWithFlags(&g->exec_, g->graph_, 0); r != kCudaSuccess)
      return CudaError("cuGraphInstantiate", r);
    return g;
  }

  ~CudaGraph() override {
    if (!st_->Bind().ok()) return;
    if (exec_ != nullptr) st_->api->cuGraphExecDestroy(exec_);
    if (graph_ != nullptr) st_->api->cuGraphDestroy(graph_);
  }

  absl::Status UpdateBuffers(size_t i, absl::Span<const runtime::DeviceMemory> bufs) override {
    if (i >= nodes_.size() || bufs.size() != nodes_[i]->ptrs.size())
      return absl::InvalidArgumentError(absl::StrCat("CUDA graph: node ", i, " with ", bufs.size(), " buffers"));
    Node& n = *nodes_[i];
    for (size_t k = 0; k < bufs.size(); ++k) n.ptrs[k] = static_cast<cuda::CUdeviceptr>(bufs[k].handle);
    absl::MutexLock lock(&st_->mu);
    KILN_RETURN_IF_ERROR(st_->Bind());
    // The arguments are copied from kernel_params when the call is made.
    cuda::CUresult r = st_->api->cuGraphExecKernelNodeSetParams(exec_, n.node, &n.params);
    return r == kCudaSuccess ? absl::OkStatus() : CudaError("cuGraphExecKernelNodeSetParams", r);
  }

  absl::Status Launch() override {
    absl::MutexLock lock(&st_->mu);
    KILN_RETURN_IF_ERROR(st_->Bind());
    cuda::CUresult r = st_->api->cuGraphLaunch(exec_, st_->stream);
    return r == kCudaSuccess ? absl::OkStatus() : CudaError("cuGraphLaunch", r);
  }

 private:
  struct Node {
    cuda::CUgraphNode node = nullptr;
    std::vector<cuda::CUdeviceptr> ptrs;
    std::vector<long long> vars;  // NOLINT(runtime/int): the kernel's `long long` args
    std::vector<void*> args;      // &ptrs[i]..., &vars[j]...
    cuda::KernelNodeParams params;
  };
  explicit CudaGraph(std::shared_ptr<CudaState> st) : st_(std::move(st)) {}
  std::shared_ptr<CudaState> st_;
  cuda::CUgraph graph_ = nullptr;
  cuda::CUgraphExec exec_ = nullptr;
  std::vector<std::unique_ptr<Node>> nodes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<runtime::GraphExec>> CudaDevice::CreateGraph(std::vector<runtime::GraphItem> items) {
  if (!st_->api->GraphsSupported())
    return absl::UnimplementedError("this CUDA driver has no graph API");
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<CudaGraph> g, CudaGraph::Create(st_, std::move(items)));
  return std::unique_ptr<runtime::GraphExec>(std::move(g));
}

int PtxParamCount(const std::string& ptx, const std::string& name) {
  const size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string::npos) return -1;
  const size_t end = ptx.find(')', at);
  int n = 0;
  for (size_t p = ptx.find(".param", at); p != std::string::npos && p < end;
       p = ptx.find(".param", p + 1))
    ++n;
  return n;
}

NvrtcCompiler::NvrtcCompiler(std::string arch) : arch_(std::move(arch)) {}

std::string NvrtcCompiler::CacheKey() const {
  int major = 0, minor = 0;
  if (auto n = cuda::Nvrtc(); n.ok()) (*n)->nvrtcVersion(&major, &minor);
  return absl::StrCat("cuda-nvrtc-", major, ".", minor, "|compute_", arch_, "|ptx|v1");
}

absl::StatusOr<std::string> NvrtcCompiler::Compile(const std::string& source,
                                                   const std::string& name) {
  return Run(source, name, false);
}

absl::StatusOr<std::string> NvrtcCompiler::CompileCubin(const std::string& source, const std::string& name) {
  return Run(source, name, true);
}

absl::StatusOr<std::string> NvrtcCompiler::Run(const std::string& source, const std::string& name, bool cubin) {
  KILN_ASSIGN_OR_RETURN(const cuda::NvrtcApi* n, cuda::Nvrtc());
  if (cubin && (n->nvrtcGetCUBINSize == nullptr || n->nvrtcGetCUBIN == nullptr))
    return absl::UnimplementedError("this NVRTC cannot produce cubins");
  cuda::nvrtcProgram prog = nullptr;
  if (cuda::nvrtcResult r =
          n->nvrtcCreateProgram(&prog, source.c_str(), "kernel.cu", 0, nullptr, nullptr);
      r != 0)
    return absl::InternalError(absl::StrCat("NVRTC create: ", n->nvrtcGetErrorString(r)));
  const std::string arch_opt = absl::StrCat("--gpu-architecture=", cubin ? "sm_" : "compute_", arch_);
  const char* opts[] = {arch_opt.c_str(), "--std=c++17", "-default-device"};
  const cuda::nvrtcResult cr = n->nvrtcCompileProgram(prog, 3, opts);
  if (cr != 0) {
    size_t len = 0;
    std::string log;
    if (n->nvrtcGetProgramLogSize(prog, &len) == 0 && len > 1) {
      log.resize(len);
      n->nvrtcGetProgramLog(prog, log.data());
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
      if (log.size() > 8192) log = log.substr(0, 8192) + "\n...(log truncated)";
    }
    n->nvrtcDestroyProgram(&prog);
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA compile of ", name, " failed (", n->nvrtcGetErrorString(cr), "); NVRTC log:\n", log));
  }
  size_t size = 0;
  std::string ptx;
  if (cubin) {
    if (n->nvrtcGetCUBINSize(prog, &size) == 0 && size > 0) {
      ptx.resize(size);
      n->nvrtcGetCUBIN(prog, ptx.data());
    }
    n->nvrtcDestroyProgram(&prog);
    if (ptx.empty()) return absl::InternalError(absl::StrCat("CUDA compile of ", name, ": NVRTC produced no cubin"));
    return ptx;
  }
  if (n->nvrtcGetPTXSize(prog, &size) == 0 && size > 0) {
    ptx.resize(size);
    n->nvrtcGetPTX(prog, ptx.data());
  }
  n->nvrtcDestroyProgram(&prog);
  if (ptx.empty())
    return absl::InternalError(absl::StrCat("CUDA compile of ", name, ": NVRTC produced no PTX"));
  return ptx;  // NUL-terminated (size counts the terminator), as cuModuleLoadData wants
}

absl::StatusOr<runtime::DeviceMemory> CudaAllocator::Alloc(size_t nbytes) {
  absl::MutexLock lock(&st_->mu);
  KILN_RETURN_IF_ERROR(st_->Bind());
  cuda::CUdeviceptr p = 0;
  if (cuda::CUresult r = st_->api->cuMemAlloc(&p, std::max<size_t>(nbytes, 1)); r != kCudaSuccess)
    return absl::ResourceExhaustedError(
        absl::StrCat("CUDA: cannot allocate ", nbytes, " bytes (error ", r, ")"));
  allocated_ += static_cast<int64_t>(nbytes);
  runtime::DeviceMemory m;
  m.handle = p;
  m.nbytes = nbytes;
  return m;
}

void CudaAllocator::Free(runtime::DeviceMemory mem) {
  if (mem.handle == 0) return;
  absl::MutexLock lock(&st_->mu);
  if (!st_->Bind().ok()) return;
  st_->api->cuMemFree(static_cast<cuda::CUdeviceptr>(mem.handle));
  allocated_ -= static_cast<int64_t>(mem.nbytes);
}

absl::Status CudaAllocator::CopyIn(runtime::DeviceMemory dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  if (nbytes > dst.nbytes) return absl::InvalidArgumentError("CUDA copy-in larger than the buffer");
  absl::MutexLock lock(&st_->mu);
  KILN_RETURN_IF_ERROR(st_->Bind());
  cuda::CUresult r =
      st_->api->cuMemcpyHtoD(static_cast<cuda::CUdeviceptr>(dst.handle), src, nbytes);
  return r == kCudaSuccess ? absl::OkStatus() : CudaError("cuMemcpyHtoD", r);
}

absl::Status CudaAllocator::CopyOut(void* dst, runtime::DeviceMemory src, size_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  if (nbytes > src.nbytes)
    return absl::InvalidArgumentError("CUDA copy-out larger than the buffer");
  absl::MutexLock lock(&st_->mu);
  KILN_RETURN_IF_ERROR(st_->Bind());
  cuda::CUresult r =
      st_->api->cuMemcpyDtoH(dst, static_cast<cuda::CUdeviceptr>(src.handle), nbytes);
  return r == kCudaSuccess ? absl::OkStatus() : CudaError("cuMemcpyDtoH", r);
}

CudaDevice::CudaDevice(std::string name, std::shared_ptr<CudaState> st, std::string arch)
    : name_(std::move(name)), st_(st), allocator_(st), compiler_(std::move(arch)) {}

CudaDevice::~CudaDevice() {
  // Process-lifetime devices (the registry never destroys them); release the primary context for tests.
  st_->api->cuDevicePrimaryCtxRelease(st_->device);
}

const std::string& CudaDevice::arch() const { return st_->arch; }

bool CudaDevice::supports_tensor_cores() const {
  int cc = 0;
  return absl::SimpleAtoi(st_->arch, &cc) && cc >= 80;
}

int CountCudaDevices() {
  auto api = cuda::Driver();
  if (!api.ok() || (*api)->cuInit(0) != kCudaSuccess) return 0;
  int n = 0;
  return (*api)->cuDeviceGetCount(&n) == kCudaSuccess ? n : 0;
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(std::string name, int index) {
  KILN_ASSIGN_OR_RETURN(const cuda::DriverApi* a, cuda::Driver());
  if (cuda::CUresult r = a->cuInit(0); r != kCudaSuccess)
    return absl::NotFoundError("CUDA: cuInit failed (no GPU?)");
  const int count = CountCudaDevices();
  if (index < 0 || index >= count)
    return absl::NotFoundError(absl::StrCat("no CUDA device ", index, " (found ", count, ")"));
  auto st = std::make_shared<CudaState>();
  st->api = a;
  if (cuda::CUresult r = a->cuDeviceGet(&st->device, index); r != kCudaSuccess)
    return CudaError("cuDeviceGet", r);
  int major = 0, minor = 0;
  a->cuDeviceGetAttribute(&major, cuda::kAttrComputeCapabilityMajor, st->device);
  a->cuDeviceGetAttribute(&minor, cuda::kAttrComputeCapabilityMinor, st->device);
  st->arch = absl::StrCat(major, minor);
  if (cuda::CUresult r = a->cuDevicePrimaryCtxRetain(&st->ctx, st->device); r != kCudaSuccess)
    return CudaError("cuDevicePrimaryCtxRetain", r);
  KILN_RETURN_IF_ERROR(st->Bind());
  if (cuda::CUresult r = a->cuStreamCreate(&st->stream, 1 /*CU_STREAM_NON_BLOCKING*/);
      r != kCudaSuccess)
    return CudaError("cuStreamCreate", r);
  const std::string arch = st->arch;
  return std::unique_ptr<CudaDevice>(new CudaDevice(std::move(name), std::move(st), arch));
}

absl::StatusOr<std::unique_ptr<runtime::Program>> CudaDevice::Load(const std::string& binary,
                                                                   const std::string& name) {
  absl::MutexLock lock(&st_->mu);
  KILN_RETURN_IF_ERROR(st_->Bind());
  std::string ptx = binary;
  if (ptx.empty() || ptx.back() != '\0') ptx.push_back('\0');
  cuda::CUmodule mod = nullptr;
  if (cuda::CUresult r = st_->api->cuModuleLoadData(&mod, ptx.data()); r != kCudaSuccess)
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA load of ", name, ": ", CudaError("cuModuleLoadData", r).message()));
  cuda::CUfunction fn = nullptr;
  if (cuda::CUresult r = st_->api->cuModuleGetFunction(&fn, mod, name.c_str()); r != kCudaSuccess) {
    st_->api->cuModuleUnload(mod);
    return absl::InvalidArgumentError(absl::StrCat("CUDA load of ", name, ": no such kernel"));
  }
  return std::unique_ptr<runtime::Program>(new CudaProgram(st_, mod, fn, PtxParamCount(ptx, name)));
}

absl::Status CudaDevice::Synchronize() {
  absl::MutexLock lock(&st_->mu);
  KILN_RETURN_IF_ERROR(st_->Bind());
  cuda::CUresult r = st_->api->cuStreamSynchronize(st_->stream);
  return r == kCudaSuccess ? absl::OkStatus() : CudaError("cuStreamSynchronize", r);
}

void RegisterCudaBackend(runtime::BackendRegistry& registry) {
  if (CountCudaDevices() == 0) return;
  registry.Register(
      "CUDA",
      [](const std::string& name, int index) -> absl::StatusOr<std::unique_ptr<runtime::Device>> {
        auto dev = CudaDevice::Create(name, index);
        if (!dev.ok()) return dev.status();
        return std::unique_ptr<runtime::Device>(std::move(*dev));
      });
}

}  // namespace kiln::backends
