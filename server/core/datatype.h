// KServe v2 tensor datatypes: the wire strings ("FP32", "BYTES", ...), their element sizes, and
// the mapping to the config enum inference::DataType (TYPE_FP32, TYPE_STRING, ...).
// Table: shared/reference/kserve-v2-protocol.md §7. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "inference/model_config.pb.h"

namespace kiln::server {

// Which InferTensorContents field carries a datatype's typed form.
enum class ContentsField {
  kNone,  // FP16, BF16: raw only
  kBool,
  kInt,     // int_contents (INT8, INT16, INT32)
  kInt64,   // int64_contents
  kUint,    // uint_contents (UINT8, UINT16, UINT32)
  kUint64,  // uint64_contents
  kFp32,
  kFp64,
  kBytes,
};

// The wire name of a config datatype ("FP32" for TYPE_FP32, "BYTES" for TYPE_STRING);
// "INVALID" for TYPE_INVALID or an out-of-range value.
std::string_view DataTypeName(inference::DataType type);

// Parses a wire datatype string (exact, upper case). nullopt for anything else.
std::optional<inference::DataType> ParseDataTypeName(std::string_view name);

// The kiln dtype name of a config datatype ("float32" for TYPE_FP32); "" for BYTES / INVALID.
std::string_view KilnDTypeName(inference::DataType type);
// The config datatype of a kiln dtype name; nullopt if none.
std::optional<inference::DataType> DataTypeFromKiln(std::string_view kiln_dtype);

// Bytes per element; 0 for BYTES (variable) and TYPE_INVALID.
int64_t DataTypeByteSize(inference::DataType type);

ContentsField ContentsFieldFor(inference::DataType type);

// The field name for messages ("fp32_contents").
std::string_view ContentsFieldName(ContentsField field);

}  // namespace kiln::server
