// Brute-force soundness: for random small expression trees over two variables with small ranges
// (one non-negative, one crossing zero), Evaluate(Simplify(e)) == Evaluate(e) for every variable
// assignment in range. Evaluate (const_fold.h semantics) is the independent oracle; assignments
// where the original divides by zero (undefined) are skipped.
#include <cstdint>

#include "engine/rewrite/graph_rewrite.h"
#include "engine/symbolic/symbolic.h"
#include "engine/symbolic/variable.h"
#include "gtest/gtest.h"
#include "tests/engine/symbolic/test_util.h"

namespace kiln {
namespace {

struct Lcg {
  uint64_t s;
  uint32_t Next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(s >> 33);
  }
  int64_t Range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(Next() % (hi - lo + 1)); }
};

class Gen {
 public:
  Gen(uint64_t seed, UOpPtr x, UOpPtr y) : rng_{seed}, x_(std::move(x)), y_(std::move(y)) {}

  UOpPtr Int(int depth) {
    if (depth == 0 || rng_.Next() % 5 == 0) return Leaf();
    UOpPtr a = Int(depth - 1);
    switch (rng_.Next() % 12) {
      case 0:
      case 1: return a + Int(depth - 1);
      case 2: return a * Int(depth - 1);
      case 3: return a * rng_.Range(-3, 4);
      case 4: return a / rng_.Range(1, 6);
      case 5: return a % rng_.Range(1, 6);
      case 6: return a / Int(depth - 1);
      case 7: return a % Int(depth - 1);
      case 8: return UOp::Alu(rng_.Next() % 2 ? Op::FLOORDIV : Op::FLOORMOD, {a, UOp::ConstInt(rng_.Range(-4, 6))});
      case 9: return Max(a, Int(depth - 1));
      case 10: return Where(Bool(depth - 1), a, Int(depth - 1));
      default: return a + rng_.Range(-8, 8);
    }
  }
  UOpPtr Bool(int depth) {
    UOpPtr a = Int(depth);
    switch (rng_.Next() % 4) {
      case 0: return Lt(a, Int(depth));
      case 1: return Lt(a, rng_.Range(-5, 10));
      case 2: return Ne(a, Int(depth));
      default: return Eq(a, UOp::ConstInt(rng_.Range(-3, 3)));
    }
  }

 private:
  UOpPtr Leaf() {
    switch (rng_.Next() % 3) {
      case 0: return x_;
      case 1: return y_;
      default: return UOp::ConstInt(rng_.Range(-4, 9));
    }
  }
  Lcg rng_;
  UOpPtr x_, y_;
};

void CheckSound(const PatternMatcher& pm, const char* name, uint64_t seed, int count) {
  UOpPtr x = UOp::Variable("x", 0, 9), y = UOp::Variable("y", -4, 4);
  Gen gen(seed, x, y);
  int checked = 0, failures = 0;
  for (int i = 0; i < count && failures < 5; ++i) {
    UOpPtr e = gen.Int(4);
    auto rs = GraphRewrite(e, pm, {.name = name});
    ASSERT_TRUE(rs.ok()) << rs.status() << " on " << testing::Render(e);
    UOpPtr s = *rs;
    for (int64_t xv = 0; xv <= 9; ++xv) {
      for (int64_t yv = -4; yv <= 4; ++yv) {
        VarVals vals = {{"x", xv}, {"y", yv}};
        auto want = Evaluate(e, vals);
        if (!want.ok()) continue;  // undefined (division by zero) in the original
        auto got = Evaluate(s, vals);
        ++checked;
        if (!got.ok() || *got != *want) {
          ++failures;
          ADD_FAILURE() << name << ": " << testing::Render(e) << "  ->  " << testing::Render(s)
                        << " at x=" << xv << " y=" << yv << ": want " << *want << " got "
                        << (got.ok() ? std::to_string(*got) : std::string(got.status().message()));
          break;
        }
      }
    }
  }
  EXPECT_GT(checked, count * 10);
}

TEST(SoundnessTest, SymbolicSimple) { CheckSound(SymbolicSimple(), "symbolic_simple", 1, 1500); }
TEST(SoundnessTest, Symbolic) { CheckSound(Symbolic(), "symbolic", 2, 3000); }
TEST(SoundnessTest, SymbolicMoreSeeds) { CheckSound(Symbolic(), "symbolic", 3, 3000); }
TEST(SoundnessTest, Sym) { CheckSound(Sym(), "sym", 4, 3000); }

}  // namespace
}  // namespace kiln
