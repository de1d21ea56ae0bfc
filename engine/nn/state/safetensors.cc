// safetensors headers: parsing and validation, dtype names (see safetensors.h). No Tensor here:
// SafeLoad / SafeSave are in safetensors_io.cc.
#include "engine/nn/state/safetensors.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/nn/state/json_lite.h"

namespace kiln::nn {
namespace {

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {
    {"BOOL", dtypes::kBool},     {"U8", dtypes::kUInt8},    {"I8", dtypes::kInt8},
    {"U16", dtypes::kUInt16},    {"I16", dtypes::kInt16},   {"F16", dtypes::kFloat16},
    {"BF16", dtypes::kBFloat16}, {"U32", dtypes::kUInt32},  {"I32", dtypes::kInt32},
    {"F32", dtypes::kFloat32},   {"F64", dtypes::kFloat64}, {"U64", dtypes::kUInt64},
    {"I64", dtypes::kInt64},
};

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", what));
}

uint64_t ReadLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// A non-negative JSON integer.
absl::StatusOr<uint64_t> NonNegInt(const json::Value& v, const std::string& what) {
  if (v.kind != json::Value::Kind::kNumber || !v.is_int || v.integer < 0)
    return Bad(absl::StrCat(what, " must be a non-negative integer"));
  return static_cast<uint64_t>(v.integer);
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const json::Value& v,
                                            uint64_t data_size) {
  auto where = [&name](const std::string& what) {
    return absl::StrCat("tensor \"", name, "\": ", what);
  };
  if (v.kind != json::Value::Kind::kObject) return Bad(where("entry is not an object"));
  const json::Value* dt = v.Find("dtype");
  const json::Value* shape = v.Find("shape");
  const json::Value* offs = v.Find("data_offsets");
  if (dt == nullptr || shape == nullptr || offs == nullptr || v.object.size() != 3)
    return Bad(where("entry must have exactly the keys dtype, shape, data_offsets"));
  if (dt->kind != json::Value::Kind::kString) return Bad(where("dtype is not a string"));
  SafetensorsEntry e;
  e.name = name;
  absl::StatusOr<DType> d = SafetensorsDTypeFromName(dt->text);
  if (!d.ok()) return Bad(where(std::string(d.status().message())));
  e.dtype = *d;
  if (shape->kind != json::Value::Kind::kArray || shape->array.size() > 64)
    return Bad(where("shape must be an array of at most 64 dims"));
  // The product of the non-zero dims stays <= 2^62 even when a zero dim makes the tensor empty:
  // every consumer multiplies all the dims (strides, shape inference).
  uint64_t numel = 1;
  bool zero = false;
  for (const json::Value& dim : shape->array) {
    KILN_ASSIGN_OR_RETURN(uint64_t n, NonNegInt(dim, where("a dim")));
    if (n > (uint64_t{1} << 62)) return Bad(where("dim too large"));
    e.shape.push_back(static_cast<int64_t>(n));
    if (n == 0) {
      zero = true;
      continue;
    }
    if (numel > (uint64_t{1} << 62) / n) return Bad(where("element count overflows"));
    numel *= n;
  }
  if (zero) numel = 0;
  if (offs->kind != json::Value::Kind::kArray || offs->array.size() != 2)
    return Bad(where("data_offsets must be [begin, end]"));
  KILN_ASSIGN_OR_RETURN(e.begin, NonNegInt(offs->array[0], where("data_offsets[0]")));
  KILN_ASSIGN_OR_RETURN(e.end, NonNegInt(offs->array[1], where("data_offsets[1]")));
  if (e.begin > e.end || e.end > data_size)
    return Bad(where(absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                  "] out of range (data section holds ", data_size, " bytes)")));
  const uint64_t item = static_cast<uint64_t>(e.dtype.ItemSize());
  if (numel > UINT64_MAX / item || e.end - e.begin != numel * item)
    return Bad(
        where(absl::StrCat("data_offsets span ", e.end - e.begin, " bytes, shape and dtype need ",
                           numel > UINT64_MAX / item ? UINT64_MAX : numel * item)));
  return e;
}

}  // namespace

absl::StatusOr<std::string> SafetensorsDTypeName(DType dtype) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == dtype) return std::string(d.name);
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors: no safetensors dtype for ", dtype.Name()));
}

absl::StatusOr<DType> SafetensorsDTypeFromName(std::string_view name) {
  for (const DTypeName& d : kDTypes)
    if (name == d.name) return d.dtype;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", std::string(name.substr(0, 32)), "\""));
}

absl::StatusOr<SafetensorsHeader> ParseSafetensors(std::string_view file) {
  if (file.size() < 8)
    return Bad(absl::StrCat("file too short (", file.size(), " bytes; need at least 8)"));
  const uint64_t n = ReadLe64(file.data());
  if (n > kMaxSafetensorsHeaderBytes)
    return Bad(
        absl::StrCat("header of ", n, " bytes exceeds the limit of ", kMaxSafetensorsHeaderBytes));
  if (n > file.size() - 8)
    return Bad(absl::StrCat("truncated: header of ", n, " bytes, file holds ", file.size() - 8,
                            " after the size"));
  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_size = file.size() - h.data_offset;
  absl::StatusOr<json::Value> root = json::Parse(file.substr(8, n));
  if (!root.ok()) return Bad(absl::StrCat("bad header: ", root.status().message()));
  if (root->kind != json::Value::Kind::kObject) return Bad("header is not a JSON object");
  for (const auto& [key, v] : root->object) {
    if (key == "__metadata__") {
      if (v.kind != json::Value::Kind::kObject) return Bad("__metadata__ is not an object");
      for (const auto& [mk, mv] : v.object) {
        if (mv.kind != json::Value::Kind::kString)
          return Bad(absl::StrCat("__metadata__[\"", mk, "\"] is not a string"));
        h.metadata[mk] = mv.text;
      }
      continue;
    }
    if (key.empty()) return Bad("empty tensor name");
    KILN_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(key, v, data_size));
    h.entries.push_back(std::move(e));
  }
  // No two byte ranges overlap (empty ranges overlap nothing).
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : h.entries)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(
      by_offset.begin(), by_offset.end(),
      [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      return Bad(absl::StrCat("tensors \"", by_offset[i - 1]->name, "\" and \"", by_offset[i]->name,
                              "\" overlap"));
  return h;
}

}  // namespace kiln::nn
