// onnx_node_runner: runs ONNX backend test cases (onnx/backend/test/data/<folder>/<case>/model.onnx +
// test_data_set_*/{input,output}_N.pb) through kiln and compares the outputs the way onnx's own runner does
// (onnx/backend/test/runner/__init__.py): exact shape, exact dtype, integers and booleans equal, floats within
// |actual - expected| <= atol + rtol * |expected| (rtol 1e-3, atol 1e-7; NaN equals NaN).
//
// Usage: onnx_node_runner [--device CPU] [--rtol R] [--atol A] CASE_DIR...
//        onnx_node_runner [--device CPU] --light MODEL.onnx OUTPUT_0.pb   (the light/ models: input arange(n)/n)
// Prints "CASE <dir>" before each case and "RESULT <dir> PASS|FAIL <reason>" after it (flushed), so a driver
// (run_node_tests.py) can attribute a crash or a hang to its case. Exit 0 unless the arguments are bad.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/register_all.h"
#include "engine/onnx/model.h"
#include "engine/onnx/runner.h"
#include "engine/onnx/tensor_proto.h"
#include "engine/runtime/registry.h"

namespace fs = std::filesystem;
using kiln::onnx::HostArray;
using kiln::onnx::HostArrayPtr;
using kiln::onnx::Value;
using kiln::onnx::ValueInfo;

namespace {

double kRtol = 1e-3;  // onnx's runner; --rtol / --atol change them (tests/onnx/test_recurrent.py)
double kAtol = 1e-7;

std::string CompareTensor(const HostArray& expected, const HostArray& actual, const std::string& what) {
  if (expected.dtype != actual.dtype) {
    return absl::StrCat(what, ": dtype ", actual.dtype.Name(), " != expected ", expected.dtype.Name());
  }
  if (expected.shape != actual.shape) {
    return absl::StrCat(what, ": shape ", kiln::onnx::ShapeString(actual.shape), " != expected ",
                        kiln::onnx::ShapeString(expected.shape));
  }
  const int64_t n = expected.numel();
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (expected.dtype.IsFloat()) {
      const double e = expected.GetDouble(i), a = actual.GetDouble(i);
      if (std::isnan(e) && std::isnan(a)) continue;
      if (std::isinf(e) || std::isinf(a)) {
        if (e == a) continue;
      } else if (std::fabs(a - e) <= kAtol + kRtol * std::fabs(e)) {
        continue;
      }
      const double err = std::isfinite(a - e) ? std::fabs(a - e) : INFINITY;
      worst = std::max(worst, err);
    } else if (expected.GetInt(i) == actual.GetInt(i)) {
      continue;
    }
    if (first < 0) first = i;
    ++bad;
  }
  if (bad == 0) return "";
  return absl::StrCat(what, ": ", bad, " of ", n, " elements differ (first at ", first, ": got ",
                      actual.GetDouble(first), ", expected ", expected.GetDouble(first), "; max abs err ", worst, ")");
}

std::string CompareValue(const Value& expected, const Value& actual, const std::string& what) {
  if (expected.is_none() || actual.is_none()) {
    return expected.is_none() == actual.is_none() ? "" : absl::StrCat(what, ": optional presence differs");
  }
  if (expected.is_sequence()) {
    if (!actual.is_sequence()) return absl::StrCat(what, ": expected a sequence");
    if (expected.seq.size() != actual.seq.size()) {
      return absl::StrCat(what, ": sequence length ", actual.seq.size(), " != expected ", expected.seq.size());
    }
    for (size_t i = 0; i < expected.seq.size(); ++i) {
      std::string e = CompareValue(expected.seq[i], actual.seq[i], absl::StrCat(what, "[", i, "]"));
      if (!e.empty()) return e;
    }
    return "";
  }
  if (!actual.is_tensor()) return absl::StrCat(what, ": expected a tensor");
  absl::StatusOr<HostArrayPtr> a = kiln::onnx::ValueToHost(actual);
  if (!a.ok()) return absl::StrCat(what, ": ", a.status().message());
  return CompareTensor(*expected.host, **a, what);
}

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s.size() > 400 ? s.substr(0, 400) + "..." : s;
}

std::string RunCase(const fs::path& dir, const std::string& device) {
  auto model = kiln::onnx::LoadModel((dir / "model.onnx").string());
  if (!model.ok()) return absl::StrCat("load: ", model.status().message());
  const auto& g = *(*model)->graph;
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return "no test_data_set";
  for (const fs::path& set : sets) {
    std::map<std::string, Value> inputs;
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const fs::path p = set / absl::StrCat("input_", i, ".pb");
      if (!fs::exists(p)) continue;  // an omitted optional input
      auto v = kiln::onnx::ReadValueFile(p.string(), static_cast<int>(g.inputs[i].kind));
      if (!v.ok()) return absl::StrCat("input ", i, ": ", v.status().message());
      inputs[g.inputs[i].name] = *v;
    }
    kiln::onnx::RunOptions opts;
    opts.device = device;
    auto r = kiln::onnx::Run(**model, inputs, opts);
    if (!r.ok()) return absl::StrCat("run: ", r.status().message());
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const fs::path p = set / absl::StrCat("output_", i, ".pb");
      auto e = kiln::onnx::ReadValueFile(p.string(), static_cast<int>(g.outputs[i].kind));
      if (!e.ok()) return absl::StrCat("expected output ", i, ": ", e.status().message());
      std::string err = CompareValue(*e, r->outputs[i], absl::StrCat("output ", i, " ('", g.outputs[i].name, "')"));
      if (!err.empty()) return err;
    }
  }
  return "";
}

// light/ models: the input is arange(n)/n as float32 in the declared shape (onnx's generate_dummy_data).
std::string RunLight(const std::string& model_path, const std::string& output_path, const std::string& device) {
  auto model = kiln::onnx::LoadModel(model_path);
  if (!model.ok()) return absl::StrCat("load: ", model.status().message());
  const auto& g = *(*model)->graph;
  std::map<std::string, Value> inputs;
  for (const ValueInfo& vi : g.inputs) {
    HostArray a = HostArray::Zeros(vi.dtype, {});
    a.shape.clear();
    for (int64_t d : vi.dims) a.shape.push_back(d < 0 ? 1 : d);
    a.bytes.assign(static_cast<size_t>(a.numel() * a.dtype.ItemSize()), 0);
    for (int64_t i = 0; i < a.numel(); ++i) a.SetDouble(i, static_cast<double>(static_cast<float>(i) / a.numel()));
    Value v;
    v.kind = Value::Kind::kTensor;
    v.host = std::make_shared<const HostArray>(std::move(a));
    inputs[vi.name] = v;
  }
  kiln::onnx::RunOptions opts;
  opts.device = device;
  auto r = kiln::onnx::Run(**model, inputs, opts);
  if (!r.ok()) return absl::StrCat("run: ", r.status().message());
  auto e = kiln::onnx::ReadValueFile(output_path, 0);
  if (!e.ok()) return absl::StrCat("expected output: ", e.status().message());
  return CompareValue(*e, r->outputs[0], "output 0");
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "CPU";
  std::vector<std::string> cases;
  std::string light_model, light_output;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--rtol" && i + 1 < argc) {
      kRtol = std::stod(argv[++i]);
    } else if (a == "--atol" && i + 1 < argc) {
      kAtol = std::stod(argv[++i]);
    } else if (a == "--light" && i + 2 < argc) {
      light_model = argv[++i];
      light_output = argv[++i];
    } else {
      cases.push_back(a);
    }
  }
  kiln::backends::RegisterAllBackends();
  if (auto dev = kiln::runtime::GetDevice(device); !dev.ok()) {
    std::cout << "NO DEVICE " << device << ": " << dev.status().message() << std::endl;
    return 77;  // skipped (run_node_tests.py passes it on)
  }
  if (!light_model.empty()) cases.push_back(light_model);
  for (const std::string& c : cases) {
    std::cout << "CASE " << c << std::endl;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string err = c == light_model ? RunLight(light_model, light_output, device) : RunCase(c, device);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (err.empty()) {
      std::cout << "RESULT " << c << " PASS " << static_cast<int64_t>(ms) << "ms" << std::endl;
    } else {
      std::cout << "RESULT " << c << " FAIL " << OneLine(err) << std::endl;
    }
  }
  return 0;
}
