#include "server/core/datatype.h"

#include <array>

namespace kiln::server {
namespace {

struct DataTypeInfo {
  inference::DataType type;
  std::string_view name;
  int64_t byte_size;
  ContentsField contents;
};

// One row per datatype, in enum order (shared/reference/kserve-v2-protocol.md §7).
constexpr std::array<DataTypeInfo, 14> kDataTypes = {{
    {inference::TYPE_BOOL, "BOOL", 1, ContentsField::kBool},
    {inference::TYPE_UINT8, "UINT8", 1, ContentsField::kUint},
    {inference::TYPE_UINT16, "UINT16", 2, ContentsField::kUint},
    {inference::TYPE_UINT32, "UINT32", 4, ContentsField::kUint},
    {inference::TYPE_UINT64, "UINT64", 8, ContentsField::kUint64},
    {inference::TYPE_INT8, "INT8", 1, ContentsField::kInt},
    {inference::TYPE_INT16, "INT16", 2, ContentsField::kInt},
    {inference::TYPE_INT32, "INT32", 4, ContentsField::kInt},
    {inference::TYPE_INT64, "INT64", 8, ContentsField::kInt64},
    {inference::TYPE_FP16, "FP16", 2, ContentsField::kNone},
    {inference::TYPE_FP32, "FP32", 4, ContentsField::kFp32},
    {inference::TYPE_FP64, "FP64", 8, ContentsField::kFp64},
    {inference::TYPE_STRING, "BYTES", 0, ContentsField::kBytes},
    {inference::TYPE_BF16, "BF16", 2, ContentsField::kNone},
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
