// safetensors headers: parsing and validation, dtype names (see safetensors.h). No Tensor here:
// SafeLoad / SafeSave are in safetensors_io.cc.
#include "engine/nn/state/safetensors.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/json_limits.h"
#include "engine/base/status.h"
#include "rapidjson/document.h"
#include "rapidjson/error/en.h"
#include "rapidjson/memorystream.h"
#include "rapidjson/reader.h"

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

// JSON nesting limit of a header: more nested containers are an error (the tree's destructor
// recurses per level).
constexpr int kMaxHeaderDepth = 64;

// Parses `text` (RFC 8259, strict: no comments, NaN or trailing commas; the whole text one value)
// into `doc`. Errors are InvalidArgument "JSON: <what> at byte <offset>".
absl::Status ParseHeaderJson(std::string_view text, rapidjson::Document* doc) {
  absl::Status status;
  auto generator = [&](rapidjson::Document& handler) {
    rapidjson::MemoryStream stream(text.data(), text.size());
    JsonLimits<rapidjson::Document> limited(&handler, kMaxHeaderDepth);
    rapidjson::Reader reader;
    const rapidjson::ParseResult ok = reader.Parse<rapidjson::kParseIterativeFlag>(stream, limited);
    if (limited.too_deep()) {
      status = absl::InvalidArgumentError(
          absl::StrCat("JSON: nesting too deep (limit ", kMaxHeaderDepth, ") at byte ",
                       reader.GetErrorOffset()));
    } else if (!ok) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "JSON: ", rapidjson::GetParseError_En(ok.Code()), " at byte ", ok.Offset()));
    } else if (stream.Tell() != text.size()) {  // MemoryStream reads a NUL byte as the end
      status = absl::InvalidArgumentError(
          absl::StrCat("JSON: unexpected NUL byte at byte ", stream.Tell()));
    }
    return status.ok();
  };
  doc->Populate(generator);
  return status;
}

std::string Text(const rapidjson::Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

// OK if no two members of object `v` share a key.
absl::Status CheckUniqueKeys(const rapidjson::Value& v) {
  absl::flat_hash_set<std::string_view> keys;  // O(1) per key: a header may hold 10^7 keys
  keys.reserve(v.MemberCount());
  for (const auto& m : v.GetObject()) {
    const std::string_view key(m.name.GetString(), m.name.GetStringLength());
    if (!keys.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("JSON: duplicate key \"", std::string(key.substr(0, 64)), "\""));
    }
  }
  return absl::OkStatus();
}

uint64_t ReadLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// A non-negative JSON integer.
absl::StatusOr<uint64_t> NonNegInt(const rapidjson::Value& v, const std::string& what) {
  if (!v.IsInt64() || v.GetInt64() < 0)
    return Bad(absl::StrCat(what, " must be a non-negative integer"));
  return static_cast<uint64_t>(v.GetInt64());
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const rapidjson::Value& v,
                                            uint64_t data_size) {
  auto where = [&name](const std::string& what) {
    return absl::StrCat("tensor \"", name, "\": ", what);
  };
  if (!v.IsObject()) return Bad(where("entry is not an object"));
  auto find = [&v](const char* key) -> const rapidjson::Value* {
    auto it = v.FindMember(key);
    return it == v.MemberEnd() ? nullptr : &it->value;
  };
  const rapidjson::Value* dt = find("dtype");
  const rapidjson::Value* shape = find("shape");
  const rapidjson::Value* offs = find("data_offsets");
  // Three members holding the three keys: no key twice.
  if (dt == nullptr || shape == nullptr || offs == nullptr || v.MemberCount() != 3)
    return Bad(where("entry must have exactly the keys dtype, shape, data_offsets"));
  if (!dt->IsString()) return Bad(where("dtype is not a string"));
  SafetensorsEntry e;
  e.name = name;
  absl::StatusOr<DType> d = SafetensorsDTypeFromName(Text(*dt));
  if (!d.ok()) return Bad(where(std::string(d.status().message())));
  e.dtype = *d;
  if (!shape->IsArray() || shape->Size() > 64)
    return Bad(where("shape must be an array of at most 64 dims"));
  // The product of the non-zero dims stays <= 2^62 even when a zero dim makes the tensor empty:
  // every consumer multiplies all the dims (strides, shape inference).
  uint64_t numel = 1;
  bool zero = false;
  for (const rapidjson::Value& dim : shape->GetArray()) {
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
  if (!offs->IsArray() || offs->Size() != 2) return Bad(where("data_offsets must be [begin, end]"));
  KILN_ASSIGN_OR_RETURN(e.begin, NonNegInt((*offs)[0], where("data_offsets[0]")));
  KILN_ASSIGN_OR_RETURN(e.end, NonNegInt((*offs)[1], where("data_offsets[1]")));
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
  rapidjson::Document root;
  if (absl::Status st = ParseHeaderJson(file.substr(8, n), &root); !st.ok())
    return Bad(absl::StrCat("bad header: ", st.message()));
  if (!root.IsObject()) return Bad("header is not a JSON object");
  if (absl::Status st = CheckUniqueKeys(root); !st.ok())
    return Bad(absl::StrCat("bad header: ", st.message()));
  for (const auto& member : root.GetObject()) {
    const std::string key = Text(member.name);
    const rapidjson::Value& v = member.value;
    if (key == "__metadata__") {
      if (!v.IsObject()) return Bad("__metadata__ is not an object");
      if (absl::Status st = CheckUniqueKeys(v); !st.ok())
        return Bad(absl::StrCat("bad header: ", st.message()));
      for (const auto& m : v.GetObject()) {
        if (!m.value.IsString())
          return Bad(absl::StrCat("__metadata__[\"", Text(m.name), "\"] is not a string"));
        h.metadata[Text(m.name)] = Text(m.value);
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
