#include "server/core/datatype.h"

#include <array>

namespace kiln::server {
namespace {

struct DataTypeInfo {
  inference::DataType type;
  std::string_view name;
  int64_t byte_size;
  ContentsField contents;
  std::string_view kiln;  // kiln dtype name; "" = no kiln dtype (BYTES)
};

// One row per datatype, in enum order (shared/reference/kserve-v2-protocol.md §7).
constexpr std::array<DataTypeInfo, 14> kDataTypes = {{
    {inference::TYPE_BOOL, "BOOL", 1, ContentsField::kBool, "bool"},
    {inference::TYPE_UINT8, "UINT8", 1, ContentsField::kUint, "uint8"},
    {inference::TYPE_UINT16, "UINT16", 2, ContentsField::kUint, "uint16"},
    {inference::TYPE_UINT32, "UINT32", 4, ContentsField::kUint, "uint32"},
    {inference::TYPE_UINT64, "UINT64", 8, ContentsField::kUint64, "uint64"},
    {inference::TYPE_INT8, "INT8", 1, ContentsField::kInt, "int8"},
    {inference::TYPE_INT16, "INT16", 2, ContentsField::kInt, "int16"},
    {inference::TYPE_INT32, "INT32", 4, ContentsField::kInt, "int32"},
    {inference::TYPE_INT64, "INT64", 8, ContentsField::kInt64, "int64"},
    {inference::TYPE_FP16, "FP16", 2, ContentsField::kNone, "float16"},
    {inference::TYPE_FP32, "FP32", 4, ContentsField::kFp32, "float32"},
    {inference::TYPE_FP64, "FP64", 8, ContentsField::kFp64, "float64"},
    {inference::TYPE_STRING, "BYTES", 0, ContentsField::kBytes, ""},
    {inference::TYPE_BF16, "BF16", 2, ContentsField::kNone, "bfloat16"},
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
  return info != nullptr ? info->byte_size : 0;
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
