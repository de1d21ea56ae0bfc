// Placement: which device a model's versions run on, from its config's instance_group (Triton's
// semantics, reduced to kilnd's one device per model):
//
//   no instance_group, KIND_AUTO, KIND_MODEL   the server default (--device, else CPU)
//   KIND_CPU                                   "CPU"
//   KIND_GPU, gpus: [i]                        the i-th accelerator of the machine: CUDA devices
//                                              first, then OpenCL ones, each by index
//                                              (AcceleratorOrder); no gpus = gpus: [0]
//
// Every group and every listed GPU must name the same device: kilnd runs a model on one device,
// with as many instances (executors) as the groups' counts add up to (InstanceCount). A GPU index
// the machine does not have is
// INVALID_ARGUMENT naming "instance_group[k].gpus" and the devices present (Triton refuses such a
// model too); so is KIND_GPU on a machine without accelerators.
//
// EchoPlacement rewrites instance_group to what was resolved (Triton echoes its normalized
// instance groups in ModelConfig): one group, KIND_CPU or KIND_GPU with the device's index, count
// the total instance count. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "inference/model_config.pb.h"

namespace kiln::server {

// The accelerators of `devices` (canonical names, e.g. api::ListDevices()) in GPU-index order:
// "CUDA:n" ascending, then "CL:n" ascending.
std::vector<std::string> AcceleratorOrder(absl::Span<const std::string> devices);

// Whether placing `config` needs the machine's device list (some group asks for KIND_GPU).
bool PlacementNeedsDevices(const inference::ModelConfig& config);

// The canonical device `config` runs on. `devices` is the machine's device list (may be empty when
// PlacementNeedsDevices is false); `default_device` is canonical.
absl::StatusOr<std::string> ResolvePlacement(const inference::ModelConfig& config,
                                             absl::Span<const std::string> devices,
                                             const std::string& default_device);

// The most instances (executors, each with its own engine) one model version may have.
inline constexpr int kMaxInstances = 16;

// The model's instance count: the sum of its groups' `count` (0 counts as 1; no group = 1).
// INVALID_ARGUMENT naming instance_group[k].count when the sum exceeds kMaxInstances or a count is
// negative.
absl::StatusOr<int> InstanceCount(const inference::ModelConfig& config);

// Rewrites config->instance_group to the one group that places it on `device` (see above). A
// device that is neither CPU-like nor in `devices`' accelerators keeps KIND_CPU (INTERP).
void EchoPlacement(const std::string& device, absl::Span<const std::string> devices,
                   inference::ModelConfig* config);

}  // namespace kiln::server
