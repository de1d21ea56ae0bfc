// GGUF parsing and validation (gguf.h). Every read goes through Reader, which checks the bytes remaining first.
#include "engine/nn/state/gguf.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::nn {
namespace {

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("gguf: ", what)); }

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }
  uint64_t array_items = 0;  // array elements read so far (all arrays of the file), bounded by kMaxGgufArrayItems

  template <typename T>
  absl::StatusOr<T> Read(const std::string& what) {
    if (left() < sizeof(T))
      return Bad(absl::StrCat(what, " at byte ", pos_, ": the file ends (", left(), " bytes left, ", sizeof(T),
                              " needed)"));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> String(const std::string& what) {
    absl::StatusOr<uint64_t> n = Read<uint64_t>(what);
    if (!n.ok()) return n.status();
    if (*n > kMaxGgufString)
      return Bad(absl::StrCat(what, " at byte ", pos_ - 8, ": length ", *n, " is over the limit of ", kMaxGgufString));
    if (*n > left())
      return Bad(absl::StrCat(what, " at byte ", pos_ - 8, ": length ", *n, " runs past the end of the file (",
                              left(), " bytes left)"));
    std::string s(bytes_.substr(pos_, *n));
    pos_ += *n;
    return s;
  }

 private:
  std::string_view bytes_;
  uint64_t pos_ = 0;
};

// The smallest encoding of one value of `t` (an array: its type and length), to bound array lengths by the bytes
// left before allocating.
uint64_t MinBytes(GgufType t) {
  switch (t) {
    case GgufType::kUInt8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUInt16: case GgufType::kInt16: return 2;
    case GgufType::kUInt32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kString: case GgufType::kUInt64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool KnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

absl::Status ReadValue(Reader& r, GgufType type, int depth, const std::string& what, GgufValue* out) {
  out->type = type;
  auto sint = [&](auto v) {
    out->i = static_cast<int64_t>(v);
    out->u = v < 0 ? 0 : static_cast<uint64_t>(v);
  };
  auto uint = [&](auto v) {
    out->u = static_cast<uint64_t>(v);
    out->i = static_cast<int64_t>(v);  // callers check is_integer's range when it matters
  };
#define KILN_GGUF_READ(T, name)            \
  absl::StatusOr<T> name = r.Read<T>(what); \
  if (!name.ok()) return name.status()
  switch (type) {
    case GgufType::kUInt8: { KILN_GGUF_READ(uint8_t, v); uint(*v); return absl::OkStatus(); }
    case GgufType::kInt8: { KILN_GGUF_READ(int8_t, v); sint(*v); return absl::OkStatus(); }
    case GgufType::kUInt16: { KILN_GGUF_READ(uint16_t, v); uint(*v); return absl::OkStatus(); }
    case GgufType::kInt16: { KILN_GGUF_READ(int16_t, v); sint(*v); return absl::OkStatus(); }
    case GgufType::kUInt32: { KILN_GGUF_READ(uint32_t, v); uint(*v); return absl::OkStatus(); }
    case GgufType::kInt32: { KILN_GGUF_READ(int32_t, v); sint(*v); return absl::OkStatus(); }
    case GgufType::kUInt64: { KILN_GGUF_READ(uint64_t, v); uint(*v); return absl::OkStatus(); }
    case GgufType::kInt64: { KILN_GGUF_READ(int64_t, v); sint(*v); return absl::OkStatus(); }
    case GgufType::kFloat32: { KILN_GGUF_READ(float, v); out->f = *v; return absl::OkStatus(); }
    case GgufType::kFloat64: { KILN_GGUF_READ(double, v); out->f = *v; return absl::OkStatus(); }
    case GgufType::kBool: {
      KILN_GGUF_READ(uint8_t, v);
      if (*v > 1) return Bad(absl::StrCat(what, ": a bool of value ", static_cast<int>(*v), " (0 or 1)"));
      out->b = *v == 1;
      return absl::OkStatus();
    }
    case GgufType::kString: {
      absl::StatusOr<std::string> s = r.String(what);
      if (!s.ok()) return s.status();
      out->s = *std::move(s);
      return absl::OkStatus();
    }
    case GgufType::kArray: {
      if (depth >= kMaxGgufArrayDepth)
        return Bad(absl::StrCat(what, ": arrays nested deeper than ", kMaxGgufArrayDepth));
      KILN_GGUF_READ(uint32_t, et);
      if (!KnownType(*et)) return Bad(absl::StrCat(what, ": array element type ", *et, " is not a GGUF type"));
      KILN_GGUF_READ(uint64_t, n);
      const GgufType elem = static_cast<GgufType>(*et);
      if (*n > r.left() / MinBytes(elem))
        return Bad(absl::StrCat(what, ": an array of ", *n, " ", GgufTypeName(elem), " runs past the end of the file (",
                                r.left(), " bytes left)"));
      if (*n > kMaxGgufArrayItems - r.array_items)
        return Bad(absl::StrCat(what, ": an array of ", *n, " elements takes the file's arrays past the limit of ",
                                kMaxGgufArrayItems, " elements in all"));
      r.array_items += *n;
      out->element_type = elem;
      out->array.resize(*n);
      for (uint64_t k = 0; k < *n; ++k) {
        if (absl::Status st = ReadValue(r, elem, depth + 1, what, &out->array[k]); !st.ok()) return st;
      }
      return absl::OkStatus();
    }
  }
#undef KILN_GGUF_READ
  return Bad(absl::StrCat(what, ": value type ", static_cast<uint32_t>(type), " is not a GGUF type"));
}

bool KnownGgml(uint32_t t) {
  switch (static_cast<GgmlType>(t)) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ8_0:
    case GgmlType::kBF16:
      return true;
  }
  return false;
}

// Names of the ggml types kiln does not read, for the error.
std::string OtherGgmlName(uint32_t t) {
  static constexpr std::pair<uint32_t, const char*> kNames[] = {
      {6, "Q5_0"}, {7, "Q5_1"}, {9, "Q8_1"}, {10, "Q2_K"}, {11, "Q3_K"}, {12, "Q4_K"}, {13, "Q5_K"}, {14, "Q6_K"},
      {15, "Q8_K"}, {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"},
      {22, "IQ2_S"}, {23, "IQ4_XS"}, {24, "I8"}, {25, "I16"}, {26, "I32"}, {27, "I64"}, {28, "F64"}, {29, "IQ1_M"},
      {34, "TQ1_0"}, {35, "TQ2_0"}, {39, "MXFP4"}};
  for (const auto& [n, name] : kNames)
    if (n == t) return absl::StrCat(name, " (ggml type ", t, ")");
  return absl::StrCat("ggml type ", t);
}

}  // namespace

const char* GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUInt8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUInt16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUInt32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUInt64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "?";
}

const char* GgmlTypeName(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kBF16: return "BF16";
  }
  return "?";
}

int64_t GgmlBlockSize(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ8_0: return 32;
    default: return 1;
  }
}

int64_t GgmlBlockBytes(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 4;
    case GgmlType::kF16: case GgmlType::kBF16: return 2;
    case GgmlType::kQ4_0: return 18;
    case GgmlType::kQ4_1: return 20;
    case GgmlType::kQ8_0: return 34;
  }
  return 1;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUInt8: case GgufType::kInt8: case GgufType::kUInt16: case GgufType::kInt16:
    case GgufType::kUInt32: case GgufType::kInt32: case GgufType::kUInt64: case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

std::string GgufValue::DebugString(size_t max_items) const {
  switch (type) {
    case GgufType::kString: return absl::StrCat("string \"", s.substr(0, 64), s.size() > 64 ? "...\"" : "\"");
    case GgufType::kBool: return b ? "bool true" : "bool false";
    case GgufType::kFloat32: case GgufType::kFloat64: return absl::StrCat(GgufTypeName(type), " ", f);
    case GgufType::kArray: {
      std::vector<std::string> items;
      for (size_t k = 0; k < array.size() && k < max_items; ++k) items.push_back(array[k].DebugString(max_items));
      return absl::StrCat("array<", GgufTypeName(element_type), ">[", array.size(), "] [", absl::StrJoin(items, ", "),
                          array.size() > max_items ? ", ...]" : "]");
    }
    default:
      if (type == GgufType::kUInt64) return absl::StrCat("uint64 ", u);
      return absl::StrCat(GgufTypeName(type), " ", i);
  }
}

float GgufHalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: shift the mantissa up until its leading one is the implicit bit
    int e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }

const GgufValue* GgufFile::Find(std::string_view key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no metadata key ", std::string(key)));
  if (!v->is_integer()) return Bad(absl::StrCat(std::string(key), ": expected an integer, got ", v->DebugString()));
  if (v->type == GgufType::kUInt64 && v->u > static_cast<uint64_t>(INT64_MAX))
    return Bad(absl::StrCat(std::string(key), ": ", v->u, " is over int64's range"));
  return v->i;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no metadata key ", std::string(key)));
  if (v->type == GgufType::kFloat32 || v->type == GgufType::kFloat64) return v->f;
  if (v->is_integer()) return v->type == GgufType::kUInt64 ? static_cast<double>(v->u) : static_cast<double>(v->i);
  return Bad(absl::StrCat(std::string(key), ": expected a number, got ", v->DebugString()));
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no metadata key ", std::string(key)));
  if (v->type != GgufType::kString) return Bad(absl::StrCat(std::string(key), ": expected a string, got ", v->DebugString()));
  return v->s;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no metadata key ", std::string(key)));
  if (v->type != GgufType::kBool) return Bad(absl::StrCat(std::string(key), ": expected a bool, got ", v->DebugString()));
  return v->b;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStrings(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no metadata key ", std::string(key)));
  if (v->type != GgufType::kArray || v->element_type != GgufType::kString)
    return Bad(absl::StrCat(std::string(key), ": expected an array of strings, got ", v->DebugString(2)));
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.s);
  return out;
}

absl::StatusOr<GgufFile> ParseGguf(std::string_view bytes) {
  Reader r(bytes);
  GgufFile f;
  absl::StatusOr<uint32_t> magic = r.Read<uint32_t>(std::string("magic"));
  if (!magic.ok()) return magic.status();
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) return Bad("not a GGUF file (the magic is not \"GGUF\")");
  absl::StatusOr<uint32_t> version = r.Read<uint32_t>("version");
  if (!version.ok()) return version.status();
  if (*version == 0x02000000u || *version == 0x03000000u)
    return Bad("a big-endian GGUF file (not supported: kiln reads little-endian GGUF)");
  if (*version != 2 && *version != 3)
    return Bad(absl::StrCat("version ", *version, " is not supported (2 or 3)"));
  f.version = *version;
  absl::StatusOr<uint64_t> n_tensors = r.Read<uint64_t>("tensor_count");
  if (!n_tensors.ok()) return n_tensors.status();
  absl::StatusOr<uint64_t> n_kv = r.Read<uint64_t>("metadata_kv_count");
  if (!n_kv.ok()) return n_kv.status();
  if (*n_tensors > kMaxGgufTensors)
    return Bad(absl::StrCat("tensor_count ", *n_tensors, " is over the limit of ", kMaxGgufTensors));
  if (*n_kv > kMaxGgufMetadata)
    return Bad(absl::StrCat("metadata_kv_count ", *n_kv, " is over the limit of ", kMaxGgufMetadata));

  absl::flat_hash_set<std::string> keys;
  for (uint64_t k = 0; k < *n_kv; ++k) {
    const std::string what = absl::StrCat("metadata entry ", k);
    absl::StatusOr<std::string> key = r.String(absl::StrCat(what, " key"));
    if (!key.ok()) return key.status();
    if (key->empty()) return Bad(absl::StrCat(what, ": an empty key"));
    if (!keys.insert(*key).second) return Bad(absl::StrCat(what, ": the key ", *key, " appears twice"));
    absl::StatusOr<uint32_t> type = r.Read<uint32_t>(absl::StrCat(*key, " type"));
    if (!type.ok()) return type.status();
    if (!KnownType(*type)) return Bad(absl::StrCat(*key, ": value type ", *type, " is not a GGUF type"));
    GgufValue v;
    if (absl::Status st = ReadValue(r, static_cast<GgufType>(*type), 0, *key, &v); !st.ok()) return st;
    f.metadata.emplace_back(*std::move(key), std::move(v));
  }
  if (const GgufValue* a = f.Find("general.alignment"); a != nullptr) {
    if (a->type != GgufType::kUInt32) return Bad(absl::StrCat("general.alignment: expected a uint32, got ",
                                                              a->DebugString()));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      return Bad(absl::StrCat("general.alignment ", a->u, " is not a power of two"));
    f.alignment = static_cast<uint32_t>(a->u);
  }

  absl::flat_hash_set<std::string> names;
  f.tensors.reserve(std::min<uint64_t>(*n_tensors, r.left() / 24));
  for (uint64_t k = 0; k < *n_tensors; ++k) {
    GgufTensorInfo t;
    absl::StatusOr<std::string> name = r.String(absl::StrCat("tensor info ", k, " name"));
    if (!name.ok()) return name.status();
    if (name->empty() || name->size() > kMaxGgufName)
      return Bad(absl::StrCat("tensor info ", k, ": a name of ", name->size(), " bytes (1..", kMaxGgufName, ")"));
    if (!names.insert(*name).second) return Bad(absl::StrCat("tensor ", *name, " appears twice"));
    t.name = *std::move(name);
    absl::StatusOr<uint32_t> n_dims = r.Read<uint32_t>(absl::StrCat(t.name, " n_dims"));
    if (!n_dims.ok()) return n_dims.status();
    if (*n_dims < 1 || *n_dims > 4) return Bad(absl::StrCat(t.name, ": n_dims ", *n_dims, " (1..4)"));
    int64_t numel = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      absl::StatusOr<uint64_t> ne = r.Read<uint64_t>(absl::StrCat(t.name, " ne"));
      if (!ne.ok()) return ne.status();
      if (*ne < 1 || *ne > static_cast<uint64_t>(kMaxGgufElements) ||
          numel > kMaxGgufElements / static_cast<int64_t>(*ne))
        return Bad(absl::StrCat(t.name, ": dimension ", d, " of ", *ne,
                                " is 0 or makes more than ", kMaxGgufElements, " elements"));
      numel *= static_cast<int64_t>(*ne);
      t.ne.push_back(static_cast<int64_t>(*ne));
    }
    absl::StatusOr<uint32_t> type = r.Read<uint32_t>(absl::StrCat(t.name, " type"));
    if (!type.ok()) return type.status();
    if (!KnownGgml(*type))
      return Bad(absl::StrCat(t.name, ": ", OtherGgmlName(*type),
                              " is not supported (F32, F16, BF16, Q8_0, Q4_0 and Q4_1 are)"));
    t.type = static_cast<GgmlType>(*type);
    const int64_t block = GgmlBlockSize(t.type);
    if (t.ne[0] % block != 0)
      return Bad(absl::StrCat(t.name, ": ", GgmlTypeName(t.type), " needs ne[0] a multiple of ", block, ", got ",
                              t.ne[0]));
    t.nbytes = static_cast<uint64_t>(numel / block) * static_cast<uint64_t>(GgmlBlockBytes(t.type));
    absl::StatusOr<uint64_t> offset = r.Read<uint64_t>(absl::StrCat(t.name, " offset"));
    if (!offset.ok()) return offset.status();
    if (*offset % f.alignment != 0)
      return Bad(absl::StrCat(t.name, ": offset ", *offset, " is not a multiple of the alignment ", f.alignment));
    t.offset = *offset;
    f.tensors.push_back(std::move(t));
  }

  const uint64_t header_end = r.pos();
  f.data_offset = (header_end + f.alignment - 1) / f.alignment * f.alignment;
  if (f.data_offset > bytes.size() && !f.tensors.empty())
    return Bad(absl::StrCat("the data section would start at byte ", f.data_offset, ", past the end of the file (",
                            bytes.size(), " bytes)"));
  const uint64_t data_size = f.data_offset <= bytes.size() ? bytes.size() - f.data_offset : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : f.tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      return Bad(absl::StrCat(t.name, ": bytes [", t.offset, ", ", t.offset + t.nbytes,
                              ") of the data section run past its end (", data_size, " bytes)"));
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo* prev = by_offset[k - 1];
    if (prev->offset + prev->nbytes > by_offset[k]->offset)
      return Bad(absl::StrCat("tensors ", prev->name, " and ", by_offset[k]->name, " overlap in the data section"));
  }
  return f;
}

}  // namespace kiln::nn
