// The lowering's named rule tables: the extension point (a user's table before/after a named stage, the seed's
// "middleware" rule a*1.0 -> a+a), its counters in a caller-owned RewriteStats, and DEBUG>=5 naming every pass and
// table. The hooked kernel runs on INTERP and is compared with values computed here from the inputs.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/env.h"
#include "engine/codegen/codegen.h"
#include "engine/rewrite/rewrite_stats.h"
#include "gtest/gtest.h"
#include "tests/backends/interp/kernel_builders.h"

namespace kiln {
namespace {

using namespace kiln::testing;  // NOLINT(build/namespaces)

constexpr int64_t kN = 4, kM = 16;

// out[i*m+j] = a[i*m+j] * 1.0 (float32).
UOpPtr TimesOneKernel() {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(kN, 0), r1 = UOp::Range(kM, 1);
  UOpPtr one = UOp::Const(dtypes::kFloat32, 1.0);
  UOpPtr v = UOp::Make(Op::MUL, dtypes::kFloat32, {Ld(Idx(a, r0 * kM + r1)), one});
  return Kernel({End(St(Idx(out, r0 * kM + r1), v), {r0, r1})});
}

std::shared_ptr<const PatternMatcher> Middleware() {
  return std::make_shared<PatternMatcher>(
      std::vector<Rule>{{UPat::Var("a", dtypes::kFloat32) * 1.0,
                         [](const Bindings& b) { return b["a"] + b["a"]; }, "a*1.0 -> a+a"}},
      "middleware");
}

std::vector<float> Input() {
  std::vector<float> a(kN * kM);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i) - 3.0f;
  return a;
}

// Lowers (with `opts`) and runs on INTERP; returns out.
std::vector<float> LowerAndRunKernel(const codegen::LowerOptions& opts) {
  std::vector<float> a = Input();
  std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>(a.size() * 4), std::vector<uint8_t>(a.size() * 4)};
  std::memcpy(bufs[1].data(), a.data(), a.size() * 4);
  absl::Status st = LowerAndRun(TimesOneKernel(), codegen::Target{}, opts, bufs);
  EXPECT_TRUE(st.ok()) << st;
  std::vector<float> out(a.size());
  std::memcpy(out.data(), bufs[0].data(), out.size() * 4);
  return out;
}

TEST(PassHooksTest, MiddlewareRuleFiresAndIsCounted) {
  codegen::PassHooks hooks;
  hooks.rules.push_back({"expand upcasts", codegen::ExtraRules::At::kAfter, "middleware", Middleware()});
  RewriteStats stats;
  codegen::LowerOptions opts;
  opts.hooks = &hooks;
  opts.stats = &stats;
  std::vector<float> out = LowerAndRunKernel(opts);
  std::vector<float> a = Input();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(out[i], a[i] + a[i]) << i;
  // One MUL per lane copy after "expand upcasts": at least one hit, and every hit is counted under the hook's pass.
  EXPECT_GE(stats.Hits("middleware", "a*1.0 -> a+a"), 1) << stats.Format();
  EXPECT_EQ(stats.Hits("middleware", "a*1.0 -> a+a"), stats.PassRewrites("middleware"));
  EXPECT_NE(stats.Format().find("middleware: a*1.0 -> a+a"), std::string::npos) << stats.Format();
}

TEST(PassHooksTest, WithoutTheHookTheKernelIsUnchanged) {
  RewriteStats stats;
  codegen::LowerOptions opts;
  opts.stats = &stats;
  std::vector<float> out = LowerAndRunKernel(opts);
  std::vector<float> a = Input();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(out[i], a[i]) << i;
  EXPECT_FALSE(stats.Ran("middleware"));
  EXPECT_EQ(stats.Hits("middleware", "a*1.0 -> a+a"), 0);
  // Every stage ran and is listed, in pipeline order.
  std::vector<RewriteStats::PassRow> passes = stats.Passes();
  std::vector<std::string> names;
  for (const auto& p : passes) {
    if (names.empty() || names.back() != p.pass) names.push_back(p.pass);
  }
  std::vector<std::string> stages;
  for (std::string_view s : codegen::LowerStageNames()) stages.emplace_back(s);
  EXPECT_EQ(names, stages);
}

TEST(PassHooksTest, BeforeAStageRunsBeforeIt) {
  // Before "lower index dtype" the index math is still `index`-typed; the float rule fires all the same, and the
  // hook's pass is listed between the stages it sits between.
  codegen::PassHooks hooks;
  hooks.rules.push_back({"lower index dtype", codegen::ExtraRules::At::kBefore, "", Middleware()});
  RewriteStats stats;
  codegen::LowerOptions opts;
  opts.hooks = &hooks;
  opts.stats = &stats;
  std::vector<float> out = LowerAndRunKernel(opts);
  std::vector<float> a = Input();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(out[i], a[i] + a[i]) << i;
  EXPECT_GE(stats.Hits("lower index dtype [before]", "a*1.0 -> a+a"), 1) << stats.Format();
  std::vector<RewriteStats::PassRow> passes = stats.Passes();
  size_t hook = 0, stage = 0, prev = 0;
  for (size_t i = 0; i < passes.size(); ++i) {
    if (passes[i].pass == "lower index dtype [before]") hook = i;
    if (passes[i].pass == "lower index dtype") stage = i;
    if (passes[i].pass == "final symbolic") prev = i;
  }
  EXPECT_LT(prev, hook);
  EXPECT_LT(hook, stage);
}

TEST(PassHooksTest, UnknownStageAndNullTableAreInvalidArgument) {
  codegen::PassHooks hooks;
  hooks.rules.push_back({"no such stage", codegen::ExtraRules::At::kAfter, "", Middleware()});
  codegen::LowerOptions opts;
  opts.hooks = &hooks;
  absl::StatusOr<codegen::Program> p = codegen::LowerKernel(TimesOneKernel(), codegen::Target{}, opts);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("no such stage"), std::string_view::npos);
  hooks.rules[0] = {"move gates", codegen::ExtraRules::At::kBefore, "", nullptr};
  p = codegen::LowerKernel(TimesOneKernel(), codegen::Target{}, opts);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PassHooksTest, Debug5PrintsEveryPassAndTableName) {
  codegen::PassHooks hooks;
  hooks.rules.push_back({"expand upcasts", codegen::ExtraRules::At::kAfter, "middleware", Middleware()});
  RewriteStats stats;  // DEBUG counts into its own sink and adds it to the caller's
  codegen::LowerOptions opts;
  opts.hooks = &hooks;
  opts.stats = &stats;
  // A kernel with a gated load (move gates) and an integer division by a variable (guard division) so those
  // tables fire too.
  UOpPtr out = Param(0, dtypes::kInt32), a = Param(1, dtypes::kInt32), b = Param(2, dtypes::kInt32);
  UOpPtr r0 = UOp::Range(kM, 0);
  UOpPtr la = Ld(Idx(a, r0, Lt(r0, UOp::Const(dtypes::kIndex, int64_t{8}))));
  UOpPtr v = UOp::Make(Op::CDIV, dtypes::kInt32, {la, Ld(Idx(b, r0))});
  UOpPtr ast = Kernel({End(St(Idx(out, r0), v), {r0})});
  ::testing::internal::CaptureStderr();
  absl::StatusOr<codegen::Program> p;
  {
    Context ctx({{Knob::kDebug, 5}});
    p = codegen::LowerKernel(ast, codegen::Target{}, opts);
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(p.ok()) << p.status();
  for (std::string_view stage : codegen::LowerStageNames()) {
    EXPECT_NE(err.find(absl::StrCat("pass '", std::string(stage), "'")), std::string::npos) << stage << "\n" << err;
  }
  for (const char* table : {"symbolic_indices", "fold_index_math", "expand", "split_ends", "lower_index_dtype",
                            "move_gates", "guard_division", "middleware"}) {
    EXPECT_NE(err.find(absl::StrCat("[", table, "]")), std::string::npos) << table << "\n" << err;
  }
  EXPECT_NE(err.find("move_gates: load(index(p,i,g)) -> load(index(p,i),0,g)"), std::string::npos) << err;
  EXPECT_GE(stats.Hits("guard division", "x/y -> where(y==0, 0, x/where(y==0, 1, y)) (and y==-1)"), 1) << err;
  // Below DEBUG 5 nothing is printed.
  ::testing::internal::CaptureStderr();
  {
    Context ctx({{Knob::kDebug, 0}});
    p = codegen::LowerKernel(ast, codegen::Target{}, opts);
  }
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("rewrite passes"), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln
