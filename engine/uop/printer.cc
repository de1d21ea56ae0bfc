#include "engine/uop/printer.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>
#include <type_traits>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/base/check.h"

namespace kiln {

namespace {

void AppendDouble(std::string* out, double v) {
  if (std::isnan(v)) {
    out->append("nan");
    return;
  }
  if (std::isinf(v)) {
    out->append(v < 0 ? "-inf" : "inf");
    return;
  }
  char buf[64];
  // Shortest representation that parses back to the same bits (std::to_chars without a format).
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string_view s(buf, ec == std::errc() ? static_cast<size_t>(end - buf) : 0);
  out->append(s);
  // Keep floats distinguishable from ints: "1" -> "1.0", "-0" -> "-0.0".
  if (s.find_first_of(".e") == std::string_view::npos) out->append(".0");
}

void AppendIntVec(std::string* out, const IntVec& v) {
  out->push_back('(');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out->append(", ");
    absl::StrAppend(out, v[i]);
  }
  out->push_back(')');
}

void AppendQuoted(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\r':
        out->append("\\r");
        break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out->push_back(ch);
        } else {
          out->append("\\x");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        }
    }
  }
  out->push_back('"');
}

void AppendArg(std::string* out, const Arg& arg, bool as_unsigned) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
        } else if constexpr (std::is_same_v<T, bool>) {
          out->append(v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, int64_t>) {
          if (as_unsigned) {
            absl::StrAppend(out, static_cast<uint64_t>(v));
          } else {
            absl::StrAppend(out, v);
          }
        } else if constexpr (std::is_same_v<T, ConstFloat>) {
          AppendDouble(out, v.value);
        } else if constexpr (std::is_same_v<T, std::string>) {
          AppendQuoted(out, v);
        } else if constexpr (std::is_same_v<T, IntVec>) {
          AppendIntVec(out, v);
        } else if constexpr (std::is_same_v<T, Op>) {
          out->append(OpName(v));
        } else if constexpr (std::is_same_v<T, AxisArg>) {
          absl::StrAppend(out, "axis(", v.id, ", ");
          out->append(AxisTypeName(v.type));
          out->push_back(')');
        } else if constexpr (std::is_same_v<T, VarArg>) {
          out->append("var(");
          AppendQuoted(out, v.name);
          absl::StrAppend(out, ", ", v.min, ", ", v.max, ")");
        } else if constexpr (std::is_same_v<T, ReduceArg>) {
          out->append("reduce(");
          out->append(OpName(v.op));
          out->append(", ");
          AppendIntVec(out, v.axes);
          out->push_back(')');
        }
      },
      arg);
}

bool PrintsUnsigned(const UOp& u) { return u.op() == Op::CONST && u.dtype().IsUnsigned(); }

// Everything after the source list: " arg" and " tag=t", each only when present.
void AppendArgAndTag(std::string* out, const UOp& u) {
  if (!std::holds_alternative<std::monostate>(u.arg())) {
    out->push_back(' ');
    AppendArg(out, u.arg(), PrintsUnsigned(u));
  }
  if (u.tag() != 0) absl::StrAppend(out, " tag=", u.tag());
}

}  // namespace

std::string PrintArg(const Arg& arg, bool as_unsigned) {
  std::string out;
  AppendArg(&out, arg, as_unsigned);
  return out;
}

std::string QuoteString(std::string_view s) {
  std::string out;
  AppendQuoted(&out, s);
  return out;
}

std::string PrintGraph(absl::Span<const UOpPtr> roots) {
  for (const UOpPtr& r : roots) KILN_CHECK_MSG(r, "PrintGraph: null root");
  std::vector<const UOp*> order = Toposort(roots);
  absl::flat_hash_map<const UOp*, size_t> ids;
  ids.reserve(order.size());
  std::string out;
  out.reserve(order.size() * 32);
  for (const UOp* u : order) {
    size_t id = ids.size();
    ids.emplace(u, id);
    absl::StrAppend(&out, "%", id, " = ");
    out.append(OpName(u->op()));
    out.push_back(' ');
    out.append(u->dtype().Name());
    out.append(" (");
    for (size_t i = 0; i < u->num_src(); ++i) {
      if (i > 0) out.append(", ");
      absl::StrAppend(&out, "%", ids.at(u->src(i).get()));
    }
    out.push_back(')');
    AppendArgAndTag(&out, *u);
    out.push_back('\n');
  }
  out.append("roots");
  for (size_t i = 0; i < roots.size(); ++i) {
    out.append(i == 0 ? " " : ", ");
    absl::StrAppend(&out, "%", ids.at(roots[i].get()));
  }
  out.push_back('\n');
  return out;
}

std::string PrintGraph(const UOpPtr& root) {
  return PrintGraph(absl::Span<const UOpPtr>(&root, 1));
}

std::string PrintNode(const UOp& u) {
  std::string out(OpName(u.op()));
  out.push_back(' ');
  out.append(u.dtype().Name());
  out.append(" (");
  for (size_t i = 0; i < u.num_src(); ++i) {
    if (i > 0) out.append(", ");
    out.append(OpName(u.src(i)->op()));
  }
  out.push_back(')');
  AppendArgAndTag(&out, u);
  return out;
}

}  // namespace kiln
