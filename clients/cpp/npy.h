// NumPy .npy files (format versions 1.0-3.0, little-endian, C order) <-> a typed byte buffer.
// Used by the `kiln` CLI for tensors in and out. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::client {

struct NpyArray {
  std::string dtype;  // kiln dtype name: "float32", "int64", "bool", ...
  std::vector<int64_t> shape;
  std::string data;  // little-endian, row-major
};

// INVALID_ARGUMENT naming the file and the problem (bad magic, Fortran order, big-endian or
// unsupported dtype, data shorter or longer than the shape needs).
absl::StatusOr<NpyArray> ParseNpy(const std::string& bytes, const std::string& what);
absl::StatusOr<NpyArray> ReadNpy(const std::string& path);
std::string SerializeNpy(const NpyArray& array);
absl::Status WriteNpy(const std::string& path, const NpyArray& array);

// KServe datatype ("FP32") <-> kiln dtype ("float32"); "" when unknown.
std::string KServeToDtype(const std::string& datatype);
std::string DtypeToKServe(const std::string& dtype);
int64_t DtypeSize(const std::string& dtype);  // 0 when unknown

}  // namespace kiln::client
