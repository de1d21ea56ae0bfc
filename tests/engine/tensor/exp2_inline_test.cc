// The CPU backend renders float32 EXP2 as inline arithmetic (Emitter::Exp2F32 in engine/codegen/render/
// llvm_ir_alu.cc) so that LLVM vectorizes it. Checked against the C library's exp2 (double, rounded to float) over
// a dense sweep of the whole range, the subnormal results, the overflow edge and the special values, realized on
// CPU (and on INTERP, which calls the library, as a control); and the rendered float32 kernel calls no exp2.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/render/renderer.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

// Distance in float ulps between a and b (both finite or both the same special).
double UlpDistance(float got, float want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e9;
  if (std::isinf(want) || want == 0) return got == want ? 0 : 1e9;
  const float ulp = std::nextafter(std::fabs(want), std::numeric_limits<float>::infinity()) - std::fabs(want);
  return std::fabs(static_cast<double>(got) - static_cast<double>(want)) / ulp;
}

std::vector<float> Inputs() {
  std::vector<float> x;
  for (int i = 0; i <= 200000; ++i) x.push_back(-160.0f + 300.0f * static_cast<float>(i) / 200000.0f);
  for (int i = 0; i < 20000; ++i) x.push_back(std::sin(0.37f * static_cast<float>(i)) * 3.0f);  // softmax-like
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 127.0f, 127.99f, 128.0f, 128.5f, -126.0f, -127.5f, -149.0f,
                  -149.5f, -150.0f, -151.0f, -1000.0f, 1000.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                  1e-30f, -1e-30f})
    x.push_back(v);
  return x;
}

class Exp2InlineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok()) GTEST_SKIP() << GetParam() << " backend not available";
  }
};

TEST_P(Exp2InlineTest, WithinOneUlpOfTheLibraryEverywhere) {
  const std::vector<float> x = Inputs();
  Tensor t = Tensor::FromVector(x, {static_cast<int64_t>(x.size())}, GetParam());
  auto got = t.Exp2().ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), x.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(std::exp2(static_cast<double>(x[i])));
    const float g = (*got)[i];
    if (want != 0 && std::fabs(want) < std::numeric_limits<float>::min()) {
      // Subnormal results: within one step of the smallest subnormal.
      ASSERT_LE(std::fabs(static_cast<double>(g) - want), std::numeric_limits<float>::denorm_min() * 1.01)
          << "exp2(" << x[i] << ")";
      continue;
    }
    const double d = UlpDistance(g, want);
    ASSERT_LE(d, 1.0) << "exp2(" << x[i] << ") = " << g << ", want " << want;
    worst = std::max(worst, d);
  }
  RecordProperty("worst_ulp", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Backends, Exp2InlineTest, ::testing::Values("CPU", "INTERP"));

TEST(Exp2InlineKernel, RendersNoCallForFloat32AndTheIntrinsicForFloat64) {
  backends::RegisterAllBackends();
  auto renderer = codegen::RendererFor("llvm");
  ASSERT_TRUE(renderer.ok()) << renderer.status();
  for (DType d : {dtypes::kFloat32, dtypes::kFloat64}) {
    Tensor x = Tensor::FromVector(std::vector<float>(64, 0.5f), {64}, "NULL").Cast(d);
    auto s = CreateSchedule({x.Exp2().uop()});
    ASSERT_TRUE(s.ok()) << s.status();
    codegen::Target target;
    target.renderer = "llvm";
    target.supports_vectors = true;
    target.vector_bytes = 32;
    std::string ir;
    for (const ScheduleItem& item : s->items) {
      if (item.kind != ScheduleItem::Kind::kKernel) continue;
      auto p = codegen::LowerKernel(item.ast, target, {});
      ASSERT_TRUE(p.ok()) << p.status();
      auto src = (*renderer)->Render(*p);
      ASSERT_TRUE(src.ok()) << src.status();
      ir += *src;
    }
    if (d == dtypes::kFloat32) {
      EXPECT_EQ(ir.find("llvm.exp2"), std::string::npos) << ir;
      EXPECT_NE(ir.find("llvm.rint"), std::string::npos) << ir;
    } else {
      // The intrinsic, on scalar lanes or on their vector (the lanes are one expression up to the store).
      EXPECT_TRUE(ir.find("llvm.exp2.f64") != std::string::npos || ir.find("llvm.exp2.v8f64") != std::string::npos)
          << ir;
    }
  }
}

}  // namespace
}  // namespace kiln
