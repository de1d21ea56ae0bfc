#include "engine/onnx/tensor_proto.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/base/status.h"
#include "engine/onnx/model.h"
#include "onnx/onnx-data.pb.h"
#include "onnx/onnx-ml.pb.h"

namespace kiln::onnx {
namespace {

absl::Status Invalid(const std::string& what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

// Reads [offset, offset+length) of `location` (relative to policy.dir) after confining it to policy.dir.
absl::StatusOr<std::string> ReadExternal(const ::onnx::TensorProto& proto, const ExternalDataPolicy& policy,
                                         const std::string& what) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset") {
      if (!absl::SimpleAtoi(kv.value(), &offset) || offset < 0) return Invalid(what, "external data offset is invalid");
    } else if (kv.key() == "length") {
      if (!absl::SimpleAtoi(kv.value(), &length) || length < 0) return Invalid(what, "external data length is invalid");
    }
  }
  if (location.empty()) return Invalid(what, "external data has no location");
  if (policy.dir.empty()) return Invalid(what, "external data is not allowed here (no model folder)");
  if (location.find('\0') != std::string::npos) return Invalid(what, "external data location contains a NUL byte");
  if (location[0] == '/' || location[0] == '\\') {
    return Invalid(what, "external data location must be relative to the model's folder, not an absolute path");
  }
  for (absl::string_view part : absl::StrSplit(location, absl::ByAnyChar("/\\"))) {
    if (part == "..") return Invalid(what, "external data location must not leave the model's folder ('..')");
  }
  // Symlinks may still point elsewhere: compare real paths.
  char dir_real[PATH_MAX], file_real[PATH_MAX];
  const std::string full = policy.dir + "/" + location;
  if (realpath(policy.dir.c_str(), dir_real) == nullptr) return Invalid(what, "the model's folder cannot be resolved");
  if (realpath(full.c_str(), file_real) == nullptr) {
    return Invalid(what, absl::StrCat("external data file '", location.substr(0, 128), "' does not exist"));
  }
  const std::string dir_s = std::string(dir_real) + "/";
  if (std::string(file_real).rfind(dir_s, 0) != 0) {
    return Invalid(what, "external data location resolves outside the model's folder");
  }
  std::ifstream in(file_real, std::ios::binary | std::ios::ate);
  if (!in) return Invalid(what, absl::StrCat("external data file '", location.substr(0, 128), "' cannot be read"));
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (offset > size) return Invalid(what, "external data offset is past the end of the file");
  if (length < 0) length = size - offset;
  if (length > size - offset) return Invalid(what, "external data range is past the end of the file");
  std::string data(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  if (length > 0 && !in.read(data.data(), length)) return Invalid(what, "external data cannot be read");
  return data;
}

template <typename Field, typename Setter>
absl::Status FillTyped(const Field& field, int64_t numel, const std::string& what, Setter set) {
  if (static_cast<int64_t>(field.size()) != numel) {
    return Invalid(what, absl::StrCat("holds ", field.size(), " values but its shape needs ", numel));
  }
  for (int64_t i = 0; i < numel; ++i) set(i, field.Get(static_cast<int>(i)));
  return absl::OkStatus();
}

absl::StatusOr<Value> DecodeValue(const ::onnx::TensorProto& t, const std::string& what) {
  KILN_ASSIGN_OR_RETURN(HostArray a, DecodeTensorProto(t, ExternalDataPolicy{}, what));
  Value v;
  v.kind = Value::Kind::kTensor;
  v.host = std::make_shared<const HostArray>(std::move(a));
  return v;
}

absl::StatusOr<Value> DecodeSequence(const ::onnx::SequenceProto& s, const std::string& what);

absl::StatusOr<Value> DecodeOptional(const ::onnx::OptionalProto& o, const std::string& what) {
  switch (o.elem_type()) {
    case ::onnx::OptionalProto::TENSOR:
      if (!o.has_tensor_value()) return Value::None();
      return DecodeValue(o.tensor_value(), what);
    case ::onnx::OptionalProto::SEQUENCE:
      if (!o.has_sequence_value()) return Value::None();
      return DecodeSequence(o.sequence_value(), what);
    case ::onnx::OptionalProto::UNDEFINED:
      return Value::None();
    default:
      return Invalid(what, "optional of a map or sparse tensor is not supported");
  }
}

absl::StatusOr<Value> DecodeSequence(const ::onnx::SequenceProto& s, const std::string& what) {
  std::vector<Value> items;
  DType dtype = dtypes::kFloat32;
  if (s.elem_type() == ::onnx::SequenceProto::TENSOR || s.elem_type() == ::onnx::SequenceProto::UNDEFINED) {
    for (const auto& t : s.tensor_values()) {
      KILN_ASSIGN_OR_RETURN(Value v, DecodeValue(t, what));
      dtype = v.dtype();
      items.push_back(std::move(v));
    }
  } else if (s.elem_type() == ::onnx::SequenceProto::SEQUENCE) {
    for (const auto& q : s.sequence_values()) {
      KILN_ASSIGN_OR_RETURN(Value v, DecodeSequence(q, what));
      items.push_back(std::move(v));
    }
  } else {
    return Invalid(what, "sequence of maps, optionals or sparse tensors is not supported");
  }
  return Value::Sequence(std::move(items), dtype);
}

}  // namespace

absl::StatusOr<HostArray> DecodeTensorProto(const ::onnx::TensorProto& t, const ExternalDataPolicy& policy,
                                            const std::string& what) {
  if (t.has_segment()) return Invalid(what, "segmented tensors are not supported");
  absl::StatusOr<DType> dt = OnnxToDType(t.data_type());
  if (!dt.ok()) return Invalid(what, std::string(dt.status().message()));
  HostArray a;
  a.dtype = *dt;
  for (int64_t d : t.dims()) a.shape.push_back(d);
  absl::StatusOr<int64_t> numel = CheckedNumel(a.shape, kMaxElements);
  if (!numel.ok()) return Invalid(what, std::string(numel.status().message()));
  const int64_t n = *numel;
  const int64_t nbytes = n * a.dtype.ItemSize();
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL) {
    KILN_ASSIGN_OR_RETURN(std::string data, ReadExternal(t, policy, what));
    if (static_cast<int64_t>(data.size()) != nbytes) {
      return Invalid(what, absl::StrCat("external data holds ", data.size(), " bytes but its shape ",
                                        ShapeString(a.shape), " needs ", nbytes));
    }
    a.bytes.assign(data.begin(), data.end());
    return a;
  }
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != nbytes) {
      return Invalid(what, absl::StrCat("holds ", t.raw_data().size(), " bytes but its shape ", ShapeString(a.shape),
                                        " of ", a.dtype.Name(), " needs ", nbytes));
    }
    a.bytes.assign(t.raw_data().begin(), t.raw_data().end());
    return a;
  }
  a.bytes.assign(static_cast<size_t>(nbytes), 0);
  const ScalarType s = a.dtype.scalar;
  absl::Status st;
  if (s == ScalarType::kFloat32) {
    st = FillTyped(t.float_data(), n, what, [&](int64_t i, float v) { std::memcpy(&a.bytes[i * 4], &v, 4); });
  } else if (s == ScalarType::kFloat64) {
    st = FillTyped(t.double_data(), n, what, [&](int64_t i, double v) { std::memcpy(&a.bytes[i * 8], &v, 8); });
  } else if (s == ScalarType::kInt64) {
    st = FillTyped(t.int64_data(), n, what, [&](int64_t i, int64_t v) { a.SetInt(i, v); });
  } else if (s == ScalarType::kUInt32 || s == ScalarType::kUInt64) {
    st = FillTyped(t.uint64_data(), n, what,
                   [&](int64_t i, uint64_t v) { std::memcpy(&a.bytes[i * a.dtype.ItemSize()], &v, a.dtype.ItemSize()); });
  } else if (s == ScalarType::kFloat16 || s == ScalarType::kBFloat16) {
    st = FillTyped(t.int32_data(), n, what, [&](int64_t i, int32_t v) {
      const uint16_t bits = static_cast<uint16_t>(v);
      std::memcpy(&a.bytes[i * 2], &bits, 2);
    });
  } else {  // bool, int8..int32, uint8, uint16: one element per int32
    st = FillTyped(t.int32_data(), n, what, [&](int64_t i, int32_t v) { a.SetInt(i, v); });
  }
  if (!st.ok()) return st;
  return a;
}

absl::StatusOr<Value> ReadValueFile(const std::string& path, int kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  const std::string what = path.substr(path.find_last_of('/') + 1);
  if (kind == static_cast<int>(ValueInfo::Kind::kSequence)) {
    ::onnx::SequenceProto s;
    if (!s.ParseFromString(bytes)) return Invalid(what, "not a SequenceProto");
    return DecodeSequence(s, what);
  }
  if (kind == static_cast<int>(ValueInfo::Kind::kOptional)) {
    ::onnx::OptionalProto o;
    if (!o.ParseFromString(bytes)) return Invalid(what, "not an OptionalProto");
    return DecodeOptional(o, what);
  }
  ::onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) return Invalid(what, "not a TensorProto");
  return DecodeValue(t, what);
}

}  // namespace kiln::onnx
