// Fuzz target: a GGUF file (engine/nn/state/gguf.cc ParseGguf: what GgufModel::Open reads before creating any
// tensor, issue #24).
// Oracles, for a file that parses: the data section starts at an aligned offset inside the file; every tensor has
// 1..4 dims, each >= 1, with a product within the limit; its ne[0] is a multiple of its type's block size, its byte
// count is numel / block * block bytes, its offset is aligned, its bytes lie inside the data section and overlap no
// other tensor's; names and keys are unique and non-empty; metadata arrays hold what their element type says. Every
// accepted byte range is read (ASan checks it), and every metadata value is printed (DebugString walks it).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/nn/state/gguf.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

void CheckValue(const kiln::nn::GgufValue& v, int depth) {
  FUZZ_CHECK(depth <= kiln::nn::kMaxGgufArrayDepth, "an array nested past the limit");
  if (v.type != kiln::nn::GgufType::kArray) return;
  for (const kiln::nn::GgufValue& e : v.array) {
    FUZZ_CHECK(e.type == v.element_type, "an array element of another type than the array's");
    CheckValue(e, depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kiln::nn::GgufTensorInfo;
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kiln::nn::GgufFile> f = kiln::nn::ParseGguf(file);
  if (!f.ok()) return 0;
  FUZZ_CHECK(f->version == 2 || f->version == 3, "a version other than 2 or 3");
  FUZZ_CHECK(f->alignment > 0 && (f->alignment & (f->alignment - 1)) == 0, "alignment not a power of two");
  FUZZ_CHECK(f->data_offset % f->alignment == 0, "the data section is not aligned");
  FUZZ_CHECK(f->tensors.empty() || f->data_offset <= size, "the data section starts past the file");
  std::set<std::string> keys;
  size_t printed = 0;
  for (const auto& [key, value] : f->metadata) {
    FUZZ_CHECK(!key.empty() && keys.insert(key).second, "empty or duplicate key");
    CheckValue(value, 0);
    printed += value.DebugString().size();
  }
  const uint64_t data_size = f->tensors.empty() ? 0 : size - f->data_offset;
  std::set<std::string> names;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t sum = 0;
  for (const GgufTensorInfo& t : f->tensors) {
    FUZZ_CHECK(!t.name.empty() && t.name.size() <= kiln::nn::kMaxGgufName && names.insert(t.name).second,
               "empty, long or duplicate tensor name");
    FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= 4, "n_dims outside 1..4");
    int64_t numel = 1;
    for (int64_t d : t.ne) {
      FUZZ_CHECK(d >= 1, "a dimension below 1");
      FUZZ_CHECK(!__builtin_mul_overflow(numel, d, &numel) && numel <= kiln::nn::kMaxGgufElements,
                 "the dims of " + t.name + " pass the element limit");
    }
    FUZZ_CHECK(numel == t.numel() && t.shape().size() == t.ne.size(), "numel or shape disagree with ne");
    const int64_t block = kiln::nn::GgmlBlockSize(t.type);
    FUZZ_CHECK(t.ne[0] % block == 0, "ne[0] is not a multiple of the block size: " + t.name);
    FUZZ_CHECK(t.nbytes == static_cast<uint64_t>(numel / block * kiln::nn::GgmlBlockBytes(t.type)),
               "nbytes differs from numel / block * block bytes: " + t.name);
    FUZZ_CHECK(t.offset % f->alignment == 0, "an unaligned offset: " + t.name);
    FUZZ_CHECK(t.offset <= data_size && t.nbytes <= data_size - t.offset, "bytes outside the data section: " + t.name);
    ranges.push_back({t.offset, t.offset + t.nbytes});
    for (uint64_t i = t.offset; i < t.offset + t.nbytes; ++i) sum += data[f->data_offset + i];
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) FUZZ_CHECK(ranges[i].first >= ranges[i - 1].second, "two tensors overlap");
  return sum + printed == 0xdeadbeef ? 1 : 0;  // keeps the reads
}
