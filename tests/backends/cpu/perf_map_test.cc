// KILN_PERF_MAP=1: every loaded kernel's functions are appended to /tmp/perf-PID.map, the file `perf report` reads to
// name JIT code. The knob is read once per process, so this test has a binary of its own and sets it before the
// first load; the map must name the kernel's entry trampoline (the kernel's body is inlined into it, see
// engine/codegen/render/llvm_ir.h), with its size, at an address that runs the kernel.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/backends/cpu/cpu_test_util.h"
#include "tests/engine/codegen/render/test_programs.h"

namespace kiln::backends {
namespace {

TEST_F(CpuTest, LoadedKernelsAreNamedInThePerfMap) {
  ASSERT_EQ(setenv("KILN_PERF_MAP", "1", 1), 0);
  const std::string path = absl::StrCat("/tmp/perf-", getpid(), ".map");
  std::remove(path.c_str());
  const int n = 100;
  auto out = Make(dtypes::kFloat32, std::vector<float>(n, -1.f));
  auto a = Make(dtypes::kFloat32, std::vector<float>(n, 1.f));
  auto b = Make(dtypes::kFloat32, std::vector<float>(n, 2.f));
  const codegen::Program p = testprog::ElementwiseAdd(n);
  ASSERT_TRUE(Run(p, {out, a, b}).ok());
  EXPECT_EQ(Read<float>(out)[7], 3.f);
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  bool entry = false;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string start, size, name;
    fields >> start >> size >> name;
    const uint64_t addr = std::stoull(start, nullptr, 16), bytes = std::stoull(size, nullptr, 16);
    EXPECT_GT(addr, 0u) << line;
    EXPECT_GT(bytes, 0u) << line;
    entry |= name == p.name + ".entry";
  }
  EXPECT_TRUE(entry) << "no line for " << p.name << ".entry";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln::backends
