#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/uop/parser.h"
#include "engine/uop/printer.h"
#include "engine/uop/uop.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

UOpPtr MustCreate(Op op, DType dtype, std::vector<UOpPtr> src, Arg arg = {}, int64_t tag = 0) {
  absl::StatusOr<UOpPtr> u = UOp::Create(op, dtype, src, std::move(arg), tag);
  EXPECT_TRUE(u.ok()) << OpName(op) << ": " << u.status();
  return u.ok() ? *u : nullptr;
}

UOpPtr F32(double v) { return UOp::Const(dtypes::kFloat32, v); }
UOpPtr I32(int64_t v) { return UOp::Const(dtypes::kInt32, v); }

// A 3x4 float32 tensor (BUFFER -> RESHAPE).
UOpPtr Tensor34() {
  UOpPtr u = MustCreate(Op::UNIQUE, dtypes::kVoid, {}, int64_t{7});
  UOpPtr d = MustCreate(Op::DEVICE, dtypes::kVoid, {}, std::string("CPU"));
  UOpPtr b = MustCreate(Op::BUFFER, dtypes::kFloat32, {u, d}, int64_t{12});
  return MustCreate(Op::RESHAPE, dtypes::kFloat32, {b}, IntVec{3, 4});
}

// A valid node for `op` (its sources, args and dtypes chosen per op), built through Create.
UOpPtr SampleNode(Op op) {
  DType f = dtypes::kFloat32, i = dtypes::kInt32, v = dtypes::kVoid;
  switch (op) {
    case Op::SPECIAL:
      return MustCreate(op, dtypes::kIndex, {UOp::ConstInt(16)}, std::string("gidx0"));
    case Op::BUFFER:
      return MustCreate(op, f, {}, int64_t{12});
    case Op::UNIQUE:
      return MustCreate(op, v, {}, int64_t{3});
    case Op::DEVICE:
      return MustCreate(op, v, {}, std::string("CL:0"));
    case Op::DEFINE_VAR:
      return MustCreate(op, dtypes::kIndex, {}, VarArg{"batch", 1, 64});
    case Op::BIND:
      return MustCreate(op, dtypes::kIndex, {UOp::Variable("b", 1, 8), UOp::ConstInt(3)});
    case Op::DEFINE_LOCAL:
      return MustCreate(op, f.Ptr(AddrSpace::kLocal), {}, int64_t{256});
    case Op::DEFINE_REG:
      return MustCreate(op, f.Vec(4).Ptr(AddrSpace::kReg), {}, int64_t{4});
    case Op::PARAM:
      return MustCreate(op, f.Ptr(), {}, int64_t{1});
    case Op::KERNEL:
      return MustCreate(op, v, {Tensor34()}, std::string("r_3_4"));
    case Op::GEP: {
      UOpPtr vec = MustCreate(Op::VECTORIZE, f.Vec(4), {F32(1), F32(2), F32(3), F32(4)});
      return MustCreate(op, f.Vec(2), {vec}, IntVec{0, 2});
    }
    case Op::INDEX:
      return MustCreate(op, f.Ptr(), {MustCreate(Op::PARAM, f.Ptr(), {}, int64_t{0}), I32(5)});
    case Op::LOAD: {
      UOpPtr idx =
          MustCreate(Op::INDEX, f.Ptr(), {MustCreate(Op::PARAM, f.Ptr(), {}, int64_t{0}), I32(5)});
      return MustCreate(op, f, {idx});
    }
    case Op::STORE: {
      UOpPtr idx =
          MustCreate(Op::INDEX, f.Ptr(), {MustCreate(Op::PARAM, f.Ptr(), {}, int64_t{0}), I32(5)});
      return MustCreate(op, v, {idx, F32(2.5)});
    }
    case Op::WMMA:
      return MustCreate(op, f.Vec(8), {F32(1), F32(2), F32(3)}, std::string("WMMA_8_16_16"));
    case Op::CAST:
      return MustCreate(op, i, {F32(1.5)});
    case Op::BITCAST:
      return MustCreate(op, i, {F32(1.5)});
    case Op::WHERE:
      return MustCreate(op, f, {UOp::ConstBool(true), F32(1), F32(2)});
    case Op::MULACC:
      return MustCreate(op, f, {F32(1), F32(2), F32(3)});
    case Op::RANGE:
      return MustCreate(op, dtypes::kIndex, {UOp::ConstInt(10)}, AxisArg{3, AxisType::kReduce});
    case Op::REDUCE: {
      UOpPtr r = UOp::Range(10, 0, AxisType::kReduce);
      return MustCreate(op, f, {F32(1), r}, Op::ADD);
    }
    case Op::END:
      return MustCreate(op, v, {F32(1), UOp::Range(4, 1)});
    case Op::CONST:
      return MustCreate(op, dtypes::kFloat64, {}, ConstFloat(0.1));
    case Op::CUSTOM:
    case Op::CUSTOMI:
      return MustCreate(op, f, {F32(1)}, std::string("{0}*2"));
    case Op::COPY:
      return MustCreate(op, f, {Tensor34(), MustCreate(Op::DEVICE, v, {}, std::string("CL:1"))});
    case Op::ASSIGN:
      return MustCreate(op, f, {Tensor34(), Tensor34()});
    case Op::ROWS:
      return MustCreate(op, f, {Tensor34(), MustCreate(Op::BIND, dtypes::kIndex, {UOp::Variable("rows", 1, 3),
                                                                                 UOp::ConstInt(2)})});
    case Op::RESHAPE:
      return MustCreate(op, f, {Tensor34()}, IntVec{2, 6});
    case Op::PERMUTE:
      return MustCreate(op, f, {Tensor34()}, IntVec{1, 0});
    case Op::EXPAND: {
      UOpPtr t = MustCreate(Op::RESHAPE, f, {Tensor34()}, IntVec{12, 1});
      return MustCreate(op, f, {t}, IntVec{12, 5});
    }
    case Op::PAD:
      return MustCreate(op, f, {Tensor34()}, IntVec{1, 0, 2, 2});
    case Op::SHRINK:
      return MustCreate(op, f, {Tensor34()}, IntVec{0, 2, 1, 3});
    case Op::FLIP:
      return MustCreate(op, f, {Tensor34()}, IntVec{0, 1});
    case Op::REDUCE_AXIS:
      return MustCreate(op, f, {Tensor34()}, ReduceArg{Op::MAX, {1}});
    default:
      break;
  }
  if (IsUnary(op)) return MustCreate(op, f, {F32(0.5)}, {}, /*tag=*/op == Op::NEG ? 2 : 0);
  if (IsBinary(op)) {
    bool int_op = op == Op::SHL || op == Op::SHR || op == Op::CDIV || op == Op::CMOD ||
                  op == Op::FLOORDIV || op == Op::FLOORMOD || op == Op::XOR || op == Op::OR ||
                  op == Op::AND || op == Op::THREEFRY;
    DType in = int_op ? i : f;
    UOpPtr a = int_op ? I32(6) : F32(6), b = int_op ? I32(4) : F32(4);
    return MustCreate(op, IsComparison(op) ? dtypes::kBool : in, {a, b});
  }
  // Structural ops with free arity: their minimum number of sources (at least one).
  const OpInfo& info = GetOpInfo(op);
  std::vector<UOpPtr> src;
  int n = info.max_src == 0 ? 0 : std::max(info.min_src, 1);
  for (int k = 0; k < n; ++k) src.push_back(F32(static_cast<double>(k)));
  return MustCreate(op, op == Op::VECTORIZE ? f.Vec(static_cast<uint16_t>(n)) : v, src);
}

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

TEST(PrinterParserTest, EveryOpRoundTrips) {
  int checked = 0;
  for (int k = 0; k < kNumOps; ++k) {
    Op op = static_cast<Op>(k);
    UOpPtr node = SampleNode(op);
    ASSERT_TRUE(node) << OpName(op);
    ASSERT_EQ(node->op(), op);
    std::string text = PrintGraph(node);
    absl::StatusOr<std::vector<UOpPtr>> parsed = ParseGraph(text);
    if (IsInternalOnly(op)) {
      ASSERT_FALSE(parsed.ok()) << text;
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("internal only"));
      continue;
    }
    ASSERT_TRUE(parsed.ok()) << OpName(op) << ": " << parsed.status() << "\n" << text;
    ASSERT_EQ(parsed->size(), 1u);
    EXPECT_EQ((*parsed)[0].get(), node.get()) << text;
    EXPECT_EQ(PrintGraph((*parsed)[0]), text);
    ++checked;
  }
  EXPECT_EQ(checked, kNumOps - 2);
}

TEST(PrinterParserTest, PrintedFormIsReadable) {
  UOpPtr x = UOp::Variable("x", 0, 10);
  UOpPtr sum = x + 4;
  UOpPtr sink = UOp::Sink({sum})->WithTag(1);
  EXPECT_EQ(PrintGraph(sink),
            "%0 = DEFINE_VAR index () var(\"x\", 0, 10)\n"
            "%1 = CONST index () 4\n"
            "%2 = ADD index (%0, %1)\n"
            "%3 = SINK void (%2) tag=1\n"
            "roots %3\n");
  EXPECT_EQ(PrintNode(*sum), "ADD index (DEFINE_VAR, CONST)");
  EXPECT_EQ(PrintNode(*UOp::Range(8, 2, AxisType::kGlobal)), "RANGE index (CONST) axis(2, GLOBAL)");
  EXPECT_EQ(PrintArg(ReduceArg{Op::ADD, {0, 2}}), "reduce(ADD, (0, 2))");
  EXPECT_EQ(PrintArg(ConstFloat(1.0)), "1.0");
  EXPECT_EQ(PrintArg(ConstFloat(-0.0)), "-0.0");
  EXPECT_EQ(PrintArg(ConstFloat(0.1)), "0.1");
  EXPECT_EQ(PrintArg(ConstFloat(-std::numeric_limits<double>::infinity())), "-inf");
  EXPECT_EQ(QuoteString("a\"b\\\n\x01"), "\"a\\\"b\\\\\\n\\x01\"");
}

TEST(PrinterParserTest, HandWrittenTextWithCommentsAndNames) {
  absl::StatusOr<UOpPtr> r = ParseGraphSingle(
      "# a comment line\n"
      "\n"
      "  %x = DEFINE_VAR index () var(\"x\", 0, 10)   # trailing comment\n"
      "%four=CONST index() 4\r\n"
      "%sum = ADD index (%x,%four)\n"
      "roots %sum\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->get(), (UOp::Variable("x", 0, 10) + 4).get());
}

TEST(PrinterParserTest, SpecialDoublesAreBitExact) {
  const double vals[] = {std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity(),
                         -0.0,
                         0.0,
                         0.1,
                         -0.1,
                         1e-310,
                         1.0 / 3.0,
                         1e300,
                         std::numeric_limits<double>::max(),
                         std::numeric_limits<double>::min(),
                         std::numeric_limits<double>::denorm_min(),
                         123456789.0,
                         2.5e-5};
  std::vector<UOpPtr> roots;
  for (double v : vals) {
    roots.push_back(UOp::Const(dtypes::kFloat64, v));
    roots.push_back(UOp::Const(dtypes::kFloat32, v));
  }
  std::string text = PrintGraph(roots);
  EXPECT_THAT(text, HasSubstr(" nan\n"));
  EXPECT_THAT(text, HasSubstr(" -inf\n"));
  EXPECT_THAT(text, HasSubstr(" -0.0\n"));
  EXPECT_THAT(text, HasSubstr(" 1e-310\n"));
  absl::StatusOr<std::vector<UOpPtr>> parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), roots.size());
  for (size_t k = 0; k < roots.size(); ++k) {
    EXPECT_EQ((*parsed)[k].get(), roots[k].get()) << k;
    EXPECT_EQ(std::get<ConstFloat>((*parsed)[k]->arg()).Bits(),
              std::get<ConstFloat>(roots[k]->arg()).Bits());
  }
}

TEST(PrinterParserTest, IntegerExtremes) {
  UOpPtr u64max = UOp::Make(Op::CONST, dtypes::kUInt64, {}, int64_t{-1});
  UOpPtr i64min = UOp::Const(dtypes::kInt64, std::numeric_limits<int64_t>::min());
  UOpPtr i64max = UOp::Const(dtypes::kInt64, std::numeric_limits<int64_t>::max());
  UOpPtr big_u = UOp::Make(Op::CONST, dtypes::kUInt64, {}, std::numeric_limits<int64_t>::min());
  std::vector<UOpPtr> roots = {u64max, i64min, i64max, big_u, UOp::ConstBool(false)};
  std::string text = PrintGraph(roots);
  EXPECT_THAT(text, HasSubstr("CONST ulong () 18446744073709551615\n"));
  EXPECT_THAT(text, HasSubstr("CONST long () -9223372036854775808\n"));
  EXPECT_THAT(text, HasSubstr("CONST ulong () 9223372036854775808\n"));
  absl::StatusOr<std::vector<UOpPtr>> parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (size_t k = 0; k < roots.size(); ++k) EXPECT_EQ((*parsed)[k].get(), roots[k].get()) << k;
}

TEST(PrinterParserTest, StringsWithEscapesAndUnicode) {
  const std::string names[] = {"plain",
                               "",
                               "quote\"back\\slash",
                               "new\nline\ttab\rcr",
                               "caf\xc3\xa9 \xe2\x82\xac",
                               std::string("nul\0byte", 8),
                               "#not a comment",
                               "\x7f\xff\x01"};
  std::vector<UOpPtr> roots;
  for (const std::string& s : names) {
    roots.push_back(UOp::Make(Op::DEVICE, dtypes::kVoid, {}, s));
    roots.push_back(UOp::Variable(s, -5, 5));
  }
  std::string text = PrintGraph(roots);
  for (char c : text) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << static_cast<int>(c);
  absl::StatusOr<std::vector<UOpPtr>> parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (size_t k = 0; k < roots.size(); ++k) EXPECT_EQ((*parsed)[k].get(), roots[k].get()) << k;
}

TEST(PrinterParserTest, MultiRootGraphKeepsOrderAndRepeats) {
  UOpPtr x = UOp::Variable("m", 0, 100);
  UOpPtr a = x * 3, b = x + 7, c = Lt(a, b);
  std::vector<UOpPtr> roots = {c, a, b, a};
  absl::StatusOr<std::vector<UOpPtr>> parsed = ParseGraph(PrintGraph(roots));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 4u);
  for (size_t k = 0; k < roots.size(); ++k) EXPECT_EQ((*parsed)[k].get(), roots[k].get());
  absl::StatusOr<std::vector<UOpPtr>> none = ParseGraph("roots\n");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(PrinterParserTest, DeepChainRoundTripsWithoutRecursion) {
  UOpPtr e = UOp::Variable("chain", 0, 1);
  for (int k = 0; k < 100000; ++k) e = e + 1;
  std::string text = PrintGraph(e);
  absl::StatusOr<UOpPtr> parsed = ParseGraphSingle(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->get(), e.get());
}

// ---------------------------------------------------------------------------------------------
// Malformed input
// ---------------------------------------------------------------------------------------------

struct BadCase {
  const char* name;
  std::string text;
  const char* want;  // a key phrase of the message
};

TEST(PrinterParserTest, MalformedInputIsRejectedWithALineNumber) {
  const std::string c0 = "%0 = CONST int () 1\n";
  const std::vector<BadCase> cases = {
      {"unknown op", c0 + "%1 = FOO int (%0)\nroots %1\n", "line 2: unknown op 'FOO'"},
      {"unknown dtype", "%0 = CONST flaot () 1.0\nroots %0\n", "line 1: unknown dtype 'flaot'"},
      {"bad vec dtype", "%0 = CONST float.vec(0) () 1.0\nroots %0\n", "unknown dtype"},
      {"wrong arity", c0 + "%1 = ADD int (%0)\nroots %1\n", "line 2: ADD: wrong number of sources"},
      {"dtype mismatch", c0 + "%1 = CONST float () 1.0\n%2 = ADD int (%0, %1)\nroots %2\n",
       "line 3: ADD: sources must share one dtype"},
      {"unary int", c0 + "%1 = SQRT int (%0)\nroots %1\n", "needs a float dtype"},
      {"malformed arg", "%0 = CONST int () 1x\nroots %0\n", "line 1: malformed number '1x'"},
      {"unknown arg word", "%0 = CONST int () bogus\nroots %0\n", "unknown word 'bogus'"},
      {"arg kind", "%0 = RANGE index () \"x\"\nroots %0\n", "wrong number of sources"},
      {"arg kind 2", c0 + "%1 = RANGE int (%0) \"x\"\nroots %1\n",
       "line 2: RANGE: wrong kind of arg"},
      {"reduce op", c0 + "%1 = REDUCE int (%0) SUB\nroots %1\n", "wrong kind of arg"},
      {"dangling", c0 + "%1 = NEG int (%7)\nroots %1\n", "line 2: dangling reference %7"},
      {"self reference", "%0 = NEG int (%0)\nroots %0\n", "dangling reference %0"},
      {"dangling root", c0 + "roots %9\n", "line 2: dangling reference %9"},
      {"duplicate", c0 + "%0 = CONST int () 2\nroots %0\n",
       "line 2: duplicate definition of %0 (first defined on line 1)"},
      {"trailing garbage", "%0 = CONST int () 1 tag=2 extra\nroots %0\n",
       "line 1: unexpected trailing text 'extra'"},
      {"text after roots", c0 + "roots %0\n%1 = CONST int () 2\n",
       "line 3: trailing text after the 'roots' line"},
      {"missing roots", c0, "missing 'roots' line"},
      {"unterminated string", "%0 = DEVICE void () \"CPU\nroots %0\n",
       "line 1: unterminated string"},
      {"bad escape", "%0 = DEVICE void () \"a\\qb\"\nroots %0\n", "bad escape"},
      {"bad hex escape", "%0 = DEVICE void () \"a\\xZZ\"\nroots %0\n", "bad \\x escape"},
      {"int overflow", "%0 = CONST int () 99999999999999999999\nroots %0\n",
       "line 1: integer overflow"},
      {"signed overflow", "%0 = CONST long () 9223372036854775808\nroots %0\n", "integer overflow"},
      {"negative overflow", "%0 = CONST ulong () -9223372036854775809\nroots %0\n",
       "integer overflow"},
      {"tag overflow", "%0 = CONST int () 1 tag=18446744073709551615\nroots %0\n",
       "integer overflow"},
      {"float range", "%0 = CONST double () 1e999\nroots %0\n", "float out of range"},
      {"malformed float", "%0 = CONST double () 1.2.3\nroots %0\n", "malformed number"},
      {"internal op", "%0 = CUSTOM float () \"asm\"\nroots %0\n",
       "line 1: op CUSTOM is internal only"},
      {"internal op i", "%0 = CUSTOMI float () \"x\"\nroots %0\n", "op CUSTOMI is internal only"},
      {"missing paren", c0 + "%1 = NEG int %0\nroots %1\n",
       "line 2: expected '(' to open the source list"},
      {"unclosed sources", c0 + "%1 = NEG int (%0\nroots %1\n", "expected ')' or ','"},
      {"not a statement", "hello world\nroots\n", "line 1: expected '%name = OP ...' or 'roots'"},
      {"missing equals", "%0 CONST int () 1\nroots %0\n", "expected '=' after %0"},
      {"empty ref", "% = CONST int () 1\nroots\n", "empty reference name"},
      {"bad axis", "%0 = CONST index () 4\n%1 = RANGE index (%0) axis(0, SIDEWAYS)\nroots %1\n",
       "line 2: unknown axis type 'SIDEWAYS'"},
      {"bad var", "%0 = DEFINE_VAR index () var(x, 0, 1)\nroots %0\n", "expected a string"},
      {"shape error", "%0 = BUFFER float () 12\n%1 = RESHAPE float (%0) (5, 5)\nroots %1\n",
       "line 2: RESHAPE: cannot reshape"},
      {"rank limit",
       "%0 = BUFFER float () 1\n%1 = RESHAPE float (%0) (" +
           [] {
             std::string s = "1";
             for (int k = 0; k < 70; ++k) s += ", 1";
             return s;
           }() +
           ")\nroots %1\n",
       "over the rank limit"},
      {"huge intvec",
       "%0 = CONST float () 1.0\n%1 = GEP float (%0) (" +
           [] {
             std::string s = "0";
             for (int k = 0; k < 2000; ++k) s += ", 0";
             return s;
           }() +
           ")\nroots %1\n",
       "int vector longer than the limit"},
      {"long line",
       "%0 = DEVICE void () \"" + std::string(kMaxParseLineBytes + 10, 'a') + "\"\nroots %0\n",
       "line 1: line too long"},
      {"reshape overflow",
       "%0 = BUFFER float () 12\n%1 = RESHAPE float (%0) (4611686018427387904, 4, 3)\nroots %1\n",
       "line 2: RESHAPE: element count of the new shape overflows int64"},
      {"pad overflow",
       "%0 = BUFFER float () 9223372036854775807\n%1 = PAD float (%0) (1, 0)\nroots %1\n",
       "PAD: padded dim 0 overflows int64"},
      {"pointer const", "%0 = CONST float.ptr() () 1.0\nroots %0\n", "pointer dtype"},
  };
  EXPECT_GE(cases.size(), 15u);
  for (const BadCase& c : cases) {
    absl::StatusOr<std::vector<UOpPtr>> r = ParseGraph(c.text);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.want)) << c.name;
  }
}

TEST(PrinterParserTest, ParseGraphSingleNeedsOneRoot) {
  absl::StatusOr<UOpPtr> r = ParseGraphSingle("%0 = CONST int () 1\nroots %0, %0\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("exactly one root"));
}

// ---------------------------------------------------------------------------------------------
// Robustness: randomly mutated valid text never crashes the parser.
// ---------------------------------------------------------------------------------------------

TEST(PrinterParserTest, MutatedInputNeverCrashes) {
  std::vector<UOpPtr> seeds;
  for (int k = 0; k < kNumOps; ++k) {
    Op op = static_cast<Op>(k);
    if (!IsInternalOnly(op)) seeds.push_back(SampleNode(op));
  }
  seeds.push_back(UOp::Const(dtypes::kUInt64, int64_t{-1}));
  seeds.push_back(
      UOp::Sink({UOp::Variable("f\"z", 0, 9) * 3 + 1, UOp::Const(dtypes::kFloat64, -0.0)}));
  std::vector<std::string> bases;
  for (const UOpPtr& s : seeds) bases.push_back(PrintGraph(s));
  bases.push_back(PrintGraph(seeds));
  const std::vector<std::string> tokens = {"%",
                                           "(",
                                           ")",
                                           ",",
                                           "\"",
                                           "\\",
                                           "=",
                                           "#",
                                           "\n",
                                           " ",
                                           "-",
                                           ".",
                                           "e+",
                                           "tag=",
                                           "roots",
                                           "%0",
                                           "%999",
                                           "nan",
                                           "inf",
                                           "999999999999999999999",
                                           "axis(",
                                           "var(",
                                           "reduce(",
                                           "4611686018427387904",
                                           "9223372036854775807",
                                           "ADD",
                                           "CUSTOM",
                                           "float.vec(",
                                           ".ptr(",
                                           "(1, 2, 3)",
                                           "\\x",
                                           "\xff",
                                           std::string(1, '\0')};
  std::mt19937_64 rng(20240611);
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text = bases[rng() % bases.size()];
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      size_t at = rng() % text.size();
      switch (rng() % 8) {
        case 5: {  // another digit
          size_t d = text.find_first_of("0123456789", at);
          if (d != std::string::npos) text[d] = static_cast<char>('0' + rng() % 10);
          break;
        }
        case 6: {  // another op: the word after " = "
          size_t eq = text.find(" = ", at);
          if (eq == std::string::npos) eq = text.find(" = ");
          size_t end = text.find(' ', eq + 3);
          if (eq == std::string::npos || end == std::string::npos) break;
          text.replace(eq + 3, end - eq - 3, OpName(static_cast<Op>(rng() % kNumOps)));
          break;
        }
        case 7: {  // another dtype: the word before " ("
          static const char* const kDTypes[] = {"float",       "int",   "bool", "void",
                                                "index",       "ulong", "half", "float.vec(4)",
                                                "float.ptr()", "double"};
          size_t paren = text.find(" (", at);
          if (paren == std::string::npos) break;
          size_t sp = text.rfind(' ', paren - 1);
          if (sp == std::string::npos || sp + 1 >= paren) break;
          text.replace(sp + 1, paren - sp - 1, kDTypes[rng() % 10]);
          break;
        }
        case 0:
          text[at] = static_cast<char>(rng() & 0xff);
          break;  // flip a byte
        case 1:
          text.erase(at, 1 + rng() % 16);
          break;  // delete a run
        case 2:
          text.insert(at, tokens[rng() % tokens.size()]);
          break;  // insert a token
        case 3:
          text.insert(at, text.substr(rng() % text.size(), 1 + rng() % 40));
          break;    // duplicate
        default: {  // swap two digits
          size_t b = rng() % text.size();
          std::swap(text[at], text[b]);
        }
      }
    }
    absl::StatusOr<std::vector<UOpPtr>> r = ParseGraph(text);
    if (r.ok()) {
      ++ok;
      // Whatever parsed must print and parse back to the same nodes.
      absl::StatusOr<std::vector<UOpPtr>> again = ParseGraph(PrintGraph(*r));
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_EQ(*again, *r);
    } else {
      ++failed;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(r.status().message()), HasSubstr("line "));
    }
  }
  EXPECT_EQ(ok + failed, 2000);
  EXPECT_GT(failed, 0);
  EXPECT_GT(ok, 0);  // some mutations (digits, ops, dtypes) still parse
}

}  // namespace
}  // namespace kiln
