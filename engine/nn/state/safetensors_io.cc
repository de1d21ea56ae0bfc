// SafeLoad / SafeSave: safetensors files <-> Tensors (see safetensors.h). The header parsing they
// share with every other reader is in safetensors.cc (kiln_nn_state_format).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/nn/state/mapped_file.h"
#include "engine/nn/state/safetensors.h"

namespace kiln::nn {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", what));
}

std::string JsonString(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o.push_back('\\');
      o.push_back(c);
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      o += buf;
    } else {
      o.push_back(c);
    }
  }
  o.push_back('"');
  return o;
}

}  // namespace

absl::StatusOr<std::map<std::string, Tensor>> SafeLoad(const std::string& path,
                                                       const std::string& device) {
  return SafeLoad(path, nullptr, device);
}

absl::StatusOr<std::map<std::string, Tensor>> SafeLoad(const std::string& path,
                                                       std::map<std::string, std::string>* metadata,
                                                       const std::string& device) {
  KILN_ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  const std::string_view file = f.view();
  absl::StatusOr<SafetensorsHeader> h = ParseSafetensors(file);
  if (!h.ok())
    return absl::Status(h.status().code(), absl::StrCat(path, ": ", h.status().message()));
  std::map<std::string, Tensor> out;
  for (const SafetensorsEntry& e : h->entries) {
    Tensor t = Tensor::FromHost(file.data() + h->data_offset + e.begin, e.dtype, e.shape, device);
    if (!t.ok()) return t.status();
    out.emplace(e.name, std::move(t));
  }
  if (metadata != nullptr) *metadata = std::move(h->metadata);
  return out;
}

absl::Status SafeSave(const std::map<std::string, Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  struct Item {
    const std::string* name;
    const Tensor* tensor;
    std::string dtype_name;
    int item_size;
  };
  std::vector<Item> items;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      return Bad(absl::StrCat("invalid tensor name \"", name, "\""));
    if (!t.ok()) return t.status();
    KILN_ASSIGN_OR_RETURN(std::string dn, SafetensorsDTypeName(t.dtype()));
    items.push_back(Item{&name, &t, std::move(dn), t.dtype().ItemSize()});
  }
  // Largest item size first, then by name: packed back to back, every tensor stays aligned to its item size.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.item_size > b.item_size; });

  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) header += ",";
      header += JsonString(it->first) + ":" + JsonString(it->second);
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const Item& it : items) {
    const uint64_t nbytes =
        static_cast<uint64_t>(it.tensor->numel()) * static_cast<uint64_t>(it.item_size);
    if (!first) header += ",";
    first = false;
    header += absl::StrCat(JsonString(*it.name), ":{\"dtype\":\"", it.dtype_name, "\",\"shape\":[",
                           absl::StrJoin(it.tensor->shape(), ","), "],\"data_offsets\":[", offset,
                           ",", offset + nbytes, "]}");
    offset += nbytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header.push_back(' ');

  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  std::FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (fp == nullptr)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  auto fail = [&](absl::Status st) {
    std::fclose(fp);
    std::remove(tmp.c_str());
    return st;
  };
  unsigned char size_le[8];
  for (int i = 0; i < 8; ++i)
    size_le[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  if (std::fwrite(size_le, 1, 8, fp) != 8 ||
      std::fwrite(header.data(), 1, header.size(), fp) != header.size())
    return fail(
        absl::InternalError(absl::StrCat("write failed: ", tmp, ": ", std::strerror(errno))));
  std::vector<char> host;
  for (const Item& it : items) {
    host.resize(static_cast<size_t>(it.tensor->numel()) * static_cast<size_t>(it.item_size));
    if (!host.empty()) {
      if (absl::Status st = it.tensor->CopyToHost(host.data(), host.size()); !st.ok())
        return fail(st);
      if (std::fwrite(host.data(), 1, host.size(), fp) != host.size())
        return fail(
            absl::InternalError(absl::StrCat("write failed: ", tmp, ": ", std::strerror(errno))));
    }
  }
  // A buffered tail that does not fit (ENOSPC) fails in fflush, with errno set; then close.
  const bool flushed = std::fflush(fp) == 0;
  const int flush_err = errno;
  if (!flushed || std::fclose(fp) != 0) {
    const int err = flushed ? errno : flush_err;
    if (!flushed) std::fclose(fp);
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("write failed: ", tmp, ": ", std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace kiln::nn
