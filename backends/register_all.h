// RegisterAllBackends: the explicit list of compiled-in backends (DESIGN.md §2, STYLE.md "registration is an explicit
// list driven by CMake options").
//
// Which backends exist is decided by CMake: NULL always; CPU with -DKILN_ENABLE_CPU=ON (needs LLVM 19); CL with
// -DKILN_ENABLE_OPENCL=ON (ocl-icd; registered only when an OpenCL device exists); CUDA with
// -DKILN_ENABLE_CUDA=ON (dlopen, no build dependency; registered only when libcuda loads and a GPU exists); INTERP when
// backends/interp is part of the tree. Each backend folder defines its Register<Kind>Backend function (declared here
// and in the backend's own header; register_all.cc declares them too because the layering lint forbids one backend
// folder from including another).
#pragma once

#include "engine/runtime/registry.h"

namespace kiln::backends {

// Registers every compiled-in backend with runtime::BackendRegistry::Global(). Idempotent, thread-safe. Call it
// once at start-up (kilnd, engine/api, tests) before runtime::GetDevice.
void RegisterAllBackends();

// Per-backend registration (defined in backends/<kind>/).
void RegisterNullBackend(runtime::BackendRegistry& registry);    // "NULL"
void RegisterCpuBackend(runtime::BackendRegistry& registry);     // "CPU"     (KILN_ENABLE_CPU)
void RegisterInterpBackend(runtime::BackendRegistry& registry);  // "INTERP"  (backends/interp)
void RegisterOpenClBackend(runtime::BackendRegistry& registry);  // "CL"      (KILN_ENABLE_OPENCL; only when a
                                                                 //            platform with a device exists)
void RegisterCudaBackend(runtime::BackendRegistry& registry);    // "CUDA"    (KILN_ENABLE_CUDA; only when libcuda
                                                                 //            loads and a GPU exists)

}  // namespace kiln::backends
