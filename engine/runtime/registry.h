// BackendRegistry: device kinds -> factories, and the devices made from them (DESIGN.md §2: registry, device,
// buffer).
//
// Device names are "<KIND>" or "<KIND>:<index>" ("CPU", "INTERP", "NULL", "CL:0", "CUDA:1"); kinds are matched
// case-insensitively and canonicalised to upper case. Each distinct canonical name is created once, lazily, on the
// first GetDevice, and lives until the process exits (Device* stays valid forever). The set of kinds is fixed at
// start-up by an explicit list, backends/register_all.h RegisterAllBackends(), driven by CMake options.
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/device.h"

namespace kiln::runtime {

// Creates the device named `name` (canonical, e.g. "CL:0"); `index` is the number after ':' (0 if absent). A factory
// may refuse an index it does not have (NotFound).
using DeviceFactory = std::function<absl::StatusOr<std::unique_ptr<Device>>(const std::string& name, int index)>;

class BackendRegistry {
 public:
  // The process-wide registry (never destroyed).
  static BackendRegistry& Global();

  // Registers a device kind ("CPU"). Returns false (and keeps the first) if the kind is already registered.
  bool Register(std::string_view kind, DeviceFactory factory);
  // The device for `name`, created on first use. InvalidArgument for a malformed name, NotFound for an unknown kind
  // (the message lists the registered kinds), or the factory's error (not cached: a later call retries).
  absl::StatusOr<Device*> GetDevice(std::string_view name);
  // Registered kinds, sorted ("CPU", "INTERP", "NULL").
  std::vector<std::string> ListDevices() const;
  bool HasKind(std::string_view kind) const;

  // Splits and canonicalises a device name: "cl:1" -> {"CL", 1, "CL:1"}, "cpu" -> {"CPU", 0, "CPU"}.
  struct ParsedName {
    std::string kind;
    int index = 0;
    std::string canonical;
  };
  static absl::StatusOr<ParsedName> ParseName(std::string_view name);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, DeviceFactory> factories_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<Device>> devices_ ABSL_GUARDED_BY(mu_);
};

// BackendRegistry::Global().GetDevice(name).
absl::StatusOr<Device*> GetDevice(std::string_view name);

}  // namespace kiln::runtime
