// Fuzz target: a safetensors file (engine/nn/state/safetensors.cc ParseSafetensors: what SafeLoad,
// kiln_builtin model loading and training checkpoints read before creating any tensor).
// Oracles, for a file that parses: the data section starts at 8 + N inside the file; every tensor's
// byte range lies inside the data section, is exactly numel * itemsize bytes and overlaps no other
// non-empty range; names are unique and non-empty; the product of a tensor's non-zero dims fits in
// int64 (what Tensor::FromHost and shape inference compute). Every accepted range is read (ASan checks it).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "engine/nn/state/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kiln::nn::SafetensorsHeader> h = kiln::nn::ParseSafetensors(file);
  if (!h.ok()) return 0;
  FUZZ_CHECK(h->data_offset >= 8 && h->data_offset <= size, "data section outside the file");
  const uint64_t data_size = size - h->data_offset;
  std::set<std::string> names;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t sum = 0;
  for (const kiln::nn::SafetensorsEntry& e : h->entries) {
    FUZZ_CHECK(!e.name.empty() && names.insert(e.name).second, "empty or duplicate name");
    FUZZ_CHECK(e.begin <= e.end && e.end <= data_size, "range outside the data section");
    // Every consumer multiplies the dims (Tensor::FromHost, shape inference), zero or not: the
    // product of the non-zero dims must fit in int64.
    int64_t nonzero = 1;
    bool zero = false;
    for (int64_t d : e.shape) {
      FUZZ_CHECK(d >= 0, "negative dim");
      if (d == 0) {
        zero = true;
        continue;
      }
      FUZZ_CHECK(!__builtin_mul_overflow(nonzero, d, &nonzero),
                 "the dims of " + e.name + " overflow int64 (a zero dim hides it)");
    }
    const uint64_t numel = zero ? 0 : static_cast<uint64_t>(nonzero);
    const uint64_t bytes = e.end - e.begin;
    FUZZ_CHECK(bytes == numel * static_cast<uint64_t>(e.dtype.ItemSize()),
               "range size differs from numel * itemsize: " + e.name);
    if (bytes > 0) ranges.push_back({e.begin, e.end});
    for (uint64_t i = e.begin; i < e.end; ++i) sum += data[h->data_offset + i];
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    FUZZ_CHECK(ranges[i].first >= ranges[i - 1].second, "two tensors overlap");
  }
  return sum == 0xdeadbeef ? 1 : 0;  // keeps the reads
}
