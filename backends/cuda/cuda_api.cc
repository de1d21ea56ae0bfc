// dlopen/dlsym of libcuda and libnvrtc (see cuda_api.h).
#include "backends/cuda/cuda_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::backends::cuda {
namespace {

void* OpenFirst(const std::vector<std::string>& names, std::string* tried) {
  for (const std::string& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    absl::StrAppend(tried, tried->empty() ? "" : ", ", n);
  }
  return nullptr;
}

template <typename Fn>
bool Sym(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
  return *out != nullptr;
}

}  // namespace

absl::StatusOr<const DriverApi*> Driver() {
  static absl::StatusOr<const DriverApi*>* result = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried, missing;
    void* lib = OpenFirst({"libcuda.so.1", "libcuda.so"}, &tried);
    if (lib == nullptr) {
      result = new absl::StatusOr<const DriverApi*>(
          absl::NotFoundError(absl::StrCat("no CUDA driver (tried ", tried, ")")));
      return;
    }
    auto* api = new DriverApi();
    Sym(lib, "cuInit", &api->cuInit, &missing);
    Sym(lib, "cuDeviceGetCount", &api->cuDeviceGetCount, &missing);
    Sym(lib, "cuDeviceGet", &api->cuDeviceGet, &missing);
    Sym(lib, "cuDeviceGetName", &api->cuDeviceGetName, &missing);
    Sym(lib, "cuDeviceGetAttribute", &api->cuDeviceGetAttribute, &missing);
    Sym(lib, "cuDeviceTotalMem_v2", &api->cuDeviceTotalMem, &missing);
    Sym(lib, "cuDevicePrimaryCtxRetain", &api->cuDevicePrimaryCtxRetain, &missing);
    Sym(lib, "cuDevicePrimaryCtxRelease_v2", &api->cuDevicePrimaryCtxRelease, &missing);
    Sym(lib, "cuCtxSetCurrent", &api->cuCtxSetCurrent, &missing);
    Sym(lib, "cuMemAlloc_v2", &api->cuMemAlloc, &missing);
    Sym(lib, "cuMemFree_v2", &api->cuMemFree, &missing);
    Sym(lib, "cuMemcpyHtoD_v2", &api->cuMemcpyHtoD, &missing);
    Sym(lib, "cuMemcpyDtoH_v2", &api->cuMemcpyDtoH, &missing);
    Sym(lib, "cuModuleLoadData", &api->cuModuleLoadData, &missing);
    Sym(lib, "cuModuleGetFunction", &api->cuModuleGetFunction, &missing);
    Sym(lib, "cuModuleUnload", &api->cuModuleUnload, &missing);
    Sym(lib, "cuLaunchKernel", &api->cuLaunchKernel, &missing);
    Sym(lib, "cuStreamCreate", &api->cuStreamCreate, &missing);
    Sym(lib, "cuStreamSynchronize", &api->cuStreamSynchronize, &missing);
    Sym(lib, "cuEventCreate", &api->cuEventCreate, &missing);
    Sym(lib, "cuEventRecord", &api->cuEventRecord, &missing);
    Sym(lib, "cuEventSynchronize", &api->cuEventSynchronize, &missing);
    Sym(lib,
        dlsym(lib, "cuEventElapsedTime_v2") != nullptr ? "cuEventElapsedTime_v2"
                                                       : "cuEventElapsedTime",
        &api->cuEventElapsedTime, &missing);
    Sym(lib, "cuEventDestroy_v2", &api->cuEventDestroy, &missing);
    Sym(lib, "cuGetErrorString", &api->cuGetErrorString, &missing);
    std::string optional;  // graph entry points: absent ones stay null
    Sym(lib, "cuGraphCreate", &api->cuGraphCreate, &optional);
    Sym(lib, dlsym(lib, "cuGraphAddKernelNode_v2") != nullptr ? "cuGraphAddKernelNode_v2" : "cuGraphAddKernelNode",
        &api->cuGraphAddKernelNode, &optional);
    Sym(lib, "cuGraphInstantiateWithFlags", &api->cuGraphInstantiateWithFlags, &optional);
    Sym(lib,
        dlsym(lib, "cuGraphExecKernelNodeSetParams_v2") != nullptr ? "cuGraphExecKernelNodeSetParams_v2"
                                                                   : "cuGraphExecKernelNodeSetParams",
        &api->cuGraphExecKernelNodeSetParams, &optional);
    Sym(lib, "cuGraphLaunch", &api->cuGraphLaunch, &optional);
    Sym(lib, "cuGraphExecDestroy", &api->cuGraphExecDestroy, &optional);
    Sym(lib, "cuGraphDestroy", &api->cuGraphDestroy, &optional);
    if (!missing.empty()) {
      result = new absl::StatusOr<const DriverApi*>(
          absl::NotFoundError(absl::StrCat("the CUDA driver lacks: ", missing)));
      return;
    }
    result = new absl::StatusOr<const DriverApi*>(api);
  });
  return *result;
}

absl::StatusOr<const NvrtcApi*> Nvrtc() {
  static absl::StatusOr<const NvrtcApi*>* result = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    if (const char* p = std::getenv("KILN_NVRTC_PATH"); p != nullptr && *p != '\0')
      names.push_back(p);
    if (const char* c = std::getenv("CUDA_PATH"); c != nullptr && *c != '\0')
      names.push_back(absl::StrCat(c, "/lib64/libnvrtc.so"));
    names.push_back("/usr/local/cuda/lib64/libnvrtc.so");
    for (const char* n : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"})
      names.push_back(n);
    std::string tried, missing;
    void* lib = OpenFirst(names, &tried);
    if (lib == nullptr) {
      result = new absl::StatusOr<const NvrtcApi*>(
          absl::NotFoundError(absl::StrCat("no NVRTC (tried ", tried, ")")));
      return;
    }
    auto* api = new NvrtcApi();
    Sym(lib, "nvrtcVersion", &api->nvrtcVersion, &missing);
    Sym(lib, "nvrtcCreateProgram", &api->nvrtcCreateProgram, &missing);
    Sym(lib, "nvrtcCompileProgram", &api->nvrtcCompileProgram, &missing);
    Sym(lib, "nvrtcGetProgramLogSize", &api->nvrtcGetProgramLogSize, &missing);
    Sym(lib, "nvrtcGetProgramLog", &api->nvrtcGetProgramLog, &missing);
    Sym(lib, "nvrtcGetPTXSize", &api->nvrtcGetPTXSize, &missing);
    Sym(lib, "nvrtcGetPTX", &api->nvrtcGetPTX, &missing);
    Sym(lib, "nvrtcDestroyProgram", &api->nvrtcDestroyProgram, &missing);
    Sym(lib, "nvrtcGetErrorString", &api->nvrtcGetErrorString, &missing);
    std::string optional;
    Sym(lib, "nvrtcGetCUBINSize", &api->nvrtcGetCUBINSize, &optional);
    Sym(lib, "nvrtcGetCUBIN", &api->nvrtcGetCUBIN, &optional);
    if (!missing.empty()) {
      result = new absl::StatusOr<const NvrtcApi*>(
          absl::NotFoundError(absl::StrCat("NVRTC lacks: ", missing)));
      return;
    }
    result = new absl::StatusOr<const NvrtcApi*>(api);
  });
  return *result;
}

absl::Status CudaError(const char* what, CUresult r) {
  const char* name = nullptr;
  auto d = Driver();
  if (d.ok()) (*d)->cuGetErrorString(r, &name);
  return absl::InternalError(absl::StrCat(
      "CUDA error ", r, name != nullptr ? absl::StrCat(" (", name, ")") : "", " in ", what));
}

}  // namespace kiln::backends::cuda
