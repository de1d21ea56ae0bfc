#include "engine/rewrite/upat.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln {

internal::UPatData& UPat::Mutable() {
  auto copy = std::make_shared<internal::UPatData>(*data_);
  internal::UPatData* raw = copy.get();
  data_ = std::move(copy);
  return *raw;
}

UPat UPat::Var(std::string name) {
  UPat p;
  p.Mutable().name = std::move(name);
  return p;
}

UPat UPat::Var(std::string name, DType dtype) { return Var(std::move(name)).WithDType(dtype); }

UPat UPat::CVar(std::string name) { return UPat(Op::CONST).Named(std::move(name)); }

UPat UPat::CVar(std::string name, DType dtype) {
  return CVar(std::move(name)).WithDType(dtype);
}

UPat UPat::Const(int64_t v) {
  UPat p(Op::CONST);
  internal::UPatData& d = p.Mutable();
  d.has_const = true;
  d.const_is_int = true;
  d.const_int = v;
  d.const_float = static_cast<double>(v);
  return p;
}

UPat UPat::Const(double v) {
  UPat p(Op::CONST);
  internal::UPatData& d = p.Mutable();
  d.has_const = true;
  d.const_is_int = false;
  d.const_float = v;
  return p;
}

UPat::UPat(Op op) : UPat() { Mutable().ops.Add(op); }

UPat::UPat(OpSet ops) : UPat() { Mutable().ops = ops; }

UPat UPat::Named(std::string name) const {
  UPat p = *this;
  p.Mutable().name = std::move(name);
  return p;
}

UPat UPat::WithDType(DType d) const { return WithDTypes({d}); }

UPat UPat::WithDTypes(std::vector<DType> ds) const {
  UPat p = *this;
  p.Mutable().dtypes = std::move(ds);
  return p;
}

UPat UPat::WithArg(Arg a) const {
  UPat p = *this;
  p.Mutable().arg = std::move(a);
  return p;
}

UPat UPat::Src(std::vector<UPat> exact) const {
  UPat p = *this;
  internal::UPatData& d = p.Mutable();
  d.src_kind = internal::UPatData::SrcKind::kExact;
  d.src = std::move(exact);
  return p;
}

UPat UPat::SrcPerm(std::vector<UPat> srcs) const {
  UPat p = *this;
  internal::UPatData& d = p.Mutable();
  d.src_kind = internal::UPatData::SrcKind::kPerm;
  d.src = std::move(srcs);
  return p;
}

UPat UPat::SrcRepeat(UPat each) const {
  UPat p = *this;
  internal::UPatData& d = p.Mutable();
  d.src_kind = internal::UPatData::SrcKind::kRepeat;
  d.src = {std::move(each)};
  return p;
}

UPat UPat::AllowAnyLen() const {
  UPat p = *this;
  p.Mutable().allow_any_len = true;
  return p;
}

UPat UPat::Where(std::function<bool(const UOp&)> pred) const {
  UPat p = *this;
  p.Mutable().preds.push_back(std::move(pred));
  return p;
}

UPat UPat::Any(std::vector<UPat> alternatives) {
  UPat p;
  p.Mutable().any = std::move(alternatives);
  return p;
}

std::string UPat::ToString() const {
  const internal::UPatData& d = *data_;
  if (!d.any.empty()) {
    std::vector<std::string> parts;
    for (const UPat& a : d.any) parts.push_back(a.ToString());
    return absl::StrCat("Any(", absl::StrJoin(parts, " | "), ")");
  }
  std::string head;
  if (d.has_const) {
    head = d.const_is_int ? absl::StrCat(d.const_int) : absl::StrCat(d.const_float);
  } else if (d.ops.Empty()) {
    head = d.name.empty() ? "_" : d.name;
  } else {
    std::vector<std::string> ops;
    for (int i = 0; i < kNumOps; ++i) {
      if (d.ops.Contains(static_cast<Op>(i))) ops.emplace_back(OpName(static_cast<Op>(i)));
    }
    head = ops.size() == 1 ? ops[0] : absl::StrCat("{", absl::StrJoin(ops, ","), "}");
    if (!d.name.empty()) absl::StrAppend(&head, ":", d.name);
  }
  if (d.src_kind == internal::UPatData::SrcKind::kNone) return head;
  std::vector<std::string> srcs;
  for (const UPat& s : d.src) srcs.push_back(s.ToString());
  const char* open = d.src_kind == internal::UPatData::SrcKind::kPerm     ? "["
                     : d.src_kind == internal::UPatData::SrcKind::kRepeat ? "("
                                                                          : "(";
  const char* close = d.src_kind == internal::UPatData::SrcKind::kPerm     ? "]"
                      : d.src_kind == internal::UPatData::SrcKind::kRepeat ? "...)"
                                                                           : ")";
  return absl::StrCat(head, open, absl::StrJoin(srcs, ", "), d.allow_any_len ? ", ..." : "",
                      close);
}

UPat AluPat(Op op, std::vector<UPat> srcs) {
  UPat p(op);
  return IsCommutative(op) ? p.SrcPerm(std::move(srcs)) : p.Src(std::move(srcs));
}

UPat operator+(const UPat& a, const UPat& b) { return AluPat(Op::ADD, {a, b}); }
UPat operator*(const UPat& a, const UPat& b) { return AluPat(Op::MUL, {a, b}); }
UPat operator/(const UPat& a, const UPat& b) { return AluPat(Op::CDIV, {a, b}); }
UPat operator%(const UPat& a, const UPat& b) { return AluPat(Op::CMOD, {a, b}); }
UPat operator&(const UPat& a, const UPat& b) { return AluPat(Op::AND, {a, b}); }
UPat operator|(const UPat& a, const UPat& b) { return AluPat(Op::OR, {a, b}); }
UPat operator^(const UPat& a, const UPat& b) { return AluPat(Op::XOR, {a, b}); }
UPat Lt(const UPat& a, const UPat& b) { return AluPat(Op::CMPLT, {a, b}); }
UPat Ne(const UPat& a, const UPat& b) { return AluPat(Op::CMPNE, {a, b}); }
UPat Eq(const UPat& a, const UPat& b) { return AluPat(Op::CMPEQ, {a, b}); }
UPat Max(const UPat& a, const UPat& b) { return AluPat(Op::MAX, {a, b}); }
UPat Where(const UPat& c, const UPat& t, const UPat& f) { return AluPat(Op::WHERE, {c, t, f}); }
UPat Cast(const UPat& x) { return UPat(Op::CAST).Src({x}); }

}  // namespace kiln
