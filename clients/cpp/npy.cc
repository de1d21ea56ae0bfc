#include "clients/cpp/npy.h"

#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::client {
namespace {

struct DtypeInfo {
  const char* kiln;
  const char* descr;  // numpy descr, little-endian
  const char* kserve;
  int64_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {"bool", "|b1", "BOOL", 1},     {"int8", "|i1", "INT8", 1},     {"uint8", "|u1", "UINT8", 1},
    {"int16", "<i2", "INT16", 2},   {"uint16", "<u2", "UINT16", 2}, {"int32", "<i4", "INT32", 4},
    {"uint32", "<u4", "UINT32", 4}, {"int64", "<i8", "INT64", 8},   {"uint64", "<u8", "UINT64", 8},
    {"float16", "<f2", "FP16", 2},  {"float32", "<f4", "FP32", 4},  {"float64", "<f8", "FP64", 8},
};

const DtypeInfo* ByKiln(const std::string& dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (dtype == d.kiln) return &d;
  }
  return nullptr;
}

absl::Status Bad(const std::string& what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

// The value of 'key' in the header dict text: "'descr': '<f4', 'fortran_order': False, ...".
std::string DictValue(const std::string& header, const std::string& key) {
  const std::string needle = "'" + key + "':";
  size_t p = header.find(needle);
  if (p == std::string::npos) return "";
  p += needle.size();
  while (p < header.size() && header[p] == ' ') ++p;
  if (p >= header.size()) return "";
  if (header[p] == '(') {
    const size_t e = header.find(')', p);
    return e == std::string::npos ? "" : header.substr(p, e - p + 1);
  }
  if (header[p] == '\'') {
    const size_t e = header.find('\'', p + 1);
    return e == std::string::npos ? "" : header.substr(p + 1, e - p - 1);
  }
  size_t e = p;
  while (e < header.size() && header[e] != ',' && header[e] != '}') ++e;
  return header.substr(p, e - p);
}

}  // namespace

std::string KServeToDtype(const std::string& datatype) {
  for (const DtypeInfo& d : kDtypes) {
    if (datatype == d.kserve) return d.kiln;
  }
  return "";
}

std::string DtypeToKServe(const std::string& dtype) {
  const DtypeInfo* d = ByKiln(dtype);
  return d == nullptr ? "" : d->kserve;
}

int64_t DtypeSize(const std::string& dtype) {
  const DtypeInfo* d = ByKiln(dtype);
  return d == nullptr ? 0 : d->size;
}

absl::StatusOr<NpyArray> ParseNpy(const std::string& bytes, const std::string& what) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    return Bad(what, "not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0;
  size_t offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad(what, "truncated header");
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    offset = 12;
  } else {
    return Bad(what, absl::StrCat("unsupported .npy version ", major));
  }
  if (header_len > bytes.size() - offset) return Bad(what, "truncated header");
  const std::string header = bytes.substr(offset, header_len);
  const std::string descr = DictValue(header, "descr");
  if (DictValue(header, "fortran_order") != "False") {
    return Bad(what, "Fortran-order arrays are not supported (use np.ascontiguousarray)");
  }
  NpyArray array;
  for (const DtypeInfo& d : kDtypes) {
    if (descr == d.descr ||
        (d.size == 1 && descr.size() == 3 && descr.substr(1) == std::string(d.descr).substr(1))) {
      array.dtype = d.kiln;
    }
  }
  if (array.dtype.empty()) {
    return Bad(what, absl::StrCat("unsupported dtype '", descr, "' (little-endian numeric only)"));
  }
  std::string shape_text = DictValue(header, "shape");
  if (shape_text.size() < 2) return Bad(what, "missing shape");
  shape_text = shape_text.substr(1, shape_text.size() - 2);
  int64_t count = 1;
  for (absl::string_view part : absl::StrSplit(shape_text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    int64_t d = 0;
    if (!absl::SimpleAtoi(part, &d) || d < 0) return Bad(what, "bad shape");
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d)
      return Bad(what, "shape overflows");
    count *= d;
    array.shape.push_back(d);
  }
  const int64_t size = DtypeSize(array.dtype);
  const size_t data_offset = offset + header_len;
  const uint64_t have = bytes.size() - data_offset;
  if (count > std::numeric_limits<int64_t>::max() / size ||
      static_cast<uint64_t>(count * size) != have) {
    return Bad(what, absl::StrCat("data holds ", have, " bytes but the shape needs ", count,
                                  " elements of ", size, " bytes"));
  }
  array.data = bytes.substr(data_offset);
  return array;
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return ParseNpy(buffer.str(), path);
}

std::string SerializeNpy(const NpyArray& array) {
  const DtypeInfo* d = ByKiln(array.dtype);
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    absl::StrAppend(&shape, array.shape[i], array.shape.size() == 1 ? "," : "",
                    i + 1 < array.shape.size() ? ", " : "");
  }
  shape += ")";
  std::string header = absl::StrCat("{'descr': '", d == nullptr ? "|u1" : d->descr,
                                    "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Pad with spaces so magic + length + header + '\n' is a multiple of 64.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out += array.data;
  return out;
}

absl::Status WriteNpy(const std::string& path, const NpyArray& array) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::string bytes = SerializeNpy(array);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

}  // namespace kiln::client
