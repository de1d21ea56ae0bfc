// Conformance: ops computed through engine/tensor on every executing backend, compared with numpy results that
// tests/conformance/gen_cases.py wrote to $KILN_CONFORMANCE_DATA (run_conformance.py sets it up). Floats compare with
// rtol 1e-4 / atol 1e-5, ints and bools exactly.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_split.h"
#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"

namespace kiln {
namespace {

struct ArraySpec {
  std::string file;
  DType dtype;
  IntVec shape;
};

struct Case {
  std::string name, op;
  IntVec attr;
  std::vector<ArraySpec> inputs;
  ArraySpec output;
};

std::string DataDir() {
  const char* d = std::getenv("KILN_CONFORMANCE_DATA");
  return d == nullptr ? "" : d;
}

bool ReadSpec(std::istringstream& in, ArraySpec* s) {
  std::string dt;
  int nd = 0;
  if (!(in >> s->file >> dt >> nd)) return false;
  s->dtype = dt == "float32" ? dtypes::kFloat32 : dt == "int32" ? dtypes::kInt32 : dtypes::kBool;
  s->shape.resize(nd);
  for (int i = 0; i < nd; ++i) in >> s->shape[i];
  return static_cast<bool>(in);
}

std::vector<Case> LoadCases(const std::string& dir) {
  std::vector<Case> cases;
  std::ifstream f(dir + "/manifest.txt");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    Case c;
    std::string attr;
    int n = 0;
    in >> c.name >> c.op >> attr >> n;
    if (attr != "-")
      for (absl::string_view t : absl::StrSplit(attr, ',')) c.attr.push_back(std::stoll(std::string(t)));
    c.inputs.resize(n);
    bool ok = true;
    for (auto& s : c.inputs) ok &= ReadSpec(in, &s);
    ok &= ReadSpec(in, &c.output);
    EXPECT_TRUE(ok) << "bad manifest line: " << line;
    if (ok) cases.push_back(std::move(c));
  }
  return cases;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&, const IntVec&)>;

const absl::flat_hash_map<std::string, OpFn>& Ops() {
  static const auto* ops = new absl::flat_hash_map<std::string, OpFn>{
      {"add", [](auto& x, auto&) { return x[0].Add(x[1]); }},
      {"sub", [](auto& x, auto&) { return x[0].Sub(x[1]); }},
      {"mul", [](auto& x, auto&) { return x[0].Mul(x[1]); }},
      {"div", [](auto& x, auto&) { return x[0].Div(x[1]); }},
      {"maximum", [](auto& x, auto&) { return x[0].Maximum(x[1]); }},
      {"lt", [](auto& x, auto&) { return x[0].Lt(x[1]); }},
      {"floordiv", [](auto& x, auto&) { return x[0].FloorDiv(x[1]); }},
      {"mod", [](auto& x, auto&) { return x[0].Mod(x[1]); }},
      {"where", [](auto& x, auto&) { return x[0].Where(x[1], x[2]); }},
      {"neg", [](auto& x, auto&) { return x[0].Neg(); }},
      {"exp", [](auto& x, auto&) { return x[0].Exp(); }},
      {"log", [](auto& x, auto&) { return x[0].Log(); }},
      {"sqrt", [](auto& x, auto&) { return x[0].Sqrt(); }},
      {"relu", [](auto& x, auto&) { return x[0].Relu(); }},
      {"sigmoid", [](auto& x, auto&) { return x[0].Sigmoid(); }},
      {"tanh", [](auto& x, auto&) { return x[0].Tanh(); }},
      {"sin", [](auto& x, auto&) { return x[0].Sin(); }},
      {"abs", [](auto& x, auto&) { return x[0].Abs(); }},
      {"reciprocal", [](auto& x, auto&) { return x[0].Reciprocal(); }},
      {"sum", [](auto& x, auto& a) { return a.empty() ? x[0].Sum() : x[0].Sum(Axes(a)); }},
      {"max", [](auto& x, auto& a) { return x[0].Max(Axes(a)); }},
      {"mean", [](auto& x, auto& a) { return x[0].Mean(Axes(a)); }},
      {"std", [](auto& x, auto& a) { return x[0].Std(Axes(a)); }},
      {"reshape", [](auto& x, auto& a) { return x[0].Reshape(a); }},
      {"permute", [](auto& x, auto& a) { return x[0].Permute(a); }},
      {"pad",
       [](auto& x, auto& a) {
         std::vector<std::pair<int64_t, int64_t>> p;
         for (size_t i = 0; i + 1 < a.size(); i += 2) p.emplace_back(a[i], a[i + 1]);
         return x[0].Pad(p);
       }},
      {"flip", [](auto& x, auto& a) { return x[0].Flip(Axes(a)); }},
      {"shrink",
       [](auto& x, auto& a) {
         std::vector<std::pair<int64_t, int64_t>> p;
         for (size_t i = 0; i + 1 < a.size(); i += 2) p.emplace_back(a[i], a[i + 1]);
         return x[0].Shrink(p);
       }},
      {"expand", [](auto& x, auto& a) { return x[0].Expand(a); }},
      {"matmul", [](auto& x, auto&) { return x[0].Matmul(x[1]); }},
      {"softmax", [](auto& x, auto&) { return x[0].Softmax(-1); }},
      {"layernorm", [](auto& x, auto& a) { return x[0].LayerNorm(a[0]); }},
      {"center", [](auto& x, auto& a) { return x[0].Sub(x[0].Mean(Axes(a), true)); }},
      {"conv2d_relu", [](auto& x, auto&) { return x[0].Conv2d(x[1], x[2]).Relu(); }},
      {"cast_int", [](auto& x, auto&) { return x[0].Cast(dtypes::kInt32); }},
  };
  return *ops;
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (DataDir().empty()) GTEST_SKIP() << "KILN_CONFORMANCE_DATA not set (run through run_conformance.py)";
    auto dev = runtime::GetDevice(GetParam());
    if (!dev.ok()) GTEST_SKIP() << GetParam() << " backend not available: " << dev.status();
  }
};

TEST_P(Conformance, AllCases) {
  const std::string dir = DataDir();
  std::vector<Case> cases = LoadCases(dir);
  ASSERT_FALSE(cases.empty()) << "no cases in " << dir;
  int failed = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto it = Ops().find(c.op);
    if (it == Ops().end()) {
      ADD_FAILURE() << "unknown op " << c.op;
      ++failed;
      continue;
    }
    std::vector<Tensor> ins;
    for (const ArraySpec& s : c.inputs) {
      std::string bytes = ReadFile(dir + "/" + s.file);
      ins.push_back(Tensor::FromHost(bytes.data(), s.dtype, s.shape, GetParam()));
      ASSERT_TRUE(ins.back().ok()) << ins.back().status();
    }
    Tensor out = it->second(ins, c.attr);
    if (!out.ok()) {
      ADD_FAILURE() << c.name << ": " << out.status();
      ++failed;
      continue;
    }
    EXPECT_EQ(out.dtype(), c.output.dtype) << c.name;
    EXPECT_EQ(IntVec(out.shape().begin(), out.shape().end()), c.output.shape) << c.name;
    std::string want = ReadFile(dir + "/" + c.output.file);
    std::string got(want.size(), '\0');
    absl::Status st = out.CopyToHost(got.data(), got.size());
    if (!st.ok()) {
      ADD_FAILURE() << c.name << ": " << st;
      ++failed;
      continue;
    }
    int64_t n = static_cast<int64_t>(want.size()) / c.output.dtype.ItemSize();
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      if (c.output.dtype == dtypes::kFloat32) {
        float w, g;
        std::memcpy(&w, want.data() + 4 * i, 4);
        std::memcpy(&g, got.data() + 4 * i, 4);
        if (!(std::abs(g - w) <= 1e-5 + 1e-4 * std::abs(w))) {
          ADD_FAILURE() << c.name << "[" << i << "]: got " << g << ", want " << w;
          ++bad;
        }
      } else if (c.output.dtype == dtypes::kInt32) {
        int32_t w, g;
        std::memcpy(&w, want.data() + 4 * i, 4);
        std::memcpy(&g, got.data() + 4 * i, 4);
        if (g != w) {
          ADD_FAILURE() << c.name << "[" << i << "]: got " << g << ", want " << w;
          ++bad;
        }
      } else if ((got[i] != 0) != (want[i] != 0)) {
        ADD_FAILURE() << c.name << "[" << i << "]: got " << int(got[i]) << ", want " << int(want[i]);
        ++bad;
      }
    }
    failed += bad > 0;
  }
  EXPECT_EQ(failed, 0) << failed << " of " << cases.size() << " cases failed on " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::Values("CPU", "INTERP"));

}  // namespace
}  // namespace kiln
