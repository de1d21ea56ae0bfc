#include <cstdlib>
#include <string>
#include <thread>

#include "engine/base/check.h"
#include "engine/base/env.h"
#include "engine/base/sha256.h"
#include "engine/base/status.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status QuarterInto(int x, int* out) {
  KILN_ASSIGN_OR_RETURN(int h, Half(x));
  KILN_ASSIGN_OR_RETURN(*out, Half(h));
  return absl::OkStatus();
}

absl::Status FailIfNegative(int x) {
  KILN_RETURN_IF_ERROR(x < 0 ? absl::OutOfRangeError("negative") : absl::OkStatus());
  return absl::OkStatus();
}

TEST(StatusMacrosTest, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(QuarterInto(8, &out).ok());
  EXPECT_EQ(out, 2);
  absl::Status st = QuarterInto(6, &out);  // 6/2 = 3 is odd
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "odd");
}

TEST(StatusMacrosTest, ReturnIfError) {
  EXPECT_TRUE(FailIfNegative(1).ok());
  EXPECT_EQ(FailIfNegative(-1).code(), absl::StatusCode::kOutOfRange);
}

TEST(CheckTest, CheckAbortsOnBrokenInvariant) {
  EXPECT_DEATH(KILN_CHECK_MSG(1 + 1 == 3, "arithmetic"), "KILN_CHECK failed.*arithmetic");
}

TEST(EnvTest, ContextOverridesAndRestores) {
  int64_t base = GetKnob(Knob::kDebug);
  {
    Context outer({{Knob::kDebug, 3}, {Knob::kNoOpt, 1}});
    EXPECT_EQ(GetKnob(Knob::kDebug), 3);
    EXPECT_EQ(GetKnob(Knob::kNoOpt), 1);
    {
      Context inner({{Knob::kDebug, 5}});
      EXPECT_EQ(GetKnob(Knob::kDebug), 5);
      EXPECT_EQ(GetKnob(Knob::kNoOpt), 1);
    }
    EXPECT_EQ(GetKnob(Knob::kDebug), 3);
  }
  EXPECT_EQ(GetKnob(Knob::kDebug), base);
}

TEST(EnvTest, ContextIsPerThread) {
  Context ctx({{Knob::kBeam, 4}});
  int64_t seen = -1;
  std::thread t([&] { seen = GetKnob(Knob::kBeam); });
  t.join();
  EXPECT_EQ(GetKnob(Knob::kBeam), 4);
  EXPECT_NE(seen, 4);
}

TEST(EnvTest, KnobNames) {
  EXPECT_EQ(KnobName(Knob::kDebug), "DEBUG");
  EXPECT_EQ(KnobName(Knob::kCacheLevel), "CACHELEVEL");
}

TEST(EnvTest, DefaultsWhenUnset) {
  // The CTest environment does not set JIT/CACHELEVEL; tinygrad's defaults are JIT=1, CACHELEVEL=2.
  if (std::getenv("JIT") == nullptr) {
    EXPECT_EQ(GetKnob(Knob::kJit), 1);
  }
  if (std::getenv("CACHELEVEL") == nullptr) {
    EXPECT_EQ(GetKnob(Knob::kCacheLevel), 2);
  }
}

TEST(Sha256Test, KnownVectors) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(DigestHex(Sha256Of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestHex(Sha256Of("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 h;
  h.Update("ab");
  h.Update("c");
  EXPECT_EQ(h.Final(), Sha256Of("abc"));
}

}  // namespace
}  // namespace kiln
