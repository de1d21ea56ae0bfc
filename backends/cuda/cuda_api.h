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
};

// The driver API (libcuda.so.1), or NotFound naming what is missing. Loaded once.
absl::StatusOr<const DriverApi*> Driver();
// NVRTC (libnvrtc.so from the toolkit: $KILN_NVRTC_PATH, $CUDA_PATH/lib64, /usr/local/cuda/lib64, then the loader's
// search path), or NotFound. Loaded once.
absl::StatusOr<const NvrtcApi*> Nvrtc();

// "CUDA error <code> (<name>) in <what>"; Internal.
absl::Status CudaError(const char* what, CUresult r);

}  // namespace kiln::backends::cuda
