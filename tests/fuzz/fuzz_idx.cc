// Fuzz target: an IDX dataset file (engine/nn/state/idx.cc ParseIdx, as ReadIdx reads uploaded
// training datasets: raw or gzip, any number of gzip members).
// Input layout: byte 0 picks the expected rank (0 = any, 1 = labels, 3 = images; bit 2: treat as
// gzip as a ".gz" name would), the rest is the file.
// Oracles, for a file that parses: as many dims as the rank byte says (and as asked); the data holds
// exactly prod(dims) bytes, at most kMaxIdxBytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/nn/state/idx.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  constexpr int kRanks[] = {0, 1, 3, 0};
  const int expected_rank = kRanks[data[0] & 3];
  const bool gzip = (data[0] & 4) != 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<kiln::nn::IdxData> idx =
      kiln::nn::ParseIdx(bytes, "fuzz.idx", expected_rank, gzip);
  if (!idx.ok()) return 0;
  FUZZ_CHECK(!idx->dims.empty(), "no dims");
  FUZZ_CHECK(expected_rank == 0 || static_cast<int>(idx->dims.size()) == expected_rank,
             "rank differs from the expected one");
  uint64_t total = 1;
  for (int64_t d : idx->dims) {
    FUZZ_CHECK(d >= 0 && d <= 0xffffffffLL, "dim outside uint32");
    total *= static_cast<uint64_t>(d);
    FUZZ_CHECK(total <= kiln::nn::kMaxIdxBytes, "data over the limit");
  }
  FUZZ_CHECK(idx->data.size() == total, "data size differs from prod(dims)");
  return 0;
}
