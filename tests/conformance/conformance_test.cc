// Conformance: ops computed through engine/tensor on every executing backend, compared with numpy results that
// tests/conformance/gen_cases.py wrote to $KILN_CONFORMANCE_DATA (run_conformance.py sets it up). Floats compare with
// rtol 1e-4 / atol 1e-5 or the case's own atol (nan equals nan, infinities must match exactly), integers and bools exactly; the dtype and
// shape must match too. A case marked `| xfail <backends> <reason>` in the manifest is a known kiln bug: its failure
// is printed loudly and not counted, and its passing is an error (remove the mark). $KILN_CONFORMANCE_FILTER (a
// substring of case names) runs a subset; $KILN_CONFORMANCE_VERBOSE prints each case before it runs.
//
// The random ops are checked here without numpy: range and moments, and CPU == INTERP (== CL) bit for bit.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "backends/cuda/cuda_api.h"
#include "backends/cuda/cuda_device.h"
#include "backends/null/null_device.h"
#include "backends/register_all.h"
#include "engine/runtime/host_allocator.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"
#include "tests/conformance/conformance_ops.h"

namespace kiln::conformance {
namespace {

struct ArraySpec {
  std::string file;
  DType dtype;
  IntVec shape;
};

struct Case {
  std::string name, op;
  IntVec attr;
  std::vector<double> fattr;
  std::vector<ArraySpec> inputs;
  ArraySpec output;
  std::string xfail_backends, xfail_reason;  // empty: none
  double atol = 1e-5;                         // float outputs; the manifest's atol= overrides it
};

std::string DataDir() {
  const char* d = std::getenv("KILN_CONFORMANCE_DATA");
  return d == nullptr ? "" : d;
}

bool ReadSpec(std::istringstream& in, ArraySpec* s) {
  std::string dt;
  int nd = 0;
  if (!(in >> s->file >> dt >> nd)) return false;
  std::optional<DType> d = ParseDType(dt);
  if (!d) return false;
  s->dtype = *d;
  s->shape.resize(nd);
  for (int i = 0; i < nd; ++i) in >> s->shape[i];
  return static_cast<bool>(in);
}

std::vector<Case> LoadCases(const std::string& dir) {
  std::vector<Case> cases;
  std::ifstream f(dir + "/manifest.txt");
  const char* filter = std::getenv("KILN_CONFORMANCE_FILTER");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    std::string body = line, mark;
    if (size_t bar = line.find(" | "); bar != std::string::npos) {
      body = line.substr(0, bar);
      mark = line.substr(bar + 3);
    }
    std::istringstream in(body);
    Case c;
    std::string attr;
    int n = 0;
    in >> c.name >> c.op >> attr >> n;
    if (attr != "-") {
      for (absl::string_view t : absl::StrSplit(attr, ',')) {
        std::string s(t);
        bool is_float = s.find_first_of(".eEn") != std::string::npos;  // includes inf / nan
        c.fattr.push_back(std::stod(s));
        c.attr.push_back(is_float ? static_cast<int64_t>(c.fattr.back()) : std::stoll(s));
      }
    }
    c.inputs.resize(n);
    bool ok = true;
    for (auto& s : c.inputs) ok &= ReadSpec(in, &s);
    ok &= ReadSpec(in, &c.output);
    if (std::string tok; in >> tok) {
      ok &= tok.rfind("atol=", 0) == 0;
      if (ok) c.atol = std::stod(tok.substr(5));
    }
    if (!mark.empty()) {
      std::istringstream m(mark);
      std::string kw;
      m >> kw >> c.xfail_backends;
      std::getline(m, c.xfail_reason);
      ok &= kw == "xfail" && !c.xfail_reason.empty();
    }
    EXPECT_TRUE(ok) << "bad manifest line: " << line;
    if (ok && (filter == nullptr || c.name.find(filter) != std::string::npos)) cases.push_back(std::move(c));
  }
  // KILN_CONFORMANCE_EVERY=n keeps every n-th case (conformance_beam: BEAM's searches make each case cost seconds).
  if (const char* every = std::getenv("KILN_CONFORMANCE_EVERY"); every != nullptr && std::atoi(every) > 1) {
    const size_t n = static_cast<size_t>(std::atoi(every));
    std::vector<Case> kept;
    for (size_t i = 0; i < cases.size(); i += n) kept.push_back(std::move(cases[i]));
    cases = std::move(kept);
  }
  return cases;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Element i of a raw little-endian array as a double (floats) or exact integer.
double FloatAt(const std::string& b, DType dt, int64_t i) {
  if (dt == dtypes::kFloat64) {
    double v;
    std::memcpy(&v, b.data() + 8 * i, 8);
    return v;
  }
  float v;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}

template <typename T>
T Load(const std::string& b, int64_t i) {
  T v;
  std::memcpy(&v, b.data() + sizeof(T) * i, sizeof(T));
  return v;
}

// Exact integer value as a string (signed and unsigned up to 64 bits).
std::string IntAt(const std::string& b, DType dt, int64_t i) {
  switch (dt.scalar) {
    case ScalarType::kInt8: return absl::StrCat(Load<int8_t>(b, i));
    case ScalarType::kUInt8: return absl::StrCat(Load<uint8_t>(b, i));
    case ScalarType::kInt16: return absl::StrCat(Load<int16_t>(b, i));
    case ScalarType::kUInt16: return absl::StrCat(Load<uint16_t>(b, i));
    case ScalarType::kInt32: return absl::StrCat(Load<int32_t>(b, i));
    case ScalarType::kUInt32: return absl::StrCat(Load<uint32_t>(b, i));
    case ScalarType::kInt64: return absl::StrCat(Load<int64_t>(b, i));
    case ScalarType::kUInt64: return absl::StrCat(Load<uint64_t>(b, i));
    default: return b[i] != 0 ? "true" : "false";  // bool
  }
}

// "" when `got` matches `want`, else a description of the first mismatches.
std::string Compare(const std::string& want, const std::string& got, DType dt, double atol) {
  int64_t n = static_cast<int64_t>(want.size()) / dt.ItemSize();
  std::string err;
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    if (dt.IsFloat()) {
      double w = FloatAt(want, dt, i), g = FloatAt(got, dt, i);
      bool same = std::isnan(w) ? std::isnan(g)
                  : std::isinf(w) ? g == w
                                  : std::abs(g - w) <= atol + 1e-4 * std::abs(w);
      if (!same) {
        absl::StrAppend(&err, " [", i, "] got ", g, " want ", w, ";");
        ++bad;
      }
    } else {
      std::string w = IntAt(want, dt, i), g = IntAt(got, dt, i);
      if (w != g) {
        absl::StrAppend(&err, " [", i, "] got ", g, " want ", w, ";");
        ++bad;
      }
    }
  }
  return err;
}

std::string ShapeStr(const IntVec& s) {
  std::string r = "(";
  for (int64_t d : s) absl::StrAppend(&r, d, ",");
  return r + ")";
}

// "NVRTC": a test-only device that renders every kernel as CUDA C and compiles it with the real NVRTC (which needs no
// GPU), then runs nothing (like NULL). A case passes on it when every kernel compiles; values are not compared.
class NvrtcCheckDevice final : public runtime::Device {
 public:
  explicit NvrtcCheckDevice(std::string arch) : compiler_(std::move(arch)) {}
  const std::string& name() const override { return name_; }
  runtime::Allocator& allocator() override { return allocator_; }
  runtime::Compiler& compiler() override { return compiler_; }
  std::string renderer() const override { return "cuda"; }
  absl::StatusOr<std::unique_ptr<runtime::Program>> Load(const std::string&, const std::string&) override {
    return std::unique_ptr<runtime::Program>(new backends::NullProgram());
  }
  bool executes() const override { return false; }

 private:
  std::string name_ = "NVRTC";
  runtime::HostAllocator allocator_;
  backends::NvrtcCompiler compiler_;
};

// Registers "NVRTC" when NVRTC loads; the architecture is $KILN_NVRTC_ARCH (digits, default 80).
bool RegisterNvrtcCheck() {
  static const bool ok = [] {
    if (!backends::cuda::Nvrtc().ok()) return false;
    const char* a = std::getenv("KILN_NVRTC_ARCH");
    const std::string arch = a != nullptr && *a != '\0' ? a : "80";
    runtime::BackendRegistry::Global().Register(
        "NVRTC", [arch](const std::string&, int index) -> absl::StatusOr<std::unique_ptr<runtime::Device>> {
          if (index != 0) return absl::NotFoundError("NVRTC has only index 0");
          return std::unique_ptr<runtime::Device>(new NvrtcCheckDevice(arch));
        });
    return true;
  }();
  return ok;
}

// Runs one case on `device`; "" on success, else what went wrong.
std::string RunCase(const std::string& dir, const Case& c, const std::string& device) {
  auto it = Ops().find(c.op);
  if (it == Ops().end()) return "unknown op " + c.op;
  std::vector<Tensor> ins;
  for (const ArraySpec& s : c.inputs) {
    std::string bytes = ReadFile(dir + "/" + s.file);
    ins.push_back(Tensor::FromHost(bytes.data(), s.dtype, s.shape, device));
    if (!ins.back().ok()) return "FromHost: " + ins.back().status().ToString();
  }
  Tensor out = it->second(OpArgs{ins, c.attr, c.fattr, c.output.dtype, c.output.shape, device});
  if (!out.ok()) return "error tensor: " + out.status().ToString();
  IntVec shape(out.shape().begin(), out.shape().end());
  if (out.dtype() != c.output.dtype || shape != c.output.shape) {
    return absl::StrCat("got ", out.dtype().Name(), ShapeStr(shape), ", want ", c.output.dtype.Name(),
                        ShapeStr(c.output.shape));
  }
  if (auto dev = runtime::GetDevice(device); dev.ok() && !(*dev)->executes()) {
    absl::Status st = out.Realize();  // renders and compiles every kernel; runs none
    return st.ok() ? "" : "realize: " + st.ToString();
  }
  std::string want = ReadFile(dir + "/" + c.output.file);
  std::string got(want.size(), '\0');
  absl::Status st = out.CopyToHost(got.data(), got.size());
  if (!st.ok()) return "CopyToHost: " + st.ToString();
  return Compare(want, got, c.output.dtype, c.atol);
}

bool XfailOn(const Case& c, const std::string& device) {
  if (c.xfail_backends.empty()) return false;
  if (c.xfail_backends == "*") return true;
  for (absl::string_view b : absl::StrSplit(c.xfail_backends, ',')) {
    if (b == device) return true;
  }
  return false;
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (DataDir().empty()) GTEST_SKIP() << "KILN_CONFORMANCE_DATA not set (run through run_conformance.py)";
    if (GetParam() == "NVRTC" && !RegisterNvrtcCheck()) GTEST_SKIP() << "NVRTC not available (CUDA toolkit)";
    auto dev = runtime::GetDevice(GetParam());
    if (!dev.ok()) GTEST_SKIP() << GetParam() << " backend not available: " << dev.status();
  }
};

TEST_P(Conformance, AllCases) {
  const std::string dir = DataDir();
  const std::string& device = GetParam();
  std::vector<Case> cases = LoadCases(dir);
  ASSERT_FALSE(cases.empty()) << "no cases in " << dir;
  int failed = 0, xfailed = 0;
  const bool verbose = std::getenv("KILN_CONFORMANCE_VERBOSE") != nullptr;
  for (const Case& c : cases) {
    if (verbose) std::cerr << "case " << c.name << " on " << device << std::endl;
    std::string err = RunCase(dir, c, device);
    if (XfailOn(c, device) && device != "NVRTC") {
      if (err.empty()) {
        ADD_FAILURE() << "XPASS " << c.name << " on " << device << ": passes but is marked xfail ("
                      << c.xfail_reason << "); remove the mark in gen_cases.py";
        ++failed;
      } else {
        std::cout << "!!!!! XFAIL " << device << " " << c.name << " (known kiln bug:" << c.xfail_reason
                  << "): " << err << "\n";
        ++xfailed;
      }
    } else if (!err.empty()) {
      ADD_FAILURE() << "FAIL " << c.name << " [" << c.op << "] on " << device << ": " << err;
      ++failed;
    }
  }
  std::cout << "conformance on " << device << ": " << cases.size() << " cases, "
            << cases.size() - failed - xfailed << " passed, " << failed << " failed, " << xfailed
            << " expected failures\n";
  if (xfailed > 0) std::cout << "!!!!! " << xfailed << " EXPECTED FAILURES (known kiln bugs) on " << device << "\n";
  EXPECT_EQ(failed, 0) << failed << " of " << cases.size() << " cases failed on " << device;
}

// CL and NVRTC run as their own CTests (conformance_cl, conformance_nvrtc in tests/conformance/CMakeLists.txt) so they
// overlap the others. NVRTC compiles every kernel as CUDA C without a GPU: a CUDA syntax error fails CI. CUDA (skipped
// without a GPU) is run by tests/gpu/run_gpu_checks.sh.
INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::Values("CPU", "INTERP", "CL", "NVRTC", "CUDA"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- random ops: statistics per backend, and bit-identical values across backends ----

std::vector<std::string> Backends() {
  backends::RegisterAllBackends();
  std::vector<std::string> out;
  for (const char* d : {"CPU", "INTERP", "CL"}) {
    if (runtime::GetDevice(d).ok()) out.push_back(d);
  }
  return out;
}

template <typename T>
std::vector<T> Draw(const std::string& what, const std::string& device, uint64_t seed) {
  Tensor::ManualSeed(seed);
  Tensor t = what == "rand"      ? Tensor::Rand({64, 160}, dtypes::kFloat32, device)
             : what == "randn"   ? Tensor::Randn({64, 160}, dtypes::kFloat32, device)
             : what == "uniform" ? Tensor::Uniform({64, 160}, -3.0, 5.0, dtypes::kFloat32, device)
             : what == "randint" ? Tensor::RandInt(-7, 13, {64, 160}, dtypes::kInt32, device)
                                 : Tensor::RandInt(0, 200, {64, 160}, dtypes::kUInt8, device);
  auto v = t.ToVector<T>();
  EXPECT_TRUE(v.ok()) << what << " on " << device << ": " << v.status();
  return v.ok() ? *v : std::vector<T>();
}

void Moments(const std::vector<float>& v, double* mean, double* sd) {
  double s = 0, s2 = 0;
  for (float x : v) s += x;
  *mean = s / v.size();
  for (float x : v) s2 += (x - *mean) * (x - *mean);
  *sd = std::sqrt(s2 / v.size());
}

TEST(ConformanceRandom, Statistics) {
  for (const std::string& dev : Backends()) {
    SCOPED_TRACE(dev);
    double m, sd;
    std::vector<float> u = Draw<float>("rand", dev, 7);
    ASSERT_EQ(u.size(), 64u * 160u);
    for (float x : u) ASSERT_TRUE(x >= 0.0f && x < 1.0f) << x;
    Moments(u, &m, &sd);  // U(0,1): mean 1/2, sd 1/sqrt(12) = 0.2887; n = 10240
    EXPECT_NEAR(m, 0.5, 0.015);
    EXPECT_NEAR(sd, 0.2887, 0.01);
    std::vector<float> g = Draw<float>("randn", dev, 7);
    for (float x : g) ASSERT_TRUE(std::isfinite(x)) << x;
    Moments(g, &m, &sd);
    EXPECT_NEAR(m, 0.0, 0.05);
    EXPECT_NEAR(sd, 1.0, 0.03);
    int within1 = 0;
    for (float x : g) within1 += std::abs(x) < 1.0f;
    EXPECT_NEAR(within1 / 10240.0, 0.6827, 0.02);
    std::vector<float> w = Draw<float>("uniform", dev, 7);
    for (float x : w) ASSERT_TRUE(x >= -3.0f && x < 5.0f) << x;
    Moments(w, &m, &sd);
    EXPECT_NEAR(m, 1.0, 0.1);
    std::vector<int32_t> r = Draw<int32_t>("randint", dev, 7);
    std::vector<int> hist(20, 0);
    for (int32_t x : r) {
      ASSERT_TRUE(x >= -7 && x < 13) << x;
      ++hist[x + 7];
    }
    for (int h : hist) EXPECT_NEAR(h, 512, 120);  // every value drawn, roughly uniformly
    std::vector<uint8_t> r8 = Draw<uint8_t>("randint8", dev, 7);
    for (uint8_t x : r8) ASSERT_LT(x, 200);
    // different seeds, different draws; the same seed, the same draw
    EXPECT_NE(Draw<float>("rand", dev, 8), u);
    EXPECT_EQ(Draw<float>("rand", dev, 7), u);
  }
}

TEST(ConformanceRandom, DeviceIndependent) {
  std::vector<std::string> devs = Backends();
  if (devs.size() < 2) GTEST_SKIP() << "needs CPU and INTERP";
  for (size_t k = 1; k < devs.size(); ++k) {
    for (const char* what : {"rand", "randn", "uniform"}) {
      std::vector<float> a = Draw<float>(what, devs[0], 1234), b = Draw<float>(what, devs[k], 1234);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << what << ": " << devs[0] << " and " << devs[k]
                                                                   << " differ";
    }
    EXPECT_EQ(Draw<int32_t>("randint", devs[0], 99), Draw<int32_t>("randint", devs[k], 99)) << devs[k];
    EXPECT_EQ(Draw<uint8_t>("randint8", devs[0], 99), Draw<uint8_t>("randint8", devs[k], 99)) << devs[k];
  }
}

}  // namespace
}  // namespace kiln::conformance
