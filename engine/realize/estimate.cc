// Work and memory estimates of schedules. See estimate.h.
#include "engine/realize/estimate.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/buffer.h"
#include "engine/symbolic/range.h"

namespace kiln {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? kMax : r;
}
int64_t SatMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kMax : r;
}

int64_t BufferBytes(const UOp* b) { return SatMul(std::max<int64_t>(0, b->ArgInt()), b->dtype().ItemSize()); }

bool IsIndexDType(const UOp* u) { return u->dtype().scalar == ScalarType::kIndex; }

// A value op of the kernel (not addressing): an ALU op that neither yields nor reads index values.
bool IsValueAlu(const UOp* u) {
  if (!IsALU(u->op()) || IsIndexDType(u)) return false;
  for (const UOpPtr& s : u->src())
    if (IsIndexDType(s.get())) return false;
  return true;
}

// Thousands separators are not used: the figures are machine-read in tests and logs.
std::string Figure(int64_t v) { return v == kMax ? "more than 9.2e18" : absl::StrCat(v); }

}  // namespace

int64_t WorkEstimate::peak_bytes() const { return SatAdd(held_bytes, new_bytes); }

void WorkEstimate::Add(const WorkEstimate& o) {
  flops = SatAdd(flops, o.flops);
  bytes_moved = SatAdd(bytes_moved, o.bytes_moved);
  held_bytes = SatAdd(held_bytes, o.held_bytes);
  new_bytes = SatAdd(new_bytes, o.new_bytes);
  kernels += o.kernels;
}

int64_t EstimateKernelFlops(const UOpPtr& ast) {
  const std::vector<const UOp*> order = Toposort(ast);
  // RANGEs by discovery order; each node's scope is the set of RANGEs it lies inside.
  absl::flat_hash_map<const UOp*, int> range_index;
  std::vector<int64_t> range_size;
  for (const UOp* u : order) {
    if (u->op() != Op::RANGE) continue;
    range_index.emplace(u, static_cast<int>(range_size.size()));
    const int64_t end = u->num_src() > 0 ? VMax(u->src(0)) : 0;
    range_size.push_back(std::max<int64_t>(0, end));
  }
  const size_t words = (range_size.size() + 63) / 64;
  absl::flat_hash_map<const UOp*, size_t> at;  // node -> row in `scopes`
  at.reserve(order.size());
  std::vector<uint64_t> scopes(order.size() * std::max<size_t>(words, 1), 0);
  auto row = [&](size_t i) { return scopes.data() + i * std::max<size_t>(words, 1); };
  auto iterations = [&](const uint64_t* s) {
    int64_t n = 1;
    for (size_t w = 0; w < words; ++w)
      for (uint64_t bits = s[w]; bits != 0; bits &= bits - 1)
        n = SatMul(n, range_size[w * 64 + static_cast<size_t>(__builtin_ctzll(bits))]);
    return n;
  };
  int64_t flops = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const UOp* u = order[i];
    at.emplace(u, i);
    uint64_t* s = row(i);
    if (u->op() == Op::RANGE) {
      const int r = range_index.at(u);
      s[r / 64] |= uint64_t{1} << (r % 64);
    }
    for (const UOpPtr& src : u->src()) {
      auto it = at.find(src.get());
      if (it == at.end()) continue;
      const uint64_t* ss = row(it->second);
      for (size_t w = 0; w < words; ++w) s[w] |= ss[w];
    }
    if (u->op() == Op::REDUCE || u->op() == Op::END) {
      // A REDUCE accumulates once per iteration of its input's ranges and of the ranges it reduces (its
      // scope before they leave it), whether or not its input depends on them (a sum of a constant).
      if (u->op() == Op::REDUCE) flops = SatAdd(flops, iterations(s));
      for (size_t k = 1; k < u->num_src(); ++k) {  // the ranges it reduces / closes leave the scope
        auto r = range_index.find(u->src(k).get());
        if (r != range_index.end()) s[r->second / 64] &= ~(uint64_t{1} << (r->second % 64));
      }
    } else if (IsValueAlu(u)) {
      flops = SatAdd(flops, iterations(s));
    }
  }
  return flops;
}

WorkEstimate EstimateItems(absl::Span<const ScheduleItem> items, absl::Span<const UOpPtr> outputs) {
  WorkEstimate e;
  runtime::BufferTable& table = runtime::BufferTable::Global();
  absl::flat_hash_set<const UOp*> seen;
  auto account = [&](const UOp* b) {
    if (b == nullptr || b->op() != Op::BUFFER || !seen.insert(b).second) return;
    if (table.Lookup(b) != nullptr) {
      e.held_bytes = SatAdd(e.held_bytes, BufferBytes(b));
    } else {
      e.new_bytes = SatAdd(e.new_bytes, BufferBytes(b));
    }
  };
  for (const ScheduleItem& it : items) {
    for (const UOpPtr& b : it.buffers) {
      e.bytes_moved = SatAdd(e.bytes_moved, BufferBytes(b.get()));
      account(b.get());
    }
    if (it.kind == ScheduleItem::Kind::kKernel && it.ast != nullptr) {
      ++e.kernels;
      e.flops = SatAdd(e.flops, EstimateKernelFlops(it.ast));
    }
  }
  for (const UOpPtr& o : outputs) account(BufferOf(o.get()));
  return e;
}

absl::Status CheckWork(const WorkEstimate& e, const WorkLimits& limits) {
  const std::string kernels = absl::StrCat(e.kernels, e.kernels == 1 ? " kernel" : " kernels");
  if (limits.max_flops > 0 && e.flops > limits.max_flops) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the run needs an estimated ", Figure(e.flops), " FLOPs (", kernels, "), over the limit of ",
        limits.max_flops, " FLOPs per run (max_flops); refused before launch"));
  }
  if (limits.max_bytes_moved > 0 && e.bytes_moved > limits.max_bytes_moved) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the run moves an estimated ", Figure(e.bytes_moved), " bytes (", kernels,
        "), over the limit of ", limits.max_bytes_moved, " bytes per run (max_bytes_moved); refused before launch"));
  }
  if (limits.max_memory_bytes > 0 && e.peak_bytes() > limits.max_memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the run needs an estimated ", Figure(e.peak_bytes()), " bytes of memory (", Figure(e.held_bytes),
        " held, ", Figure(e.new_bytes), " new), over the limit of ", limits.max_memory_bytes,
        " bytes per run (max_memory_bytes); refused before allocation"));
  }
  return absl::OkStatus();
}

}  // namespace kiln
