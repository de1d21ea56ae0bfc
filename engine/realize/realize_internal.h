// Internal to engine/realize.
//
// WeakView: a weak reference to a realized value (a BUFFER node under a chain of movement ops) that keeps neither
// the node nor its memory alive. It stores the recipe of the nodes; Lock() rebuilds them through the interning
// factory, which returns the very same nodes while they live, and reports the value gone (nullptr) when the BUFFER
// has no memory in the BufferTable any more (the node died and was, at most, just rebuilt empty). This is how the
// realize memo can remember results for the process's lifetime without leaking device memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/program.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/device.h"
#include "engine/schedule/schedule.h"
#include "engine/uop/uop.h"

namespace kiln::realize_internal {

// The codegen Target for a device: its renderer and that renderer's capabilities (threads, locals, vector width).
codegen::Target TargetFor(const runtime::Device& dev);

class WeakView {
 public:
  // InvalidArgument unless `view` is movement ops over a BUFFER whose sources have no sources themselves.
  static absl::StatusOr<WeakView> Of(const UOpPtr& view) {
    WeakView w;
    const UOp* u = view.get();
    while (IsMovement(u->op())) {
      w.chain_.push_back({u->op(), u->dtype(), u->arg(), u->tag()});
      u = u->src(0).get();
    }
    if (u->op() != Op::BUFFER) return absl::InvalidArgumentError("WeakView: not a view of a BUFFER");
    w.buffer_ = {u->op(), u->dtype(), u->arg(), u->tag()};
    for (const UOpPtr& s : u->src()) {
      if (s->num_src() != 0) return absl::InvalidArgumentError("WeakView: BUFFER source with sources");
      w.buffer_src_.push_back({s->op(), s->dtype(), s->arg(), s->tag()});
    }
    return w;
  }

  // The live value, or nullptr if its buffer is gone.
  UOpPtr Lock() const {
    std::vector<UOpPtr> src;
    for (const Node& n : buffer_src_) src.push_back(UOp::Make(n.op, n.dtype, {}, n.arg, n.tag));
    UOpPtr u = UOp::Make(buffer_.op, buffer_.dtype, src, buffer_.arg, buffer_.tag);
    if (runtime::BufferTable::Global().Lookup(u.get()) == nullptr) return nullptr;
    for (auto it = chain_.rbegin(); it != chain_.rend(); ++it) u = UOp::Make(it->op, it->dtype, {u}, it->arg, it->tag);
    return u;
  }
  bool Alive() const { return Lock() != nullptr; }

 private:
  struct Node {
    Op op;
    DType dtype;
    Arg arg;
    int64_t tag;
  };
  std::vector<Node> chain_;  // outermost first
  Node buffer_;
  std::vector<Node> buffer_src_;
};

// ---- shared with exec_plan.cc (defined in realize.cc) ----

// A kernel lowered, compiled and loaded for one device (cached process-wide by device, AST key and opt knobs).
struct LoadedKernel {
  codegen::Program program;
  std::string source;
  std::unique_ptr<runtime::Program> runner;
  // Memory this kernel holds, estimated: its source, its binary, its linear program's nodes and a measured fixed
  // cost of the loaded code (realize.cc). What the loaded-kernel cache's byte bound counts.
  size_t bytes = 0;
};
absl::StatusOr<std::shared_ptr<LoadedKernel>> GetKernel(runtime::Device& dev, const UOpPtr& ast);
// The process-wide loaded-kernel cache key of `ast` on `dev` under the current opt knobs.
std::string KernelKey(const runtime::Device& dev, const UOpPtr& ast);

// The Buffer attached to a BUFFER node, allocated (and attached) on first use.
absl::StatusOr<std::shared_ptr<runtime::Buffer>> Materialize(const UOpPtr& buffer);

// Capture state of this thread (exec_plan.cc): non-null while a CaptureScope is alive.
struct CaptureState;
CaptureState* ActiveCapture();
// Appends a schedule's items (with its variable values) to the active capture.
void AppendCaptured(CaptureState* capture, const Schedule& schedule);

// Buffers whose contents a live ExecPlan overwrites on every Run: the memo never remembers a value that reads one.
bool AnyVolatile(const std::vector<const UOp*>& buffers);
// Drops every memo entry that reads or is `buffer` (realize.cc).
void InvalidateMemo(const UOp* buffer);

}  // namespace kiln::realize_internal
