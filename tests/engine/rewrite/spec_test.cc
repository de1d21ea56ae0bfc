// Spec verifier: tensor-level and kernel-level legality rules.
#include "engine/rewrite/spec.h"

#include <string>

#include <gtest/gtest.h>

namespace kiln {
namespace {


constexpr DType kF = dtypes::kFloat32;

UOpPtr Buffer(int64_t n, int64_t unique = 0, DType d = kF) {
  return UOp::Make(Op::BUFFER, d,
                   {UOp::Make(Op::UNIQUE, dtypes::kVoid, {}, Arg(unique)),
                    UOp::Make(Op::DEVICE, dtypes::kVoid, {}, Arg(std::string("CPU")))},
                   Arg(n));
}
UOpPtr Mov(Op op, const UOpPtr& x, IntVec arg) { return UOp::Make(op, x->dtype(), {x}, Arg(arg)); }

void ExpectTensorError(const UOpPtr& root, const std::string& op, const std::string& why) {
  absl::Status s = VerifyTensorGraph(root);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("tensor spec: " + op), std::string::npos) << s;
  EXPECT_NE(s.message().find(why), std::string::npos) << s;
}
void ExpectKernelError(const UOpPtr& root, const std::string& op, const std::string& why) {
  absl::Status s = VerifyKernel(root);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("kernel spec: " + op), std::string::npos) << s;
  EXPECT_NE(s.message().find(why), std::string::npos) << s;
}

// ** tensor spec **

TEST(TensorSpecTest, ValidGraph) {
  UOpPtr a = Mov(Op::RESHAPE, Buffer(12), {3, 4});
  UOpPtr b = Mov(Op::PERMUTE, Mov(Op::RESHAPE, Buffer(12, 1), {4, 3}), {1, 0});
  UOpPtr sum = UOp::Alu(Op::ADD, {a, b});
  UOpPtr red = UOp::Make(Op::REDUCE_AXIS, kF, {sum}, Arg(ReduceArg{Op::ADD, {1}}));
  UOpPtr cmp = UOp::Alu(Op::CMPLT, {red, UOp::Const(kF, 0.5)});
  UOpPtr w = Where(cmp, red, UOp::Const(kF, 1.0));
  UOpPtr e = Mov(Op::EXPAND, w, {3, 4});
  UOpPtr p = Mov(Op::SHRINK, Mov(Op::PAD, e, {1, 1, 0, 0}), {1, 4, 0, 4});
  UOpPtr f = Mov(Op::FLIP, p, {0, 1});
  UOpPtr c = UOp::Make(Op::CONTIGUOUS, dtypes::kFloat16, {Cast(f, dtypes::kFloat16)});
  EXPECT_TRUE(VerifyTensorGraph(UOp::Sink({c})).ok()) << VerifyTensorGraph(UOp::Sink({c}));
}

TEST(TensorSpecTest, RejectsCustom) {
  UOpPtr c = UOp::Make(Op::CUSTOM, kF, {}, Arg(std::string("evil()")));
  ExpectTensorError(UOp::Sink({c}), "CUSTOM", "internal-only");
}

TEST(TensorSpecTest, RejectsReshapeChangingNumel) {
  ExpectTensorError(Mov(Op::RESHAPE, Buffer(12), {5, 3}), "RESHAPE", "element count");
}

TEST(TensorSpecTest, RejectsBadPermutation) {
  UOpPtr x = Mov(Op::RESHAPE, Buffer(12), {3, 4});
  ExpectTensorError(Mov(Op::PERMUTE, x, {0, 0}), "PERMUTE", "permutation");
  ExpectTensorError(Mov(Op::PERMUTE, x, {0, 1, 2}), "PERMUTE", "");
}

TEST(TensorSpecTest, RejectsBadExpandPadShrinkFlip) {
  UOpPtr x = Mov(Op::RESHAPE, Buffer(12), {3, 4});
  ExpectTensorError(Mov(Op::EXPAND, x, {6, 4}), "EXPAND", "not 1");
  ExpectTensorError(Mov(Op::PAD, x, {1, 1}), "PAD", "2 ints per dim");
  ExpectTensorError(Mov(Op::SHRINK, x, {0, 4, 0, 4}), "SHRINK", "out of range");
  ExpectTensorError(Mov(Op::FLIP, x, {2, 0}), "FLIP", "0 or 1");
}

TEST(TensorSpecTest, RejectsBadReduceAxis) {
  UOpPtr x = Mov(Op::RESHAPE, Buffer(12), {3, 4});
  ExpectTensorError(UOp::Make(Op::REDUCE_AXIS, kF, {x}, Arg(ReduceArg{Op::ADD, {2}})), "REDUCE_AXIS",
                    "out of range");
  ExpectTensorError(UOp::Make(Op::REDUCE_AXIS, kF, {x}, Arg(ReduceArg{Op::ADD, {1, 0}})), "REDUCE_AXIS",
                    "sorted");
  ExpectTensorError(UOp::Make(Op::REDUCE_AXIS, kF, {x}, Arg(ReduceArg{Op::CMPLT, {0}})), "REDUCE_AXIS",
                    "ADD, MUL or MAX");
}

TEST(TensorSpecTest, RejectsAluDTypeMismatch) {
  UOpPtr a = Buffer(4), b = Buffer(4, 1, dtypes::kInt32);
  ExpectTensorError(UOp::Make(Op::ADD, kF, {a, b}), "ADD", "disagree in dtype");
  ExpectTensorError(UOp::Make(Op::CMPLT, kF, {a, a}), "CMPLT", "not bool");
  ExpectTensorError(UOp::Make(Op::WHERE, kF, {a, a, a}), "WHERE", "condition is not bool");
}

TEST(TensorSpecTest, RejectsBufferWithoutUniqueDevice) {
  UOpPtr bad = UOp::Make(Op::BUFFER, kF, {}, Arg(int64_t{4}));
  ExpectTensorError(bad, "BUFFER", "(UNIQUE, DEVICE)");
}

TEST(TensorSpecTest, RejectsConstArgKindMismatch) {
  UOpPtr bad = UOp::Make(Op::CONST, kF, {}, Arg(int64_t{1}));
  ExpectTensorError(bad, "CONST", "arg kind");
  EXPECT_TRUE(VerifyTensorGraph(UOp::Const(kF, 1.0)).ok());
  EXPECT_TRUE(VerifyTensorGraph(UOp::ConstBool(true)).ok());
}

TEST(TensorSpecTest, RejectsKernelOps) {
  UOpPtr p = UOp::Make(Op::PARAM, kF.Ptr(), {}, Arg(int64_t{0}));
  ExpectTensorError(p, "PARAM", "kernel-only");
}

// ** kernel spec **

struct Kernel {
  UOpPtr out = UOp::Make(Op::PARAM, kF.Ptr(), {}, Arg(int64_t{0}));
  UOpPtr in = UOp::Make(Op::PARAM, kF.Ptr(), {}, Arg(int64_t{1}));
  UOpPtr r = UOp::Range(16, 0);
};

UOpPtr Index(const UOpPtr& p, const UOpPtr& i) { return UOp::Make(Op::INDEX, p->dtype(), {p, i}); }

TEST(KernelSpecTest, ValidKernel) {
  Kernel k;
  UOpPtr ld = UOp::Make(Op::LOAD, kF, {Index(k.in, k.r)});
  UOpPtr val = UOp::Alu(Op::MUL, {ld, UOp::Const(kF, 2.0)});
  UOpPtr st = UOp::Make(Op::STORE, dtypes::kVoid, {Index(k.out, k.r), val});
  UOpPtr end = UOp::Make(Op::END, dtypes::kVoid, {st, k.r});
  absl::Status s = VerifyKernel(UOp::Sink({end}));
  EXPECT_TRUE(s.ok()) << s;
  // gated index and a register accumulator
  UOpPtr acc = UOp::Make(Op::DEFINE_REG, kF.Ptr(AddrSpace::kReg), {}, Arg(int64_t{1}));
  UOpPtr gate = Lt(k.r, 8);
  UOpPtr gi = UOp::Make(Op::INDEX, kF.Ptr(), {k.in, k.r, gate});
  UOpPtr st2 = UOp::Make(Op::STORE, dtypes::kVoid, {Index(acc, UOp::ConstInt(0)), UOp::Make(Op::LOAD, kF, {gi})});
  s = VerifyKernel(UOp::Sink({UOp::Make(Op::END, dtypes::kVoid, {st2, k.r})}));
  EXPECT_TRUE(s.ok()) << s;
}

TEST(KernelSpecTest, RejectsNonPointerParam) {
  UOpPtr p = UOp::Make(Op::PARAM, kF, {}, Arg(int64_t{0}));
  ExpectKernelError(UOp::Sink({p}), "PARAM", "pointer dtype");
}

TEST(KernelSpecTest, RejectsBadIndex) {
  Kernel k;
  ExpectKernelError(Index(k.in, UOp::Const(kF, 1.0)), "INDEX", "index/int");
  UOpPtr not_ptr = UOp::Make(Op::INDEX, kF.Ptr(), {UOp::Const(kF, 1.0), k.r});
  ExpectKernelError(not_ptr, "INDEX", "not a pointer");
  UOpPtr bad_gate = UOp::Make(Op::INDEX, kF.Ptr(), {k.in, k.r, k.r});
  ExpectKernelError(bad_gate, "INDEX", "gate is not bool");
  UOpPtr not_ptr_out = UOp::Make(Op::INDEX, kF, {k.in, k.r});
  ExpectKernelError(not_ptr_out, "INDEX", "must be a pointer");
}

TEST(KernelSpecTest, RejectsLoadNotFromIndexAndNonVoidStore) {
  Kernel k;
  ExpectKernelError(UOp::Make(Op::LOAD, kF, {k.r}), "LOAD", "not an INDEX");
  UOpPtr st = UOp::Make(Op::STORE, kF, {Index(k.out, k.r), UOp::Const(kF, 1.0)});
  ExpectKernelError(st, "STORE", "void");
  UOpPtr st_bad_val = UOp::Make(Op::STORE, dtypes::kVoid, {Index(k.out, k.r), UOp::ConstInt(1)});
  ExpectKernelError(st_bad_val, "STORE", "value dtype");
}

TEST(KernelSpecTest, RejectsBadRangeAndEnd) {
  UOpPtr r = UOp::Make(Op::RANGE, kF, {UOp::Const(kF, 4.0)}, Arg(AxisArg{0, AxisType::kLoop}));
  ExpectKernelError(r, "RANGE", "index/int");
  Kernel k;
  UOpPtr st = UOp::Make(Op::STORE, dtypes::kVoid, {Index(k.out, k.r), UOp::Const(kF, 1.0)});
  ExpectKernelError(UOp::Make(Op::END, dtypes::kVoid, {st, st}), "END", "RANGE");
}

TEST(KernelSpecTest, RejectsDefineRegWithoutRegPointer) {
  ExpectKernelError(UOp::Make(Op::DEFINE_REG, kF.Ptr(), {}, Arg(int64_t{4})), "DEFINE_REG", "reg pointer");
  ExpectKernelError(UOp::Make(Op::DEFINE_LOCAL, kF.Ptr(AddrSpace::kReg), {}, Arg(int64_t{4})),
                    "DEFINE_LOCAL", "local pointer");
  EXPECT_TRUE(VerifyKernel(UOp::Make(Op::DEFINE_LOCAL, kF.Ptr(AddrSpace::kLocal), {}, Arg(int64_t{4}))).ok());
}

TEST(KernelSpecTest, RejectsTensorOps) {
  ExpectKernelError(UOp::Sink({Mov(Op::RESHAPE, Buffer(4), {2, 2})}), "", "");
  UOpPtr x = UOp::Make(Op::CONTIGUOUS, kF, {UOp::Const(kF, 1.0)});
  ExpectKernelError(x, "CONTIGUOUS", "tensor-only");
}

TEST(KernelSpecTest, MemoChecksOnlyWhatAPassMadeAndStillCatchesIt) {
  // Codegen verifies after every pass with one memo: a kernel accepted once is not walked again, and a new node
  // above or beside accepted ones is still checked and reported as VerifyKernel reports it.
  Kernel k;
  UOpPtr ld = UOp::Make(Op::LOAD, kF, {Index(k.in, k.r)});
  UOpPtr good = UOp::Sink({UOp::Make(Op::END, dtypes::kVoid,
                                     {UOp::Make(Op::STORE, dtypes::kVoid, {Index(k.out, k.r), ld}), k.r})});
  SpecMemo memo;
  ASSERT_TRUE(VerifyKernel(good, memo).ok());
  EXPECT_TRUE(memo.Accepted(ld.get()));
  EXPECT_TRUE(memo.Accepted(good.get()));
  // The next "pass" stores a value of the wrong dtype, computed from the accepted load.
  UOpPtr bad_store = UOp::Make(Op::STORE, dtypes::kVoid, {Index(k.out, k.r), Cast(ld, dtypes::kInt32)});
  UOpPtr bad = UOp::Sink({UOp::Make(Op::END, dtypes::kVoid, {bad_store, k.r})});
  absl::Status s = VerifyKernel(bad, memo);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), VerifyKernel(bad).message());
  EXPECT_NE(s.message().find("STORE"), std::string::npos) << s;
  // A failed walk accepts none of its nodes: asked again, it fails again.
  EXPECT_FALSE(memo.Accepted(bad_store.get()));
  EXPECT_FALSE(VerifyKernel(bad, memo).ok());
  // A bad node under an accepted parent cannot exist (nodes are immutable), but a bad leaf beside them is found.
  UOpPtr bad_param = UOp::Make(Op::PARAM, kF, {}, Arg(int64_t{2}));
  EXPECT_FALSE(VerifyKernel(UOp::Sink({good->src(0), bad_param}), memo).ok());
}

TEST(SpecTest, FirstOffenderIsReported) {
  // Children are checked before parents: the bad CONST is named, not the ADD above it.
  UOpPtr bad = UOp::Make(Op::CONST, kF, {}, Arg(int64_t{1}));
  UOpPtr add = UOp::Make(Op::ADD, kF, {bad, UOp::Const(dtypes::kInt32, int64_t{2})});
  ExpectTensorError(UOp::Sink({add}), "CONST", "arg kind");
}

}  // namespace
}  // namespace kiln
