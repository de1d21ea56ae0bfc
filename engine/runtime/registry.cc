#include "engine/runtime/registry.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::runtime {

BackendRegistry& BackendRegistry::Global() {
  static BackendRegistry* const r = new BackendRegistry();
  return *r;
}

absl::StatusOr<BackendRegistry::ParsedName> BackendRegistry::ParseName(std::string_view name) {
  auto bad = [&] {
    return absl::InvalidArgumentError("device name must look like KIND or KIND:INDEX (e.g. CPU, CL:0)");
  };
  if (name.empty() || name.size() > 64) return bad();
  ParsedName p;
  const size_t colon = name.find(':');
  std::string_view kind = name.substr(0, colon);
  if (kind.empty()) return bad();
  for (char c : kind)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return bad();
  p.kind = absl::AsciiStrToUpper(std::string(kind));
  p.canonical = p.kind;
  if (colon != std::string_view::npos) {
    std::string_view idx = name.substr(colon + 1);
    if (idx.empty() || idx.size() > 4 || !std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !absl::SimpleAtoi(absl::string_view(idx.data(), idx.size()), &p.index))
      return bad();
    p.canonical = absl::StrCat(p.kind, ":", p.index);
  }
  return p;
}

bool BackendRegistry::Register(std::string_view kind, DeviceFactory factory) {
  absl::MutexLock lock(&mu_);
  return factories_.emplace(absl::AsciiStrToUpper(std::string(kind)), std::move(factory)).second;
}

absl::StatusOr<Device*> BackendRegistry::GetDevice(std::string_view name) {
  auto parsed = ParseName(name);
  if (!parsed.ok()) return parsed.status();
  absl::MutexLock lock(&mu_);
  // Factories run under the lock: device creation is rare and must happen once per name.
  auto dit = devices_.find(parsed->canonical);
  if (dit != devices_.end()) return dit->second.get();
  auto fit = factories_.find(parsed->kind);
  if (fit == factories_.end()) {
    std::vector<std::string> kinds;
    for (const auto& [k, f] : factories_) kinds.push_back(k);
    std::sort(kinds.begin(), kinds.end());
    return absl::NotFoundError(absl::StrCat("unknown device '", parsed->canonical, "' (available: ",
                                            kinds.empty() ? "none; call RegisterAllBackends()" : absl::StrJoin(kinds, ", "),
                                            ")"));
  }
  auto dev = fit->second(parsed->canonical, parsed->index);
  if (!dev.ok()) return dev.status();
  if (*dev == nullptr) return absl::InternalError(absl::StrCat("device factory for ", parsed->kind, " returned null"));
  Device* raw = dev->get();
  devices_.emplace(parsed->canonical, std::move(*dev));
  return raw;
}

std::vector<std::string> BackendRegistry::ListDevices() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> kinds;
  for (const auto& [k, f] : factories_) kinds.push_back(k);
  std::sort(kinds.begin(), kinds.end());
  return kinds;
}

bool BackendRegistry::HasKind(std::string_view kind) const {
  absl::MutexLock lock(&mu_);
  return factories_.contains(absl::AsciiStrToUpper(std::string(kind)));
}

absl::StatusOr<Device*> GetDevice(std::string_view name) { return BackendRegistry::Global().GetDevice(name); }

}  // namespace kiln::runtime
