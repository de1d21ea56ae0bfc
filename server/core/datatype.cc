#include "server/core/datatype.h"

#include <array>

#include "engine/api/engine.h"

namespace kiln::server {
namespace {

struct DataTypeInfo {
  inference::DataType type;
  std::string_view name;
  ContentsField contents;
  std::string_view kiln;  // kiln dtype name; "" = no kiln dtype (BYTES)
};

// One row per datatype, in enum order (shared/reference/kserve-v2-protocol.md §7): the KServe
// side only. Element sizes come from the engine's dtype table through the kiln name
// (api::DTypeItemSize), the one place that knows them.
constexpr std::array<DataTypeInfo, 14> kDataTypes = {{
    {inference::TYPE_BOOL, "BOOL", ContentsField::kBool, "bool"},
    {inference::TYPE_UINT8, "UINT8", ContentsField::kUint, "uint8"},
    {inference::TYPE_UINT16, "UINT16", ContentsField::kUint, "uint16"},
    {inference::TYPE_UINT32, "UINT32", ContentsField::kUint, "uint32"},
    {inference::TYPE_UINT64, "UINT64", ContentsField::kUint64, "uint64"},
    {inference::TYPE_INT8, "INT8", ContentsField::kInt, "int8"},
    {inference::TYPE_INT16, "INT16", ContentsField::kInt, "int16"},
    {inference::TYPE_INT32, "INT32", ContentsField::kInt, "int32"},
    {inference::TYPE_INT64, "INT64", ContentsField::kInt64, "int64"},
    {inference::TYPE_FP16, "FP16", ContentsField::kNone, "float16"},
    {inference::TYPE_FP32, "FP32", ContentsField::kFp32, "float32"},
    {inference::TYPE_FP64, "FP64", ContentsField::kFp64, "float64"},
    {inference::TYPE_STRING, "BYTES", ContentsField::kBytes, ""},
    {inference::TYPE_BF16, "BF16", ContentsField::kNone, "bfloat16"},
}};

const DataTypeInfo* Find(inference::DataType type) {
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.type == type) return &info;
  }
  return nullptr;
}

}  // namespace

std::string_view DataTypeName(inference::DataType type) {
  const DataTypeInfo* info = Find(type);
  return info != nullptr ? info->name : "INVALID";
}

std::string_view KilnDTypeName(inference::DataType type) {
  const DataTypeInfo* info = Find(type);
  return info != nullptr ? info->kiln : "";
}

std::optional<inference::DataType> DataTypeFromKiln(std::string_view kiln_dtype) {
  if (kiln_dtype.empty()) return std::nullopt;
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.kiln == kiln_dtype) return info.type;
  }
  return std::nullopt;
}

std::optional<inference::DataType> ParseDataTypeName(std::string_view name) {
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

int64_t DataTypeByteSize(inference::DataType type) {
  const DataTypeInfo* info = Find(type);
  return info != nullptr && !info->kiln.empty() ? api::DTypeItemSize(info->kiln) : 0;
}

ContentsField ContentsFieldFor(inference::DataType type) {
  const DataTypeInfo* info = Find(type);
  return info != nullptr ? info->contents : ContentsField::kNone;
}

std::string_view ContentsFieldName(ContentsField field) {
  switch (field) {
    case ContentsField::kNone:
      return "(none)";
    case ContentsField::kBool:
      return "bool_contents";
    case ContentsField::kInt:
      return "int_contents";
    case ContentsField::kInt64:
      return "int64_contents";
    case ContentsField::kUint:
      return "uint_contents";
    case ContentsField::kUint64:
      return "uint64_contents";
    case ContentsField::kFp32:
      return "fp32_contents";
    case ContentsField::kFp64:
      return "fp64_contents";
    case ContentsField::kBytes:
      return "bytes_contents";
  }
  return "(none)";
}

}  // namespace kiln::server
