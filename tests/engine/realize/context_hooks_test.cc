// The lowering's extension point reached from a realize context (issue #18 item 3): a user rule table hooked
// after a named stage changes the kernels of that context only, and its hits show in the context's rewrite
// counters. References are computed here from the inputs.
#include <memory>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/codegen/codegen.h"
#include "engine/base/env.h"
#include "engine/realize/realize.h"
#include "engine/rewrite/rewrite_stats.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

// A deliberately visible rule: x*3.0 becomes x+x, so a hooked kernel computes 2x instead of 3x.
std::shared_ptr<codegen::PassHooks> TimesThreeToDouble() {
  auto hooks = std::make_shared<codegen::PassHooks>();
  hooks->rules.push_back({"expand upcasts", codegen::ExtraRules::At::kAfter, "user_middleware",
                          std::make_shared<PatternMatcher>(
                              std::vector<Rule>{{UPat::Var("a", dtypes::kFloat32) * 3.0,
                                                 [](const Bindings& b) { return b["a"] + b["a"]; }, "a*3.0 -> a+a"}},
                              "user_middleware")});
  return hooks;
}

std::vector<float> TimesThree(const std::vector<float>& x) {
  Tensor t = Tensor::FromVector<float>(x, {static_cast<int64_t>(x.size())});
  absl::StatusOr<std::vector<float>> out = (t * 3.0f).ToVector<float>();
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<float>();
}

TEST(RealizeContextHooksTest, UserRuleFiresOnItsContextOnlyAndIsCounted) {
  backends::RegisterAllBackends();
  const std::vector<float> x = {1.5f, -2.0f, 0.25f, 7.0f, 3.0f, -0.5f, 10.0f, 4.0f};
  RealizeContext hooked;
  hooked.SetPassHooks(TimesThreeToDouble());
  std::vector<float> got;
  {
    ScopedRealizeContext scope(hooked);
    got = TimesThree(x);
  }
  ASSERT_EQ(got.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], x[i] + x[i]) << i;
  EXPECT_GE(hooked.rewrite_stats().Hits("user_middleware", "a*3.0 -> a+a"), 1) << hooked.rewrite_stats().Format();

  // Another context (here the default one) lowers the same graph without the rule. CACHELEVEL=0: not from the
  // program cache of an earlier run (engine/realize/program_cache.h), so that its lowering is counted.
  RealizeContext plain;
  {
    ScopedRealizeContext scope(plain);
    Context no_disk({{Knob::kCacheLevel, 0}});
    got = TimesThree(x);
  }
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], x[i] * 3.0f) << i;
  EXPECT_FALSE(plain.rewrite_stats().Ran("user_middleware"));
  // The built-in named passes are counted on every context.
  EXPECT_TRUE(plain.rewrite_stats().Ran("expand upcasts")) << plain.rewrite_stats().Format();
  EXPECT_GE(plain.rewrite_stats().PassRewrites("expand upcasts"), 1) << plain.rewrite_stats().Format();
}

// The scheduler's fusion rules count into the realize context too, and DEBUG >= 5 prints their tables by name.
TEST(RealizeContextHooksTest, FusionRulesCountInTheContextAndShowAtDebug5) {
  backends::RegisterAllBackends();
  RealizeContext ctx;
  std::string err;
  {
    ScopedRealizeContext scope(ctx);
    Tensor t = Tensor::FromVector<float>({1.0f, 5.0f, -2.0f, 0.5f, 3.0f, 3.5f}, {2, 3});
    Tensor softmax_num = (t - t.Max({1}, true)).Exp();  // the max is broadcast back: stored by a fuse rule
    ::testing::internal::CaptureStderr();
    absl::StatusOr<std::vector<float>> out;
    {
      Context debug({{Knob::kDebug, 5}});
      out = softmax_num.ToVector<float>();
    }
    err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FLOAT_EQ((*out)[1], 1.0f);  // exp(5 - 5)
  }
  const char* rule = "reduce broadcast back or nested and large -> store";
  EXPECT_EQ(ctx.rewrite_stats().Hits("schedule fuse", rule), 1) << ctx.rewrite_stats().Format();
  EXPECT_TRUE(ctx.rewrite_stats().Ran("schedule realize")) << ctx.rewrite_stats().Format();
  EXPECT_NE(err.find("[schedule_realize]"), std::string::npos) << err;
  EXPECT_NE(err.find("[schedule_fuse]"), std::string::npos) << err;
  EXPECT_NE(err.find(rule), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln
