// The slice of the CUDA driver API and NVRTC that backends/cuda uses, loaded at run time with dlopen, so kiln builds
// without the toolkit's headers and kilnd starts and serves on machines without libcuda or libnvrtc. The types and
// constants below mirror cuda.h / nvrtc.h (stable ABI since CUDA 4 / 7); only the entry points named here are used.
//
// Thread-safe: each library is loaded once per process (std::call_once); the tables are immutable afterwards.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::backends::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(runtime/int): the driver ABI
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphNode = struct CUgraphNode_st*;
using CUgraphExec = struct CUgraphExec_st*;

// CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 12+); the _v1 struct is its prefix up to `extra`.
struct KernelNodeParams {
  CUfunction func = nullptr;
  unsigned int grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned int block_x = 1, block_y = 1, block_z = 1;
  unsigned int shared_mem_bytes = 0;
  void** kernel_params = nullptr;
  void** extra = nullptr;
  void* kern = nullptr;  // CUkernel; unused (func is set)
  CUcontext ctx = nullptr;
};
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;

inline constexpr CUresult kCudaSuccess = 0;
inline constexpr int kAttrComputeCapabilityMajor =
    75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
inline constexpr int kAttrComputeCapabilityMinor = 76;

struct DriverApi {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
  CUresult (*cuStreamCreate)(CUstream*, unsigned int);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  // CUDA graphs (optional: null when the driver lacks them; GraphsSupported() says whether all are there). The
  // _v2 kernel-node entry points when present (CUDA 12+), else the _v1 ones (which read the KernelNodeParams prefix).
  CUresult (*cuGraphCreate)(CUgraph*, unsigned int);
  CUresult (*cuGraphAddKernelNode)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const KernelNodeParams*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);  // NOLINT(runtime/int)
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode, const KernelNodeParams*);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  bool GraphsSupported() const {
    return cuGraphCreate != nullptr && cuGraphAddKernelNode != nullptr && cuGraphInstantiateWithFlags != nullptr &&
           cuGraphExecKernelNodeSetParams != nullptr && cuGraphLaunch != nullptr && cuGraphExecDestroy != nullptr &&
           cuGraphDestroy != nullptr;
  }
};

struct NvrtcApi {
  nvrtcResult (*nvrtcVersion)(int*, int*);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int,
                                    const char* const*, const char* const*);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
  const char* (*nvrtcGetErrorString)(nvrtcResult);
  // Optional (NVRTC 11.1+; null otherwise): the SASS cubin of a program compiled for a real arch (sm_XX).
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
};

// The driver API (libcuda.so.1), or NotFound naming what is missing. Loaded once.
absl::StatusOr<const DriverApi*> Driver();
// NVRTC (libnvrtc.so from the toolkit: $KILN_NVRTC_PATH, $CUDA_PATH/lib64, /usr/local/cuda/lib64, then the loader's
// search path), or NotFound. Loaded once.
absl::StatusOr<const NvrtcApi*> Nvrtc();

// "CUDA error <code> (<name>) in <what>"; Internal.
absl::Status CudaError(const char* what, CUresult r);

}  // namespace kiln::backends::cuda
