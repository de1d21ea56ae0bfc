// kiln-onnx: ONNX models on the local machine, without a server (the `kiln onnx ...` CLI commands exec it).
//
//   kiln-onnx inspect MODEL.onnx [--json]
//       IR version, producer, opset imports, inputs and outputs (dtype, dims; symbolic dims by name), the ops the
//       graph uses with their counts, and which of them kiln lacks. Exit 0 when kiln can run the model, 3 when it
//       cannot (the reasons are printed), 2 on a usage error or an unreadable file.
//   kiln-onnx run MODEL.onnx --input NAME=FILE.npy ... [--output [NAME=]FILE.npy ...] [--device CPU]
//       runs the model through kiln's engine and prints each output's shape, dtype and first values; --output writes
//       .npy files. Exit 0 ok, 1 the model failed to load or run (message on stderr), 2 usage.
//   kiln-onnx bench MODEL.onnx --input NAME=FILE.npy ... [--iters N] [--device D]
//       latency through engine/api (Engine::RunOnnx under the JIT trace cache, as kilnd runs it): two warm-up runs
//       (run, capture), then N replays; prints "median_ms=... min_ms=... first_ms=..." (first = the first run).
//   kiln-onnx viz MODEL.onnx [--input NAME=FILE.npy ...] [--output OUT.html] [--device D]
//       runs the model once with VIZ on (inputs not given are zeros, symbolic dims 1) and writes a self-contained
//       HTML page of its compile trace (engine/api/viz.h: compiles, rewrite passes with Graphviz graphs, kernel
//       source, launches); default OUT is MODEL's file name with .viz.html, in the current folder.
//   kiln-onnx tune MODEL.onnx [--beam N] [--input NAME=FILE.npy ...] [--device D]
//       runs the model once with BEAM=N (default 2; inputs not given are zeros): every kernel not yet in the BEAM
//       cache is searched and its choice stored (engine/realize/beam.h), so later runs, kilnd included, use it. Prints
//       a table of the searches (heuristic vs BEAM time per kernel) and "searches=... cache_hits=..." (a second
//       tune of the same model searches 0).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/register_all.h"
#include "clients/cpp/npy.h"
#include "engine/api/onnx_model.h"
#include "engine/api/viz.h"
#include "engine/base/env.h"
#include "engine/realize/beam.h"
#include "engine/realize/kernel_log.h"
#include "engine/dtype/dtype.h"
#include "engine/onnx/model.h"
#include "engine/onnx/op_registry.h"
#include "engine/onnx/runner.h"

namespace {

using kiln::onnx::HostArray;
using kiln::onnx::Value;
using kiln::onnx::ValueInfo;

constexpr int kOk = 0, kFailed = 1, kUsage = 2, kUnsupported = 3;

int Usage(const std::string& msg) {
  std::cerr << "kiln onnx: " << msg << "\n"
            << "usage: kiln onnx inspect MODEL.onnx [--json]\n"
            << "       kiln onnx run MODEL.onnx --input NAME=FILE.npy ... [--output [NAME=]FILE.npy ...] "
               "[--device D]\n"
            << "       kiln viz MODEL.onnx [--input NAME=FILE.npy ...] [--output OUT.html] [--device D]\n"
            << "       kiln tune MODEL.onnx [--beam N] [--input NAME=FILE.npy ...] [--device D]\n";
  return kUsage;
}

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

std::string DtypeName(const ValueInfo& vi) {
  if (vi.onnx_type == 0) return "?";
  return kiln::onnx::OnnxTypeName(vi.onnx_type);
}

std::string Dims(const ValueInfo& vi) {
  if (!vi.has_shape) return "?";
  std::vector<std::string> d;
  for (size_t i = 0; i < vi.dims.size(); ++i) {
    d.push_back(vi.dims[i] >= 0 ? absl::StrCat(vi.dims[i]) : (vi.dim_params[i].empty() ? "?" : vi.dim_params[i]));
  }
  return absl::StrCat("[", absl::StrJoin(d, ", "), "]");
}

std::string Kind(const ValueInfo& vi) {
  switch (vi.kind) {
    case ValueInfo::Kind::kSequence: return "sequence";
    case ValueInfo::Kind::kOptional: return "optional";
    default: return "tensor";
  }
}

int Inspect(const std::string& path, bool json) {
  kiln::onnx::LoadOptions lenient;
  lenient.require_supported_ops = false;
  auto model = kiln::onnx::LoadModel(path, lenient);
  if (!model.ok()) {
    std::cerr << "kiln onnx: " << path << ": " << model.status().message() << "\n";
    return absl::IsNotFound(model.status()) ? kUsage : kFailed;
  }
  const auto& m = **model;
  std::vector<std::string> missing = kiln::onnx::UnsupportedOps(m);
  std::string strict_error;
  if (missing.empty()) {
    auto strict = kiln::onnx::LoadModel(path);
    if (!strict.ok()) strict_error = std::string(strict.status().message());
  }
  const bool runnable = missing.empty() && strict_error.empty();
  if (json) {
    std::vector<std::string> opsets, ins, outs, ops, miss;
    for (const auto& [d, v] : m.opsets) opsets.push_back(absl::StrCat(Json(d.empty() ? "ai.onnx" : d), ": ", v));
    auto io = [](const ValueInfo& vi) {
      return absl::StrCat("{\"name\": ", Json(vi.name), ", \"kind\": ", Json(Kind(vi)), ", \"dtype\": ",
                          Json(DtypeName(vi)), ", \"dims\": ", Json(Dims(vi)), "}");
    };
    for (const auto& vi : m.graph->inputs) ins.push_back(io(vi));
    for (const auto& vi : m.graph->outputs) outs.push_back(io(vi));
    for (const auto& u : m.op_uses) {
      ops.push_back(absl::StrCat("{\"op\": ", Json(u.op), ", \"domain\": ", Json(u.domain.empty() ? "ai.onnx" : u.domain),
                                 ", \"opset\": ", u.opset, ", \"count\": ", u.count, ", \"supported\": ",
                                 kiln::onnx::FindOp(u.domain, u.op, u.opset) ? "true" : "false", "}"));
    }
    for (const auto& s : missing) miss.push_back(Json(s));
    std::cout << "{\"ir_version\": " << m.ir_version << ", \"producer\": " << Json(m.producer_name + " " + m.producer_version)
              << ", \"opsets\": {" << absl::StrJoin(opsets, ", ") << "}, \"inputs\": [" << absl::StrJoin(ins, ", ")
              << "], \"outputs\": [" << absl::StrJoin(outs, ", ") << "], \"ops\": [" << absl::StrJoin(ops, ", ")
              << "], \"missing\": [" << absl::StrJoin(miss, ", ") << "], \"error\": " << Json(strict_error)
              << ", \"runnable\": " << (runnable ? "true" : "false") << "}\n";
    return runnable ? kOk : kUnsupported;
  }
  std::cout << path << "\n  IR version " << m.ir_version << ", producer " << m.producer_name << " "
            << m.producer_version << "\n  opsets:";
  for (const auto& [d, v] : m.opsets) std::cout << " " << (d.empty() ? "ai.onnx" : d) << "=" << v;
  std::cout << "\n  inputs:\n";
  for (const auto& vi : m.graph->inputs) {
    std::cout << "    " << vi.name << "  " << Kind(vi) << " " << DtypeName(vi) << " " << Dims(vi) << "\n";
  }
  std::cout << "  outputs:\n";
  for (const auto& vi : m.graph->outputs) {
    std::cout << "    " << vi.name << "  " << Kind(vi) << " " << DtypeName(vi) << " " << Dims(vi) << "\n";
  }
  int nodes = 0;
  for (const auto& u : m.op_uses) nodes += u.count;
  std::cout << "  ops (" << m.op_uses.size() << " kinds, " << nodes << " nodes incl. nested graphs):\n";
  for (const auto& u : m.op_uses) {
    const bool ok = kiln::onnx::FindOp(u.domain, u.op, u.opset) != nullptr;
    std::cout << "    " << (ok ? "  " : "! ") << u.op << (u.domain.empty() ? "" : " (" + u.domain + ")") << " v"
              << u.opset << " x" << u.count << "\n";
  }
  if (!missing.empty()) {
    std::cout << "  kiln lacks " << missing.size() << " op(s):\n";
    for (const auto& s : missing) std::cout << "    " << s << "\n";
  }
  if (!strict_error.empty()) std::cout << "  kiln cannot load it: " << strict_error << "\n";
  std::cout << (runnable ? "  kiln can run this model\n" : "  kiln cannot run this model\n");
  return runnable ? kOk : kUnsupported;
}

absl::StatusOr<Value> FromNpy(const kiln::client::NpyArray& a) {
  auto dt = kiln::ParseDType(a.dtype);
  if (!dt) return absl::InvalidArgumentError(absl::StrCat("dtype ", a.dtype, " is not supported"));
  HostArray h;
  h.dtype = *dt;
  for (int64_t d : a.shape) h.shape.push_back(d);
  h.bytes.assign(a.data.begin(), a.data.end());
  Value v;
  v.kind = Value::Kind::kTensor;
  v.host = std::make_shared<const HostArray>(std::move(h));
  return v;
}

std::string NpyDtype(kiln::DType d) {
  switch (d.scalar) {
    case kiln::ScalarType::kFloat32: return "float32";
    case kiln::ScalarType::kFloat64: return "float64";
    case kiln::ScalarType::kFloat16: return "float16";
    case kiln::ScalarType::kBool: return "bool";
    case kiln::ScalarType::kInt8: return "int8";
    case kiln::ScalarType::kUInt8: return "uint8";
    case kiln::ScalarType::kInt16: return "int16";
    case kiln::ScalarType::kUInt16: return "uint16";
    case kiln::ScalarType::kInt32: return "int32";
    case kiln::ScalarType::kUInt32: return "uint32";
    case kiln::ScalarType::kInt64: return "int64";
    case kiln::ScalarType::kUInt64: return "uint64";
    default: return "";
  }
}

int Run(const std::string& path, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
        const std::string& device) {
  auto model = kiln::onnx::LoadModel(path);
  if (!model.ok()) {
    std::cerr << "kiln onnx: " << path << ": " << model.status().message() << "\n";
    return kFailed;
  }
  std::map<std::string, Value> feeds;
  for (const std::string& spec : inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) return Usage(absl::StrCat("--input ", spec, ": expected NAME=FILE.npy"));
    auto npy = kiln::client::ReadNpy(spec.substr(eq + 1));
    if (!npy.ok()) return Usage(std::string(npy.status().message()));
    auto v = FromNpy(*npy);
    if (!v.ok()) return Usage(absl::StrCat(spec, ": ", v.status().message()));
    feeds[spec.substr(0, eq)] = *v;
  }
  kiln::onnx::RunOptions opts;
  opts.device = device;
  auto r = kiln::onnx::Run(**model, feeds, opts);
  if (!r.ok()) {
    std::cerr << "kiln onnx: " << r.status().message() << "\n";
    return kFailed;
  }
  const auto& g = *(*model)->graph;
  std::map<std::string, std::string> write;  // output name -> file
  for (size_t i = 0; i < outputs.size(); ++i) {
    const size_t eq = outputs[i].find('=');
    if (eq != std::string::npos) {
      write[outputs[i].substr(0, eq)] = outputs[i].substr(eq + 1);
    } else if (i < g.outputs.size()) {
      write[g.outputs[i].name] = outputs[i];
    }
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string& name = g.outputs[i].name;
    auto h = kiln::onnx::ValueToHost(r->outputs[i]);
    if (!h.ok()) {
      std::cerr << "kiln onnx: output " << name << ": " << h.status().message() << "\n";
      return kFailed;
    }
    const HostArray& a = **h;
    std::cout << name << ": " << a.dtype.Name() << " " << kiln::onnx::ShapeString(a.shape) << " [";
    for (int64_t j = 0; j < std::min<int64_t>(a.numel(), 8); ++j) std::cout << (j ? ", " : "") << a.GetDouble(j);
    std::cout << (a.numel() > 8 ? ", ...]\n" : "]\n");
    auto it = write.find(name);
    if (it != write.end()) {
      kiln::client::NpyArray out;
      out.dtype = NpyDtype(a.dtype);
      if (out.dtype.empty()) {
        std::cerr << "kiln onnx: output " << name << ": no .npy dtype for " << a.dtype.Name() << "\n";
        return kFailed;
      }
      out.shape.assign(a.shape.begin(), a.shape.end());
      out.data.assign(a.bytes.begin(), a.bytes.end());
      if (absl::Status s = kiln::client::WriteNpy(it->second, out); !s.ok()) {
        std::cerr << "kiln onnx: " << s.message() << "\n";
        return kFailed;
      }
    }
  }
  return kOk;
}

int Bench(const std::string& path, const std::vector<std::string>& inputs, const std::string& device, int iters) {
  kiln::api::EngineOptions eo;
  eo.device = device;
  auto engine = kiln::api::Engine::Create(eo);
  if (!engine.ok()) {
    std::cerr << "kiln onnx: " << engine.status().message() << "\n";
    return kFailed;
  }
  auto model = (*engine)->LoadOnnx(path);
  if (!model.ok()) {
    std::cerr << "kiln onnx: " << path << ": " << model.status().message() << "\n";
    return kFailed;
  }
  std::vector<kiln::client::NpyArray> arrays;
  for (const std::string& spec : inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) return Usage(absl::StrCat("--input ", spec, ": expected NAME=FILE.npy"));
    auto npy = kiln::client::ReadNpy(spec.substr(eq + 1));
    if (!npy.ok()) return Usage(std::string(npy.status().message()));
    arrays.push_back(*std::move(npy));
  }
  std::vector<kiln::api::NamedHostTensorView> views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    kiln::api::NamedHostTensorView v;
    v.name = inputs[i].substr(0, inputs[i].find('='));
    v.view.dtype = arrays[i].dtype;
    v.view.shape = arrays[i].shape;
    v.view.data = arrays[i].data;
    views.push_back(std::move(v));
  }
  std::vector<double> ms;
  double first = 0;
  for (int i = 0; i < iters + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = (*engine)->RunOnnx(**model, views);
    const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) {
      std::cerr << "kiln onnx: " << r.status().message() << "\n";
      return kFailed;
    }
    if (i == 0) first = dt;
    if (i >= 2) ms.push_back(dt);
  }
  std::sort(ms.begin(), ms.end());
  std::cout << "median_ms=" << ms[ms.size() / 2] << " min_ms=" << ms.front() << " first_ms=" << first << "\n";
  return kOk;
}

}  // namespace

// The feeds of a local run: the --input files, zeros (symbolic dims 1) for the model's other tensor inputs.
// Usage errors come back as a message; empty = ok.
std::string LocalFeeds(const kiln::onnx::Model& model, const std::vector<std::string>& inputs,
                       std::map<std::string, Value>* feeds) {
  for (const std::string& spec : inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) return absl::StrCat("--input ", spec, ": expected NAME=FILE.npy");
    auto npy = kiln::client::ReadNpy(spec.substr(eq + 1));
    if (!npy.ok()) return std::string(npy.status().message());
    auto v = FromNpy(*npy);
    if (!v.ok()) return absl::StrCat(spec, ": ", v.status().message());
    (*feeds)[spec.substr(0, eq)] = *v;
  }
  for (const ValueInfo& in : model.graph->inputs) {
    if (feeds->contains(in.name) || in.kind != ValueInfo::Kind::kTensor) continue;
    HostArray h;
    h.dtype = in.dtype;
    for (size_t d = 0; d < in.dims.size(); ++d) h.shape.push_back(in.dims[d] > 0 ? in.dims[d] : 1);
    h.bytes.assign(static_cast<size_t>(h.numel() * h.dtype.ItemSize()), 0);
    Value v;
    v.kind = Value::Kind::kTensor;
    v.host = std::make_shared<const HostArray>(std::move(h));
    (*feeds)[in.name] = std::move(v);
  }
  return "";
}

// `tune`: one run with BEAM=width, which searches every kernel not yet in the BEAM cache and stores the choices
// (engine/realize/beam.h); then the table of the searches, slowest heuristic kernel first.
int Tune(const std::string& path, const std::vector<std::string>& inputs, const std::string& device, int width) {
  auto model = kiln::onnx::LoadModel(path);
  if (!model.ok()) {
    std::cerr << "kiln tune: " << path << ": " << model.status().message() << "\n";
    return kFailed;
  }
  std::map<std::string, Value> feeds;
  if (std::string err = LocalFeeds(**model, inputs, &feeds); !err.empty()) return Usage(err);
  const kiln::BeamCounters before = kiln::GetBeamCounters();
  const auto t0 = std::chrono::steady_clock::now();
  {
    kiln::Context beam({{kiln::Knob::kBeam, width}});
    kiln::onnx::RunOptions opts;
    opts.device = device;
    auto r = kiln::onnx::Run(**model, feeds, opts);
    if (!r.ok()) {
      std::cerr << "kiln tune: " << r.status().message() << "\n";
      return kFailed;
    }
    for (size_t i = 0; i < r->outputs.size(); ++i) {  // outputs are lazy: realize them under BEAM
      auto h = kiln::onnx::ValueToHost(r->outputs[i]);
      if (!h.ok()) {
        std::cerr << "kiln tune: output " << i << ": " << h.status().message() << "\n";
        return kFailed;
      }
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<kiln::BeamChoice> log = kiln::BeamSearchLog();
  std::sort(log.begin(), log.end(), [](const auto& a, const auto& b) { return a.heuristic_seconds > b.heuristic_seconds; });
  std::printf("%-36s %12s %12s %8s %6s %8s  %s\n", "kernel", "heuristic_us", "beam_us", "speedup", "tried", "search_s",
              "opts");
  double h_total = 0, b_total = 0;
  for (const kiln::BeamChoice& c : log) {
    std::vector<std::string> opts;
    for (const auto& o : c.opts) opts.push_back(o.ToString());
    const std::string shown = c.heuristic ? "(heuristic)" : opts.empty() ? "(none)" : absl::StrJoin(opts, " ");
    std::printf("%-36s %12.1f %12.1f %7.2fx %6d %8.2f  %s\n", c.kernel.c_str(), c.heuristic_seconds * 1e6,
                c.best_seconds * 1e6, c.best_seconds > 0 ? c.heuristic_seconds / c.best_seconds : 0.0, c.candidates,
                c.search_seconds, shown.c_str());
    h_total += c.heuristic_seconds;
    b_total += c.best_seconds;
  }
  const kiln::BeamCounters after = kiln::GetBeamCounters();
  std::printf("beam=%d searches=%lld cache_hits=%lld candidates=%lld search_s=%.2f wall_s=%.2f kernel_us_heuristic=%.1f "
              "kernel_us_beam=%.1f\n",
              width, static_cast<long long>(after.searches - before.searches),
              static_cast<long long>(after.cache_hits - before.cache_hits),
              static_cast<long long>(after.candidates - before.candidates), after.search_seconds - before.search_seconds,
              wall, h_total * 1e6, b_total * 1e6);
  return kOk;
}

// `viz`: one run with VIZ on, then the standalone page.
int Viz(const std::string& path, const std::vector<std::string>& inputs, const std::string& out_path,
        const std::string& device) {
  auto model = kiln::onnx::LoadModel(path);
  if (!model.ok()) {
    std::cerr << "kiln viz: " << path << ": " << model.status().message() << "\n";
    return kFailed;
  }
  std::map<std::string, Value> feeds;
  if (std::string err = LocalFeeds(**model, inputs, &feeds); !err.empty()) return Usage(err);
  const std::string base = path.substr(path.find_last_of('/') + 1);
  {
    kiln::Context viz({{kiln::Knob::kViz, 1}, {kiln::Knob::kTrackMatchStats, 2}});
    kiln::ScopedKernelLogLabel label(base);
    kiln::onnx::RunOptions opts;
    opts.device = device;
    auto r = kiln::onnx::Run(**model, feeds, opts);
    if (!r.ok()) {
      std::cerr << "kiln viz: " << r.status().message() << "\n";
      return kFailed;
    }
    for (size_t i = 0; i < r->outputs.size(); ++i) {  // outputs are lazy: realize them under VIZ
      auto h = kiln::onnx::ValueToHost(r->outputs[i]);
      if (!h.ok()) {
        std::cerr << "kiln viz: output " << i << ": " << h.status().message() << "\n";
        return kFailed;
      }
    }
  }
  absl::StatusOr<std::string> html = kiln::api::viz::StandaloneHtml(base, kiln::api::viz::HighlightJs());
  if (!html.ok()) {
    std::cerr << "kiln viz: " << html.status().message() << "\n";
    return kFailed;
  }
  std::string out = out_path;
  if (out.empty()) out = absl::StrCat(base.substr(0, base.rfind(".onnx") == std::string::npos ? base.size() : base.rfind(".onnx")), ".viz.html");
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  f << *html;
  f.close();
  if (!f) {
    std::cerr << "kiln viz: cannot write " << out << "\n";
    return kFailed;
  }
  std::cout << "wrote " << out << " (" << html->size() << " bytes, " << kiln::KernelLog::Get().Kernels().size()
            << " kernels)\n";
  return kOk;
}

int main(int argc, char** argv) {
  std::vector<std::string> pos, inputs, outputs;
  std::string device = "CPU";
  bool json = false;
  int iters = 20;
  int beam = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::vector<std::string>* dst) {
      if (i + 1 >= argc) return false;
      dst->push_back(argv[++i]);
      return true;
    };
    if (a == "--json") {
      json = true;
    } else if (a == "--input") {
      if (!value(&inputs)) return Usage("--input needs NAME=FILE.npy");
    } else if (a == "--output") {
      if (!value(&outputs)) return Usage("--output needs [NAME=]FILE.npy");
    } else if (a == "--iters") {
      if (i + 1 >= argc || (iters = std::atoi(argv[++i])) <= 0) return Usage("--iters needs a positive count");
    } else if (a == "--beam") {
      if (i + 1 >= argc || (beam = std::atoi(argv[++i])) <= 0) return Usage("--beam needs a positive width");
    } else if (a == "--device") {
      if (i + 1 >= argc) return Usage("--device needs a name");
      device = argv[++i];
    } else if (a.rfind("--", 0) == 0) {
      return Usage(absl::StrCat("unknown option ", a));
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2) return Usage("expected: inspect|run|bench|viz|tune MODEL.onnx");
  if (pos[0] == "inspect") {
    if (!inputs.empty() || !outputs.empty()) return Usage("inspect takes no --input/--output");
    return Inspect(pos[1], json);
  }
  if (pos[0] == "bench") {
    kiln::backends::RegisterAllBackends();
    return Bench(pos[1], inputs, device, iters);
  }
  if (pos[0] == "run") {
    kiln::backends::RegisterAllBackends();
    return Run(pos[1], inputs, outputs, device);
  }
  if (pos[0] == "viz") {
    if (outputs.size() > 1) return Usage("viz writes one --output OUT.html");
    kiln::backends::RegisterAllBackends();
    return Viz(pos[1], inputs, outputs.empty() ? "" : outputs[0], device);
  }
  if (pos[0] == "tune") {
    if (!outputs.empty()) return Usage("tune takes no --output");
    kiln::backends::RegisterAllBackends();
    return Tune(pos[1], inputs, device, beam);
  }
  return Usage(absl::StrCat("unknown command ", pos[0]));
}
