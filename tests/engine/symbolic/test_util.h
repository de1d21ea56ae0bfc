// Test helpers for engine/symbolic: an infix printer for failure messages.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/uop/uop.h"

namespace kiln::testing {

// Infix rendering of a small expression ("(x*4+8)/4"); CDIV is "/", FLOORDIV "//".
inline std::string Render(const UOpPtr& root) {
  absl::flat_hash_map<const UOp*, std::string> s;
  for (const UOp* u : Toposort(root)) {
    auto src = [&](size_t i) { return s.at(u->src(i).get()); };
    auto bin = [&](const char* op) { return absl::StrCat("(", src(0), op, src(1), ")"); };
    std::string r;
    switch (u->op()) {
      case Op::CONST:
        if (const auto* b = std::get_if<bool>(&u->arg())) r = *b ? "true" : "false";
        else if (const auto* i = std::get_if<int64_t>(&u->arg())) r = absl::StrCat(*i);
        else r = absl::StrCat(u->ConstValue(), "f");
        break;
      case Op::DEFINE_VAR: r = std::get<VarArg>(u->arg()).name; break;
      case Op::RANGE: r = absl::StrCat("r", std::get<AxisArg>(u->arg()).id); break;
      case Op::ADD: r = bin("+"); break;
      case Op::SUB: r = bin("-"); break;
      case Op::MUL: r = bin("*"); break;
      case Op::CDIV: r = bin("/"); break;
      case Op::CMOD: r = bin("%"); break;
      case Op::FLOORDIV: r = bin("//"); break;
      case Op::FLOORMOD: r = bin("%%"); break;
      case Op::CMPLT: r = bin("<"); break;
      case Op::CMPNE: r = bin("!="); break;
      case Op::CMPEQ: r = bin("=="); break;
      case Op::AND: r = bin("&"); break;
      case Op::OR: r = bin("|"); break;
      case Op::XOR: r = bin("^"); break;
      default: {
        r = absl::StrCat(std::string(OpName(u->op())), "(");
        for (size_t i = 0; i < u->num_src(); ++i) absl::StrAppend(&r, i ? "," : "", src(i));
        r += ")";
      }
    }
    s[u] = std::move(r);
  }
  return s.at(root.get());
}

}  // namespace kiln::testing
