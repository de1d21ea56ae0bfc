#include "engine/codegen/render/interp_text.h"

#include "gtest/gtest.h"
#include "tests/engine/codegen/render/test_programs.h"

namespace kiln::codegen {
namespace {

using namespace kiln::testprog;  // NOLINT

TEST(InterpTextTest, RoundTripKeepsLinearOrderAndHeader) {
  Program p = RowSum(3, 5);
  p.threads = 2;
  p.global_size[0] = 7;
  auto text = InterpTextRenderer().Render(p);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->rfind("# kiln-interp v1 name=r_3_5 buffers=0:float:3:out,1:float:15:in vars= ", 0), 0u) << *text;
  auto back = ParseInterpText(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, p.name);
  ASSERT_EQ(back->uops.size(), p.uops.size());
  for (size_t i = 0; i < p.uops.size(); ++i) EXPECT_EQ(back->uops[i], p.uops[i]) << i;
  ASSERT_EQ(back->buffers.size(), 2u);
  EXPECT_TRUE(back->buffers[0].is_output);
  EXPECT_EQ(back->buffers[1].size, 15);
  EXPECT_EQ(back->threads, 2);
  EXPECT_EQ(back->global_size[0], 7);
}

TEST(InterpTextTest, VarsRoundTrip) {
  UOpPtr out = Param(0, dtypes::kInt32);
  UOpPtr n = UOp::Make(Op::DEFINE_VAR, dtypes::kInt32, {}, Arg(VarArg{"n", 1, 8}));
  UOpPtr r = Range(n, 0);
  UOpPtr e = End({Store(Index(out, r), r), r});
  Program p = FromRoots("E_n", {e}, {Buf(0, dtypes::kInt32, 8, true)}, {n});
  auto text = InterpTextRenderer().Render(p);
  ASSERT_TRUE(text.ok()) << text.status();
  auto back = ParseInterpText(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->vars.size(), 1u);
  EXPECT_EQ(back->vars[0], n);
}

TEST(InterpTextTest, BadHeadersAreErrors) {
  EXPECT_FALSE(ParseInterpText("").ok());
  EXPECT_FALSE(ParseInterpText("%0 = CONST int () 1\nroots %0\n").ok());
  EXPECT_FALSE(ParseInterpText("# kiln-interp v1 name=x; buffers= vars= global=1,1,1 local=1,1,1 threads=1\nroots\n").ok());
  EXPECT_FALSE(ParseInterpText("# kiln-interp v1 name=E buffers=0:flaot:4:out vars= global=1,1,1 local=1,1,1 threads=1\n"
                               "roots\n").ok());
  EXPECT_FALSE(ParseInterpText("# kiln-interp v1 name=E buffers= vars=0 global=1,1,1 local=1,1,1 threads=1\n"
                               "%0 = CONST int () 1\nroots %0\n").ok());
  EXPECT_TRUE(ParseInterpText("# kiln-interp v1 name=E buffers= vars= global=1,1,1 local=1,1,1 threads=1\n"
                              "%0 = CONST int () 1\nroots %0\n").ok());
}

TEST(RendererTest, RendererForNames) {
  ASSERT_TRUE(RendererFor("llvm").ok());
  EXPECT_EQ((*RendererFor("llvm"))->name(), "llvm");
  EXPECT_TRUE((*RendererFor("llvm"))->caps().has_threads);
  EXPECT_EQ((*RendererFor("interp"))->name(), "interp");
  EXPECT_EQ(RendererFor("metal").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(IsValidKernelName("r_16_4_32"));
  EXPECT_FALSE(IsValidKernelName("9abc"));
  EXPECT_FALSE(IsValidKernelName("a.b"));
}

}  // namespace
}  // namespace kiln::codegen
