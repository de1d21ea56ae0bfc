#include "backends/register_all.h"

namespace kiln::backends {

void RegisterAllBackends() {
  static const bool once = [] {
    runtime::BackendRegistry& r = runtime::BackendRegistry::Global();
    RegisterNullBackend(r);
#ifdef KILN_HAVE_CPU
    RegisterCpuBackend(r);
#endif
#ifdef KILN_HAVE_OPENCL
    RegisterOpenClBackend(r);
#endif
#ifdef KILN_HAVE_CUDA
    RegisterCudaBackend(r);
#endif
#ifdef KILN_HAVE_INTERP
    RegisterInterpBackend(r);
#endif
    return true;
  }();
  (void)once;
}

}  // namespace kiln::backends
