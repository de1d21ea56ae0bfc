// CaptureScope and ExecPlan: see exec_plan.h.
#include "engine/realize/exec_plan.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/clock.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/realize/kernel_log.h"
#include "engine/realize/realize.h"
#include "engine/realize/realize_internal.h"
#include "engine/runtime/registry.h"

namespace kiln {
namespace realize_internal {

struct CaptureState {
  std::vector<CapturedItem> items;
  int kernels = 0;
};

namespace {

thread_local CaptureState* t_capture = nullptr;

// Volatile buffers (written by live ExecPlans), counted per node.
struct VolatileSet {
  absl::Mutex mu;
  absl::flat_hash_map<const UOp*, int> count ABSL_GUARDED_BY(mu);
  std::atomic<size_t> size{0};
};
VolatileSet& Volatiles() {
  static VolatileSet* v = new VolatileSet();
  return *v;
}

void MarkVolatile(const UOp* b) {
  VolatileSet& v = Volatiles();
  absl::MutexLock l(&v.mu);
  if (v.count[b]++ == 0) v.size.fetch_add(1, std::memory_order_relaxed);
}

void UnmarkVolatile(const UOp* b) {
  VolatileSet& v = Volatiles();
  absl::MutexLock l(&v.mu);
  auto it = v.count.find(b);
  if (it == v.count.end()) return;
  if (--it->second == 0) {
    v.count.erase(it);
    v.size.fetch_sub(1, std::memory_order_relaxed);
  }
}

const void* MemKey(const runtime::DeviceMemory& m) {
  return m.ptr != nullptr ? m.ptr : reinterpret_cast<const void*>(static_cast<uintptr_t>(m.handle));
}

}  // namespace

CaptureState* ActiveCapture() { return t_capture; }

void AppendCaptured(CaptureState* capture, const Schedule& schedule) {
  for (const ScheduleItem& it : schedule.items) {
    capture->items.push_back(CapturedItem{it, schedule.var_vals});
    capture->kernels += it.kind == ScheduleItem::Kind::kKernel;
  }
}

bool AnyVolatile(const std::vector<const UOp*>& buffers) {
  VolatileSet& v = Volatiles();
  if (v.size.load(std::memory_order_relaxed) == 0) return false;
  absl::MutexLock l(&v.mu);
  for (const UOp* b : buffers)
    if (v.count.contains(b)) return true;
  return false;
}

}  // namespace realize_internal

// ---- CaptureScope ----

CaptureScope::CaptureScope() : state_(std::make_unique<realize_internal::CaptureState>()) {
  prev_ = realize_internal::t_capture;
  realize_internal::t_capture = state_.get();
}

CaptureScope::~CaptureScope() { realize_internal::t_capture = prev_; }

bool CaptureScope::Active() { return realize_internal::t_capture != nullptr; }

std::vector<CapturedItem> CaptureScope::Take() {
  state_->kernels = 0;
  return std::exchange(state_->items, {});
}

int CaptureScope::num_kernels() const { return state_->kernels; }

// ---- ExecPlan ----

absl::StatusOr<std::unique_ptr<ExecPlan>> ExecPlan::Build(std::vector<CapturedItem> items,
                                                          absl::Span<const UOpPtr> inputs,
                                                          absl::Span<const UOpPtr> extra_buffers) {
  std::unique_ptr<ExecPlan> plan(new ExecPlan());
  plan->num_inputs_ = static_cast<int>(inputs.size());
  {
    std::vector<ScheduleItem> all;
    all.reserve(items.size());
    for (const CapturedItem& ci : items) all.push_back(ci.item);
    plan->estimate_ = EstimateItems(all, extra_buffers);
  }
  const RunControl& control = CurrentRunControl();
  KILN_RETURN_IF_ERROR(CheckWork(plan->estimate_, control.limits));
  if (control.memory_budget != nullptr) {  // held only while Build allocates; the buffers then count as live
    KILN_RETURN_IF_ERROR(control.memory_budget->Reserve(
        plan->estimate_.new_bytes, static_cast<int64_t>(runtime::BufferTable::Global().total_bytes())));
  }
  struct Release {
    MemoryBudget* budget;
    int64_t bytes;
    ~Release() {
      if (budget != nullptr) budget->Release(bytes);
    }
  } release{control.memory_budget, plan->estimate_.new_bytes};
  absl::flat_hash_map<const UOp*, uint32_t> input_slot;
  for (size_t i = 0; i < inputs.size(); ++i)
    input_slot.emplace(inputs[i].get(), static_cast<uint32_t>(i));
  absl::flat_hash_map<const UOp*, std::shared_ptr<runtime::Buffer>> fixed;
  absl::flat_hash_set<const UOp*> written_nodes;
  absl::flat_hash_set<const UOp*> allocated_nodes;  // non-input buffers Build allocated (plan memory)
  absl::flat_hash_set<runtime::Device*> devices;
  size_t staging = 0;

  // Memory of a non-input buffer (allocated now), or a placeholder plus a patch for an input.
  auto resolve = [&](const UOpPtr& b, uint32_t arg_index,
                     runtime::Device* want) -> absl::StatusOr<std::shared_ptr<runtime::Buffer>> {
    if (auto it = input_slot.find(b.get()); it != input_slot.end()) {
      plan->patches_.push_back(Patch{arg_index, it->second});
      return std::shared_ptr<runtime::Buffer>();
    }
    auto it = fixed.find(b.get());
    if (it == fixed.end()) {
      const bool had_memory = runtime::BufferTable::Global().Lookup(b.get()) != nullptr;
      KILN_ASSIGN_OR_RETURN(auto buf, realize_internal::Materialize(b));
      if (!had_memory) {
        plan->allocated_bytes_ += static_cast<int64_t>(buf->nbytes());
        allocated_nodes.insert(b.get());
      }
      it = fixed.emplace(b.get(), std::move(buf)).first;
      plan->held_nodes_.push_back(b);
      plan->held_buffers_.push_back(it->second);
    }
    if (want != nullptr && it->second->device() != want)
      return absl::InvalidArgumentError(absl::StrCat("ExecPlan: a kernel on ", want->name(),
                                                     " reads a buffer on ",
                                                     it->second->device()->name()));
    plan->args_[arg_index] = it->second->memory();
    return it->second;
  };

  for (CapturedItem& ci : items) {
    const ScheduleItem& item = ci.item;
    Call call;
    call.arg_begin = static_cast<uint32_t>(plan->args_.size());
    call.arg_count = static_cast<uint32_t>(item.buffers.size());
    plan->args_.resize(plan->args_.size() + item.buffers.size());
    if (item.kind == ScheduleItem::Kind::kCopy) {
      if (item.buffers.size() != 2)
        return absl::InternalError("ExecPlan: a copy item needs 2 buffers");
      for (int j = 0; j < 2; ++j) {
        KILN_ASSIGN_OR_RETURN(runtime::Device * dev,
                              runtime::GetDevice(item.buffers[j]->num_src() >= 2 &&
                                                         item.buffers[j]->src(1)->op() == Op::DEVICE
                                                     ? item.buffers[j]->src(1)->ArgStr()
                                                     : DefaultDevice()));
        KILN_RETURN_IF_ERROR(resolve(item.buffers[j], call.arg_begin + j, dev).status());
        (j == 0 ? call.dst_device : call.src_device) = dev;
        devices.insert(dev);
      }
      call.copy_bytes =
          static_cast<size_t>(std::min(item.buffers[0]->ArgInt(), item.buffers[1]->ArgInt())) *
          item.buffers[1]->dtype().ItemSize();
      staging = std::max(staging, call.copy_bytes);
      call.name = "copy";
      written_nodes.insert(item.buffers[0].get());
    } else {
      KILN_ASSIGN_OR_RETURN(runtime::Device * dev, runtime::GetDevice(item.device));
      devices.insert(dev);
      KILN_ASSIGN_OR_RETURN(std::shared_ptr<realize_internal::LoadedKernel> k,
                            realize_internal::GetKernel(CurrentRealizeContext(), *dev, item.ast, nullptr));
      // A kernel that reads none of its item's last buffers takes fewer parameters (codegen::ParamCount).
      const auto params = static_cast<uint32_t>(codegen::ParamCount(k->program));
      if (call.arg_count > params && params >= static_cast<uint32_t>(item.num_outputs)) call.arg_count = params;
      for (size_t j = 0; j < item.buffers.size(); ++j) {
        KILN_RETURN_IF_ERROR(
            resolve(item.buffers[j], call.arg_begin + static_cast<uint32_t>(j), dev).status());
        if (static_cast<int>(j) < item.num_outputs) written_nodes.insert(item.buffers[j].get());
      }
      call.var_begin = static_cast<uint32_t>(plan->vars_.size());
      for (const UOpPtr& v : k->program.vars) {
        const VarArg& var = std::get<VarArg>(v->arg());
        auto it = ci.var_vals.find(var.name);
        if (it == ci.var_vals.end())
          return absl::InvalidArgumentError(
              absl::StrCat("unbound Variable ", var.name, " used by ", k->program.name));
        plan->vars_.push_back(it->second);
        auto known = std::find_if(plan->variables_.begin(), plan->variables_.end(),
                                  [&](const VarArg& a) { return a.name == var.name; });
        if (known == plan->variables_.end()) {
          plan->variables_.push_back(var);
          known = plan->variables_.end() - 1;
        } else if (known->min != var.min || known->max != var.max) {
          return absl::InvalidArgumentError(absl::StrCat("Variable ", var.name, " has two ranges in one plan"));
        }
        plan->var_of_.push_back(static_cast<uint32_t>(known - plan->variables_.begin()));
      }
      call.var_count = static_cast<uint32_t>(k->program.vars.size());
      for (int i = 0; i < 3; ++i) {
        call.dims.global[i] = k->program.global_size[i];
        call.dims.local[i] = k->program.local_size[i];
      }
      call.dims.threads = k->program.threads;
      call.program = k->runner.get();
      call.device = dev;
      call.name = k->program.name;
      call.cost = {k->program.flops, k->program.mem_bytes};
      call.kernel = k.get();
      plan->kernels_.push_back(std::move(k));
      ++plan->num_kernels_;
    }
    plan->calls_.push_back(std::move(call));
  }
  absl::flat_hash_set<const UOp*> read_after;  // the outputs: buffers read after the plan, not only by its calls
  for (const UOpPtr& e : extra_buffers) {
    KILN_RETURN_IF_ERROR(EnsureAllocated(e));
    read_after.insert(BufferOf(e.get()));  // EnsureAllocated checked it is a view of a BUFFER
  }
  KILN_RETURN_IF_ERROR(plan->FindConstantCalls(items, input_slot, allocated_nodes, read_after));

  plan->staging_.resize(staging);
  plan->devices_.assign(devices.begin(), devices.end());
  for (const UOp* b : written_nodes) {
    if (input_slot.contains(b))
      continue;  // an input the plan writes (ASSIGN into an input): not plan memory
    plan->written_.push_back(realize_internal::MemKey(fixed.at(b)->memory()));
    realize_internal::MarkVolatile(b);
    plan->volatile_.push_back(b);
    realize_internal::InvalidateMemo(b);
  }
  std::sort(plan->written_.begin(), plan->written_.end());
  if (DebugLevel() >= 1)
    std::fprintf(stderr, "JIT captured %d kernels with %d inputs (%d constant: run once)\n", plan->num_kernels_,
                 plan->num_inputs_, plan->num_constant_);
  return plan;
}

absl::Status ExecPlan::FindConstantCalls(const std::vector<CapturedItem>& items,
                                         const absl::flat_hash_map<const UOp*, uint32_t>& input_slot,
                                         const absl::flat_hash_set<const UOp*>& allocated,
                                         const absl::flat_hash_set<const UOp*>& read_after) {
  absl::flat_hash_map<const UOp*, int> writes_left;  // per buffer: calls still to come that write it
  for (size_t i = 0; i < items.size(); ++i) {
    KILN_RETURN_IF_ERROR(realize_internal::CheckNoConstantWrites(items[i].item, absl::StrCat("ExecPlan: ", calls_[i].name)));
    for (size_t j = 0; j < items[i].item.num_written(); ++j) ++writes_left[items[i].item.buffers[j].get()];
  }
  const absl::flat_hash_map<const UOp*, int> writers = writes_left;
  // The scheduler reuses an intermediate's buffer for later values, so a constant value whose buffer is written
  // again gets memory of its own, and the calls that read that value (up to the next write) read it there.
  absl::flat_hash_map<const UOp*, std::shared_ptr<runtime::Buffer>> value_of;  // buffer -> its current constant value
  for (size_t i = 0; i < items.size(); ++i) {
    Call& c = calls_[i];
    const std::vector<UOpPtr>& bufs = items[i].item.buffers;
    const size_t outs = items[i].item.num_written();
    bool constant = c.program != nullptr && c.var_count == 0;
    for (size_t j = outs; j < c.arg_count && j < bufs.size(); ++j) {
      const UOp* b = bufs[j].get();
      auto v = value_of.find(b);
      if (v != value_of.end()) {
        args_[c.arg_begin + j] = v->second->memory();
      } else {
        constant = constant && !input_slot.contains(b) && realize_internal::IsConstantBuffer(b);
      }
    }
    // A buffer that other calls write too gets the constant value in memory of its own (below), which only the
    // plan's calls are redirected to: the last write of an output the caller reads after the plan stays an ordinary
    // call, since a Run that skipped it would leave the buffer holding an earlier call's value. (MiniLM's sixth FFN
    // weight, packed for its matmul into a buffer an earlier intermediate had used, was copied on every inference:
    // 0.25-0.4 ms of 18.)
    for (size_t j = 0; j < outs && constant; ++j) {
      const UOp* b = bufs[j].get();
      constant = allocated.contains(b) && !input_slot.contains(b) &&
                 (writes_left[b] > 1 || writers.at(b) == 1 || !read_after.contains(b));
    }
    bool shared = false;  // some output is written by another call, before or after this one
    for (size_t j = 0; j < outs; ++j) shared |= writers.at(bufs[j].get()) > 1;
    if (constant && shared) {
      // Memory of its own for each output: a BUFFER node the plan holds (counted live like the others), within the
      // run's memory budget; over it, the call stays an ordinary one.
      std::vector<std::pair<UOpPtr, std::shared_ptr<runtime::Buffer>>> own;
      for (size_t j = 0; j < outs && constant; ++j) {
        std::shared_ptr<runtime::Buffer> held = runtime::BufferTable::Global().Lookup(bufs[j].get());
        const int64_t bytes = static_cast<int64_t>(held->nbytes());
        MemoryBudget* budget = CurrentRunControl().memory_budget;
        if (budget != nullptr &&
            !budget->Reserve(bytes, static_cast<int64_t>(runtime::BufferTable::Global().total_bytes())).ok()) {
          constant = false;
          break;
        }
        UOpPtr node = NewBuffer(held->dtype(), held->numel(), held->device()->name());
        absl::StatusOr<std::shared_ptr<runtime::Buffer>> buf = realize_internal::Materialize(node);
        if (budget != nullptr) budget->Release(bytes);
        KILN_RETURN_IF_ERROR(buf.status());
        own.emplace_back(std::move(node), *std::move(buf));
      }
      for (size_t j = 0; j < own.size() && constant; ++j) {
        allocated_bytes_ += static_cast<int64_t>(own[j].second->nbytes());
        args_[c.arg_begin + j] = own[j].second->memory();
        written_.push_back(realize_internal::MemKey(own[j].second->memory()));
        held_nodes_.push_back(own[j].first);
        held_buffers_.push_back(own[j].second);
        value_of[bufs[j].get()] = own[j].second;
      }
      if (!constant)
        for (size_t j = 0; j < outs; ++j) value_of.erase(bufs[j].get());
    } else {
      for (size_t j = 0; j < outs; ++j) {
        if (constant) value_of[bufs[j].get()] = runtime::BufferTable::Global().Lookup(bufs[j].get());
        else value_of.erase(bufs[j].get());
      }
    }
    for (size_t j = 0; j < outs; ++j) --writes_left[bufs[j].get()];
    if (!constant) continue;
    c.constant = true;
    ++num_constant_;
  }
  return absl::OkStatus();
}

ExecPlan::~ExecPlan() {
  for (const UOp* b : volatile_) realize_internal::UnmarkVolatile(b);
}

absl::Status ExecPlan::Run(absl::Span<const runtime::DeviceMemory> inputs) {
  if (static_cast<int>(inputs.size()) != num_inputs_)
    return absl::InvalidArgumentError(
        absl::StrCat("ExecPlan: expected ", num_inputs_, " input buffers, got ", inputs.size()));
  const RunControl& control = CurrentRunControl();
  KILN_RETURN_IF_ERROR(CheckWork(estimate_, control.limits));
  for (const Patch& p : patches_) args_[p.arg] = inputs[p.input];
  if (graph_mode_ != GraphMode::kOff && !graphs_built_) {
    KILN_RETURN_IF_ERROR(BuildGraphs());
    graphs_built_ = true;
  }
  runtime::DeviceMemory* args = args_.data();
  const int64_t* vars = vars_.data();
  // Calls inside a device graph (JIT=2, CUDA by default) are replayed with it, constant ones included.
  const bool skip_constants = constants_ready_;
  skipped_.assign(calls_.size(), false);
  const int debug = DebugLevel();
  if (timed_) {
    call_seconds_.assign(calls_.size(), -1.0);
    call_start_ns_.assign(calls_.size(), 0);
  }
  for (size_t ci = 0; ci < calls_.size(); ++ci) {
    if (absl::Status st = control.Check(); !st.ok()) {
      for (runtime::Device* d : devices_) (void)d->Synchronize();  // nothing of this Run stays in flight
      return absl::Status(st.code(), absl::StrCat(st.message(), " after ", ci, " of ", calls_.size(),
                                                  " JIT calls; the rest did not run"));
    }
    if (!graph_at_.empty() && graph_at_[ci] >= 0) {
      Graph& g = graphs_[graph_at_[ci]];
      KILN_RETURN_IF_ERROR(UpdateGraph(g));
      KILN_RETURN_IF_ERROR(g.exec->Launch());
      ci = g.end - 1;
      continue;
    }
    const Call& c = calls_[ci];
    if (c.constant && skip_constants) {
      skipped_[ci] = true;
      continue;
    }
    if (c.program != nullptr) {
      // DEBUG >= 2 times each replayed kernel: the eager step's figures include first-touch page faults of its
      // fresh buffers (a 51 MB copy: 13-17 ms eager, 2-3 ms replayed), the replay's are the steady state.
      const int64_t log_id = KernelLog::Enabled() ? realize_internal::LogIdForLaunch(*c.kernel, *c.device) : 0;
      const bool logged = log_id != 0;  // recording now
      const bool timed = debug >= 2 || timed_ || logged;
      const int64_t start_ns = timed ? SteadyNowNs() : 0;
      if (timed_) call_start_ns_[ci] = start_ns;
      absl::StatusOr<double> r = c.program->Launch(
          absl::Span<const runtime::DeviceMemory>(args + c.arg_begin, c.arg_count),
          absl::Span<const int64_t>(vars + c.var_begin, c.var_count), c.dims, timed);
      if (!r.ok()) return r.status();
      if (timed_) call_seconds_[ci] = *r;
      if (logged) KernelLog::Get().RecordLaunch(log_id, start_ns, *r);
      if (debug >= 2)
        std::fprintf(stderr, "*** JIT %-6s %4zu %-32s arg %2u tm %10.2fus\n",
                     c.device ? c.device->name().c_str() : "?", ci, c.name.c_str(), c.arg_count,
                     *r * 1e6);
      continue;
    }
    if (c.copy_bytes == 0) continue;
    KILN_RETURN_IF_ERROR(c.src_device->Synchronize());
    KILN_RETURN_IF_ERROR(
        c.src_device->allocator().CopyOut(staging_.data(), args[c.arg_begin + 1], c.copy_bytes));
    KILN_RETURN_IF_ERROR(
        c.dst_device->allocator().CopyIn(args[c.arg_begin], staging_.data(), c.copy_bytes));
  }
  for (runtime::Device* d : devices_) KILN_RETURN_IF_ERROR(d->Synchronize());
  constants_ready_ = true;
  if (DebugLevel() >= 2) std::fprintf(stderr, "jit execs %zu calls\n", calls_.size());
  return absl::OkStatus();
}

std::vector<int64_t> ExecPlan::VariableValues() const {
  std::vector<int64_t> out(variables_.size(), 0);
  for (size_t i = 0; i < vars_.size(); ++i) out[var_of_[i]] = vars_[i];
  return out;
}

absl::Status ExecPlan::SetVars(const absl::flat_hash_map<std::string, int64_t>& vals) {
  std::vector<int64_t> next(variables_.size());
  for (size_t i = 0; i < variables_.size(); ++i) {
    const VarArg& v = variables_[i];
    auto it = vals.find(v.name);
    if (it == vals.end()) return absl::InvalidArgumentError(absl::StrCat("no value for Variable ", v.name));
    if (it->second < v.min || it->second > v.max)
      return absl::InvalidArgumentError(absl::StrCat("Variable ", v.name, " = ", it->second, " is outside [", v.min,
                                                     ", ", v.max, "]"));
    next[i] = it->second;
  }
  bool changed = false;
  for (size_t i = 0; i < vars_.size(); ++i) {
    changed |= vars_[i] != next[var_of_[i]];
    vars_[i] = next[var_of_[i]];
  }
  if (changed && graphs_built_) {  // the device graphs hold the old values
    graphs_built_ = false;
    graphs_.clear();
    graph_at_.clear();
  }
  return absl::OkStatus();
}

void ExecPlan::SetGraphMode(GraphMode mode) {
  graph_mode_ = mode;
  graphs_built_ = false;
  graphs_.clear();
  graph_at_.clear();
}

namespace {
bool SameMemory(const runtime::DeviceMemory& a, const runtime::DeviceMemory& b) {
  return a.ptr == b.ptr && a.handle == b.handle && a.nbytes == b.nbytes;
}
}  // namespace

absl::Status ExecPlan::BuildGraphs() {
  graphs_.clear();
  graph_at_.assign(calls_.size(), -1);
  auto wants = [&](const Call& c) {
    return c.program != nullptr && c.device != nullptr &&
           (graph_mode_ == GraphMode::kOn || c.device->graphs_by_default());
  };
  for (size_t i = 0; i < calls_.size();) {
    if (!wants(calls_[i])) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < calls_.size() && wants(calls_[end]) && calls_[end].device == calls_[i].device) ++end;
    std::vector<runtime::GraphItem> items;
    for (size_t j = i; j < end; ++j) {
      const Call& c = calls_[j];
      runtime::GraphItem it;
      it.program = c.program;
      it.bufs.assign(args_.begin() + c.arg_begin, args_.begin() + c.arg_begin + c.arg_count);
      it.vars.assign(vars_.begin() + c.var_begin, vars_.begin() + c.var_begin + c.var_count);
      it.dims = c.dims;
      items.push_back(std::move(it));
    }
    absl::StatusOr<std::unique_ptr<runtime::GraphExec>> exec = calls_[i].device->CreateGraph(std::move(items));
    if (exec.status().code() == absl::StatusCode::kUnimplemented) {  // no graphs there: kernel by kernel
      i = end;
      continue;
    }
    if (!exec.ok()) return exec.status();
    Graph g;
    g.first = i;
    g.end = end;
    g.exec = *std::move(exec);
    g.bound.assign(args_.begin() + calls_[i].arg_begin,
                   args_.begin() + calls_[end - 1].arg_begin + calls_[end - 1].arg_count);
    graph_at_[i] = static_cast<int>(graphs_.size());
    if (DebugLevel() >= 2)
      std::fprintf(stderr, "JIT GRAPHing batch with %zu kernels on %s\n", end - i, calls_[i].device->name().c_str());
    graphs_.push_back(std::move(g));
    i = end;
  }
  return absl::OkStatus();
}

absl::Status ExecPlan::UpdateGraph(Graph& g) {
  const uint32_t base = calls_[g.first].arg_begin;
  for (size_t j = g.first; j < g.end; ++j) {
    const Call& c = calls_[j];
    bool changed = false;
    for (uint32_t a = 0; a < c.arg_count; ++a) changed |= !SameMemory(args_[c.arg_begin + a], g.bound[c.arg_begin - base + a]);
    if (!changed) continue;
    KILN_RETURN_IF_ERROR(g.exec->UpdateBuffers(
        j - g.first, absl::Span<const runtime::DeviceMemory>(args_.data() + c.arg_begin, c.arg_count)));
    std::copy(args_.begin() + c.arg_begin, args_.begin() + c.arg_begin + c.arg_count,
              g.bound.begin() + (c.arg_begin - base));
    ++graph_updates_;
  }
  return absl::OkStatus();
}

bool ExecPlan::Writes(const runtime::DeviceMemory& mem) const {
  return std::binary_search(written_.begin(), written_.end(), realize_internal::MemKey(mem));
}

std::vector<std::string> ExecPlan::KernelNames() const {
  std::vector<std::string> out;
  for (const Call& c : calls_) out.push_back(c.name);
  return out;
}

std::vector<ExecPlan::CallCost> ExecPlan::CallCosts() const {
  std::vector<CallCost> out;
  out.reserve(calls_.size());
  for (const Call& c : calls_) out.push_back(c.cost);
  return out;
}

absl::Status EnsureAllocated(const UOpPtr& view) {
  if (!view) return absl::InvalidArgumentError("EnsureAllocated: null value");
  const UOp* b = BufferOf(view.get());
  if (b == nullptr) return absl::InvalidArgumentError("EnsureAllocated: not a view of a BUFFER");
  return realize_internal::Materialize(b->Ptr()).status();
}

}  // namespace kiln
