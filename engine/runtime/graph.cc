// LaunchListGraph (device.h): the items launched in order by one call.
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/runtime/device.h"

namespace kiln::runtime {

absl::Status LaunchListGraph::UpdateBuffers(size_t i, absl::Span<const DeviceMemory> bufs) {
  if (i >= items_.size() || bufs.size() != items_[i].bufs.size())
    return absl::InvalidArgumentError(
        absl::StrCat("graph: item ", i, " with ", bufs.size(), " buffers"));
  items_[i].bufs.assign(bufs.begin(), bufs.end());
  return absl::OkStatus();
}

absl::Status LaunchListGraph::Launch() {
  for (const GraphItem& it : items_) {
    KILN_RETURN_IF_ERROR(it.program->Launch(it.bufs, it.vars, it.dims, /*timed=*/false).status());
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
