// InterpProgram: executes a linear program (docs/kernel-ir.md §3) directly; the exactness oracle.
//
// Built once from a codegen::Program (parsed from the interp text at Load): every uop becomes an instruction with
// a fixed register slot (one Lane per vector lane), loops become jumps (RANGE ... END), IF/ENDIF a conditional
// jump. Launch runs every (global, local) index and every core_id (THREAD) sequentially, each thread with fresh,
// zeroed DEFINE_REG storage. Semantics of each op are in alu.h.
//
// WMMA (docs/kernel-ir.md) is warp-collective: in a program that has one, the work-items of a work-group run one at a
// time up to their next WMMA; when every work-item of the group waits at the same WMMA, each warp (32 consecutive
// work-items by linear local id lidx0 + lidx1*L0 + lidx2*L0*L1) gathers its lanes' fragments in the CUDA m16n8k16
// layout, computes D = A*B + C (products and sums in double, rounded once to float32) and scatters D back; then all
// continue. A WMMA not reached by every work-item, or a work-group that is not whole warps, is an error. The CPU's
// m1n16k4 integer WMMA is per work-item and runs in place (D[i] = C[i] + sum_j A[j] * B[16j + i], int32 wrapping).
//
// Safety: every LOAD/STORE is bounds-checked against the launched buffer's size (DeviceMemory.nbytes); an access
// outside it returns OutOfRange naming the kernel, the op, the slot and the index, and nothing is written past a
// buffer. Missing buffers/vars and vars outside their declared [min, max] are InvalidArgument. Never aborts.
// Thread-safe: Launch keeps its state on the stack, so one program may run from several threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/interp/alu.h"
#include "engine/codegen/program.h"
#include "engine/runtime/device.h"

namespace kiln::backends::interp {

struct Inst;

class InterpProgram final : public runtime::Program {
 public:
  // Validates and compiles `program` into instructions. InvalidArgument for ops the interpreter cannot run or a
  // malformed program (unmatched RANGE/END, INDEX not on a buffer, ...).
  static absl::StatusOr<std::unique_ptr<InterpProgram>> Create(const codegen::Program& program);
  ~InterpProgram() override;

  absl::StatusOr<double> Launch(absl::Span<const runtime::DeviceMemory> bufs, absl::Span<const int64_t> vars,
                                const runtime::LaunchDims& dims, bool timed) override;

  const std::string& name() const { return name_; }

 private:
  InterpProgram() = default;
  struct State;
  absl::Status RunOne(State& st) const;
  // Runs from `pc` until the next WMMA (returns its pc) or the end (returns -1).
  absl::StatusOr<int> RunUntilWmma(State& st, int pc) const;
  absl::Status LaunchWarps(State& proto, const runtime::LaunchDims& dims) const;
  void Wmma(const Inst& in, State* warp) const;  // warp: 32 consecutive work-items

  std::string name_;
  std::vector<Inst> insts_;
  int num_lanes_ = 0;
  std::vector<DType> reg_dtypes_;     // DEFINE_REG element dtypes, by reg number
  std::vector<int64_t> reg_sizes_;    // elements
  std::vector<DType> param_dtypes_;   // by slot (void = unused slot)
  std::vector<VarArg> vars_;
  int64_t max_slot_ = -1;
  int threads_ = 1;
  bool has_wmma_ = false;                   // Program.threads (a launch with dims.threads > 1 overrides it)
};

}  // namespace kiln::backends::interp
