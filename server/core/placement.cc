#include "server/core/placement.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::server {
namespace {

using Group = inference::ModelInstanceGroup;

// The index of "<kind>:<n>" names, or -1.
int IndexOf(const std::string& name, std::string_view kind) {
  if (name.size() <= kind.size() + 1 || name.compare(0, kind.size(), kind) != 0 ||
      name[kind.size()] != ':') {
    return -1;
  }
  int index = -1;
  if (!absl::SimpleAtoi(name.substr(kind.size() + 1), &index)) return -1;
  return index;
}

std::string DeviceListText(absl::Span<const std::string> devices) {
  return devices.empty() ? std::string("none") : absl::StrJoin(devices, ", ");
}

}  // namespace

std::vector<std::string> AcceleratorOrder(absl::Span<const std::string> devices) {
  std::vector<std::string> out;
  for (std::string_view kind : {"CUDA", "CL"}) {
    std::vector<std::pair<int, std::string>> of_kind;
    for (const std::string& d : devices) {
      const int index = IndexOf(d, kind);
      if (index >= 0) of_kind.emplace_back(index, d);
    }
    std::sort(of_kind.begin(), of_kind.end());
    for (auto& [index, name] : of_kind) out.push_back(std::move(name));
  }
  return out;
}

bool PlacementNeedsDevices(const inference::ModelConfig& config) {
  for (const Group& g : config.instance_group()) {
    if (g.kind() == Group::KIND_GPU) return true;
  }
  return false;
}

absl::StatusOr<std::string> ResolvePlacement(const inference::ModelConfig& config,
                                             absl::Span<const std::string> devices,
                                             const std::string& default_device) {
  const std::vector<std::string> gpus = AcceleratorOrder(devices);
  std::string placed;
  int placed_by = -1;
  auto place = [&](const std::string& device, int k) -> absl::Status {
    if (placed.empty()) {
      placed = device;
      placed_by = k;
      return absl::OkStatus();
    }
    if (placed == device) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "instance_group[", k, "]: places the model on ", device, " but instance_group[", placed_by,
        "] on ", placed, "; kilnd runs a model on one device"));
  };
  for (int k = 0; k < config.instance_group_size(); ++k) {
    const Group& g = config.instance_group(k);
    switch (g.kind()) {
      case Group::KIND_CPU:
        if (g.gpus_size() > 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("instance_group[", k, "].gpus: must be empty for KIND_CPU"));
        }
        if (absl::Status s = place("CPU", k); !s.ok()) return s;
        break;
      case Group::KIND_GPU: {
        if (gpus.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("instance_group[", k,
                           "].kind: KIND_GPU but this machine has no GPU-class device "
                           "(devices: ",
                           DeviceListText(devices), ")"));
        }
        std::vector<int> wanted(g.gpus().begin(), g.gpus().end());
        if (wanted.empty()) wanted.push_back(0);
        for (int i : wanted) {
          if (i < 0 || static_cast<size_t>(i) >= gpus.size()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "instance_group[", k, "].gpus: GPU ", i, " does not exist (GPUs: ",
                absl::StrJoin(gpus, ", "), "; devices: ", DeviceListText(devices), ")"));
          }
          if (absl::Status s = place(gpus[static_cast<size_t>(i)], k); !s.ok()) return s;
        }
        break;
      }
      default:  // KIND_AUTO, KIND_MODEL: the server decides
        if (absl::Status s = place(default_device, k); !s.ok()) return s;
        break;
    }
  }
  return placed.empty() ? default_device : placed;
}

absl::StatusOr<int> InstanceCount(const inference::ModelConfig& config) {
  int64_t total = 0;
  for (int k = 0; k < config.instance_group_size(); ++k) {
    const int count = config.instance_group(k).count();
    if (count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance_group[", k, "].count: ", count, " is negative"));
    }
    total += std::max(1, count);
    if (total > kMaxInstances) {
      return absl::InvalidArgumentError(absl::StrCat(
          "instance_group[", k, "].count: the model's instances add up to ", total,
          ", over the limit of ", kMaxInstances));
    }
  }
  return static_cast<int>(std::max<int64_t>(1, total));
}

void EchoPlacement(const std::string& device, absl::Span<const std::string> devices,
                   inference::ModelConfig* config) {
  Group group;
  if (config->instance_group_size() > 0) group = config->instance_group(0);
  const absl::StatusOr<int> count = InstanceCount(*config);
  group.set_count(count.ok() ? *count : 1);
  group.clear_gpus();
  const std::vector<std::string> gpus = AcceleratorOrder(devices);
  const auto it = std::find(gpus.begin(), gpus.end(), device);
  if (it != gpus.end()) {
    group.set_kind(Group::KIND_GPU);
    group.add_gpus(static_cast<int>(it - gpus.begin()));
  } else {
    group.set_kind(Group::KIND_CPU);
  }
  if (group.name().empty()) group.set_name(absl::StrCat(config->name(), "_0"));
  config->clear_instance_group();
  *config->add_instance_group() = std::move(group);
}

}  // namespace kiln::server
