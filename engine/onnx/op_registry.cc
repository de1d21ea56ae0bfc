#include "engine/onnx/op_registry.h"

namespace kiln::onnx {
namespace {

std::string_view Canonical(std::string_view domain) { return domain == "ai.onnx" ? std::string_view() : domain; }

OpTable BuildTable() {
  OpTable t;
  RegisterElementwiseOps(&t);
  RegisterMathOps(&t);
  RegisterMovementOps(&t);
  RegisterReduceOps(&t);
  RegisterNnOps(&t);
  RegisterIndexOps(&t);
  RegisterMiscOps(&t);
  RegisterAttentionOps(&t);
  RegisterExtraOps(&t);
  RegisterQuantOps(&t);
  RegisterRnnOps(&t);
  return t;
}

}  // namespace

const OpTable& AllOps() {
  static const OpTable* table = new OpTable(BuildTable());
  return *table;
}

const OpDef* FindOp(std::string_view domain, std::string_view op, int64_t opset) {
  domain = Canonical(domain);
  for (const OpDef& d : AllOps()) {
    if (d.op == op && d.domain == domain && d.since <= opset && opset <= d.until) return &d;
  }
  return nullptr;
}

bool KnowsOp(std::string_view domain, std::string_view op) {
  domain = Canonical(domain);
  for (const OpDef& d : AllOps()) {
    if (d.op == op && d.domain == domain) return true;
  }
  return false;
}

}  // namespace kiln::onnx
