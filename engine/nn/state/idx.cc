// IDX (MNIST-format) files: parsing, gzip, limits (see idx.h). No Tensor here: the MNIST loaders are in
// mnist.cc.
#include "engine/nn/state/idx.h"

#include <zlib.h>

#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/nn/state/mapped_file.h"

namespace kiln::nn {
namespace {

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("IDX ", path, ": ", what));
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The whole decompressed contents of a gzip stream (multi-member streams included), at most kMaxIdxBytes.
absl::StatusOr<std::string> Gunzip(const std::string& path, std::string_view in) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return absl::InternalError("zlib: inflateInit2 failed");
  std::string out;
  out.resize(std::max<size_t>(in.size() * 4, 1 << 16));
  size_t consumed = 0, produced = 0;
  int rc = Z_OK;
  while (true) {
    if (produced == out.size()) {
      if (out.size() >= kMaxIdxBytes) {
        inflateEnd(&zs);
        return Bad(path, absl::StrCat("decompressed data exceeds ", kMaxIdxBytes, " bytes"));
      }
      out.resize(std::min<uint64_t>(out.size() * 2, kMaxIdxBytes));
    }
    const size_t in_chunk = std::min<size_t>(in.size() - consumed, UINT_MAX);
    const size_t out_chunk = std::min<size_t>(out.size() - produced, UINT_MAX);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + consumed));
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(out_chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    consumed += in_chunk - zs.avail_in;
    produced += out_chunk - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (consumed == in.size()) break;
      if (inflateReset(&zs) != Z_OK) break;  // another gzip member follows
      continue;
    }
    if (rc == Z_BUF_ERROR && consumed == in.size()) {
      inflateEnd(&zs);
      return Bad(path, "truncated gzip stream");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      std::string msg = zs.msg != nullptr ? zs.msg : "error";
      inflateEnd(&zs);
      return Bad(path, absl::StrCat("corrupt gzip data (zlib: ", msg, ")"));
    }
  }
  inflateEnd(&zs);
  out.resize(produced);
  return out;
}

}  // namespace

absl::StatusOr<IdxData> ParseIdx(std::string_view bytes, const std::string& path, int expected_rank,
                                 bool gzip) {
  std::string inflated;
  const bool gz = gzip || (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
                           static_cast<unsigned char>(bytes[1]) == 0x8b);
  if (gz) {
    KILN_ASSIGN_OR_RETURN(inflated, Gunzip(path, bytes));
    bytes = inflated;
  }
  if (bytes.size() < 4) return Bad(path, absl::StrCat("file too short (", bytes.size(), " bytes)"));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (p[0] != 0 || p[1] != 0) return Bad(path, "bad magic number (the first two bytes must be 0)");
  if (p[2] != 0x08)
    return Bad(path, absl::StrCat("unsupported element type 0x", absl::Hex(p[2]), " (only uint8)"));
  const int rank = p[3];
  if (rank == 0) return Bad(path, "zero dimensions");
  if (expected_rank > 0 && rank != expected_rank)
    return Bad(path, absl::StrCat("bad magic number: ", rank, " dims, expected ", expected_rank));
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header) return Bad(path, "truncated header");
  IdxData out;
  uint64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    const unsigned char* d = p + 4 + 4 * i;
    uint64_t n = (uint64_t{d[0]} << 24) | (uint64_t{d[1]} << 16) | (uint64_t{d[2]} << 8) | d[3];
    out.dims.push_back(static_cast<int64_t>(n));
    total *= n;  // <= 2^32 per dim; checked against the limit as it grows
    if (total > kMaxIdxBytes) return Bad(path, "data larger than the limit");
  }
  if (bytes.size() - header != total)
    return Bad(path, absl::StrCat("dims (", absl::StrJoin(out.dims, ", "), ") need ", total,
                                  " data bytes, the file ",
                                  bytes.size() - header < total ? "is truncated with " : "has ",
                                  bytes.size() - header));
  out.data.assign(p + header, p + header + total);
  return out;
}

absl::StatusOr<IdxData> ReadIdx(const std::string& path, int expected_rank) {
  KILN_ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  return ParseIdx(f.view(), path, expected_rank, EndsWith(path, ".gz"));
}

}  // namespace kiln::nn
