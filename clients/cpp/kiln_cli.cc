// kiln: command line client for kilnd (gRPC).
//
//   kiln [--address HOST:PORT] [--json] [--timeout-ms N] <command> [args]
//
// The commands, their arguments and their help texts are the table kCommands below (and
// kTrainSubcommands in kiln_train_cli.cc): `kiln --help` lists them, `kiln COMMAND --help` and
// `kiln train SUBCOMMAND --help` (or `kiln help COMMAND [SUBCOMMAND]`) print one; a new command is
// one row there plus one line in Dispatch().
// Output is for people by default; --json prints one JSON document on stdout.
// Exit codes: 0 ok (and --help); 1 the server or the request failed (message on stderr, with the
// gRPC code); 2 usage error (unknown command or option, unreadable or malformed local file).
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cpp/kiln_client.h"
#include "clients/cpp/kiln_train_cli.h"
#include "clients/cpp/npy.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace {

using kiln::client::KilnClient;
using kiln::client::NamedTensor;
using kiln::client::NpyArray;

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;

// One row per command: `kiln --help` lists name and summary, `kiln NAME --help` prints the
// synopsis and the details.
struct CommandHelp {
  const char* name;
  const char* synopsis;  // after "kiln [global options] "
  const char* summary;   // one line
  const char* details;   // what it does, its options, its output
};

constexpr CommandHelp kCommands[] = {
    {"status", "status", "whether kilnd is live and ready, and its metadata",
     "Calls ServerLive, ServerReady and ServerMetadata. Exits 0 only when kilnd is live and\n"
     "ready. --json prints {address, live, ready, metadata}.\n"},
    {"models", "models", "the model repository: every model version, its state and reason",
     "Calls RepositoryIndex. --json prints the RepositoryIndexResponse.\n"},
    {"load", "load MODEL", "load or reload MODEL from the repository",
     "Calls RepositoryModelLoad; exits 1 with kilnd's reason when the model does not load.\n"},
    {"unload", "unload MODEL", "unload every version of MODEL",
     "Calls RepositoryModelUnload; requests in flight finish on the version they started on.\n"},
    {"stats", "stats [MODEL]", "Triton-style statistics (of MODEL, or of every model)",
     "Calls ModelStatistics: successes, failures, inferences, executions and the mean compute\n"
     "time per model version. --json prints the ModelStatisticsResponse.\n"},
    {"infer", "infer MODEL --input NAME=FILE.npy ... [--output [NAME=]FILE.npy ...]",
     "run MODEL once on .npy inputs",
     "Sends each --input as a raw tensor (ModelInfer). Without --output, prints each output's\n"
     "dtype, shape and first values; --output NAME=FILE.npy (or FILE.npy when the model has\n"
     "one output) saves it. --json prints {model, outputs: [{name, dtype, shape, data}]}.\n"},
    {"graph", "graph run FILE [--input NAME=FILE.npy ...] [--output [NAME=]FILE.npy ...]",
     "run a kiln.v1.Graph once on kiln.v1.Engine",
     "FILE holds a kiln.v1.ExecuteRequest or a kiln.v1.Graph in protobuf text format, or an\n"
     "ExecuteRequest in JSON when it ends in .json. --input binds the graph's inputs by name.\n"
     "Prints the kernel launches, their time and the outputs (as `infer` does).\n"},
    {"train", "train SUBCOMMAND ...", "training jobs on kilnd (kiln.v1.Training; kilnd --data-dir)",
     nullptr},
    {"jobs", "jobs SUBCOMMAND ...", "the same as `kiln train`", nullptr},
    {"profile", "profile SECONDS [MODEL] [-o FILE] [--http-address HOST:PORT]",
     "a kernel profile of kilnd's next SECONDS, as Chrome trace JSON (Perfetto, chrome://tracing)",
     "Calls GET /v2/profile on kilnd's HTTP port (--http-address; default: the host of --address,\n"
     "port 8000), which waits SECONDS (at most 60) and answers with the kernel launches of the runs\n"
     "of MODEL (every model when none is named) that started meanwhile. Writes the JSON to FILE\n"
     "(-o), else to stdout; open it in Perfetto (\"Open trace file\") or chrome://tracing.\n"},
    {"viz", "viz MODEL.onnx [--input NAME=FILE.npy ...] [--output OUT.html] [--device D]",
     "run a model here with VIZ on and write a self-contained HTML page of its compile trace",
     "Runs MODEL.onnx once on this machine (no server) with the VIZ recording on: inputs not given\n"
     "are zeros (symbolic dims 1). Writes OUT.html (default: MODEL.viz.html in the current folder),\n"
     "a page that needs no server and no network: the kernel compiles, each rewrite pass of their\n"
     "lowering stepped match by match on Graphviz drawings of the UOp graph, the generated source,\n"
     "the applied opts and the launches. kilnd serves the same page live at /viz when started\n"
     "with VIZ=1. Runs the kiln-onnx program installed next to kiln (or $KILN_ONNX_TOOL).\n"},
    {"tune", "tune MODEL.onnx [--beam N] [--input NAME=FILE.npy ...] [--device D]",
     "search the fastest kernels of a model here (BEAM) and store them in the kernel cache",
     "Runs MODEL.onnx once on this machine (no server) with BEAM=N (default 2): each kernel not yet\n"
     "in the cache is searched -- kernel-opt variants compiled, checked against the unoptimised\n"
     "kernel and timed -- and the fastest is stored in the cache file ($KILN_CACHE_DIR/cache.db,\n"
     "else ~/.cache/kiln/cache.db), which kilnd and every later run with the same BEAM read, so no\n"
     "process searches a kernel twice. Prints each searched kernel's heuristic and tuned time.\n"
     "Inputs not given are zeros (symbolic dims 1). BEAM_BUDGET (seconds, default 20) bounds one\n"
     "kernel's search. Runs the kiln-onnx program installed next to kiln (or $KILN_ONNX_TOOL).\n"},
    {"onnx", "onnx inspect|run|bench MODEL.onnx ...",
     "ONNX models on this machine, without a server (runs kiln-onnx)",
     "  onnx inspect MODEL.onnx [--json]    IR version, opsets, inputs/outputs, the ops used and\n"
     "                                       which kiln lacks (exit 3 when it cannot run the model)\n"
     "  onnx run MODEL.onnx --input NAME=FILE.npy ... [--output [NAME=]FILE.npy ...] [--device D]\n"
     "                                       runs it through kiln's engine\n"
     "  onnx bench MODEL.onnx --input NAME=FILE.npy ... [--iters N] [--device D]\n"
     "                                       latency under the JIT trace cache, as kilnd runs it\n"
     "Runs the kiln-onnx program installed next to kiln (or $KILN_ONNX_TOOL).\n"},
    {"help", "help [COMMAND [SUBCOMMAND]]", "this text, or the help of one command",
     "The same as `kiln --help`, `kiln COMMAND --help`, `kiln train SUBCOMMAND --help`.\n"},
};

constexpr char kGlobalOptions[] =
    "global options:\n"
    "  --address HOST:PORT  kilnd's gRPC address (default $KILN_URL, else localhost:8001)\n"
    "  --json               print one JSON document on stdout instead of text\n"
    "  --timeout-ms N       deadline of each call (default 60000; `train watch` has none)\n"
    "  -h, --help           help (of the command given)\n"
    "exit codes: 0 ok, 1 the server or the request failed, 2 usage error\n";

const CommandHelp* FindCommand(const std::string& name) {
  for (const CommandHelp& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

std::string Overview() {
  std::string out = "usage: kiln [--address HOST:PORT] [--json] [--timeout-ms N] COMMAND ...\n\n";
  out += "commands:\n";
  for (const CommandHelp& c : kCommands) out += absl::StrFormat("  %-8s %s\n", c.name, c.summary);
  out += "\n";
  out += kGlobalOptions;
  out += "`kiln COMMAND --help` describes one command.\n";
  return out;
}

// The help of `positional` ("train", "start"...); "" when it names no command.
std::string HelpFor(const std::vector<std::string>& positional) {
  if (positional.empty()) return Overview();
  const CommandHelp* c = FindCommand(positional[0]);
  if (c == nullptr) return "";
  if (c->details == nullptr) {  // train / jobs
    return kiln::client::TrainHelp(positional[0], positional.size() > 1 ? positional[1] : "");
  }
  return absl::StrCat("usage: kiln [global options] ", c->synopsis, "\n", c->summary, ".\n\n",
                      c->details, "\n", kGlobalOptions);
}

int Usage(const std::string& message) {
  std::cerr << "kiln: " << message << "\n" << Overview();
  return kUsage;
}

int Failed(const absl::Status& status) {
  std::cerr << "kiln: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return kFailed;
}

struct Args {
  std::string address = "localhost:8001";
  std::string http_address;  // `kiln profile`: kilnd's HTTP port ("" = the host of address, 8000)
  bool json = false;
  bool help = false;
  int64_t timeout_ms = 60000;
  std::vector<std::string> positional;
  std::vector<std::string> inputs;   // NAME=FILE
  std::vector<std::string> outputs;  // [NAME=]FILE
  std::map<std::string, std::string> train;  // `kiln train` options, name without "--"
};

// Returns "" on success, else the usage error.
std::string ParseArgs(int argc, char** argv, Args* args) {
  if (const char* url = std::getenv("KILN_URL"); url != nullptr && *url != '\0') {
    args->address = url;  // as the Python package: $KILN_URL, else localhost:8001
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& flag, std::string* out) -> bool {
      if (a == flag) {
        if (i + 1 >= argc) return false;
        *out = argv[++i];
        return true;
      }
      if (a.rfind(flag + "=", 0) == 0) {
        *out = a.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    std::string v;
    if (a == "--json") {
      args->json = true;
    } else if (a == "--help" || a == "-h") {
      args->help = true;
    } else if (value("--address", &v)) {
      args->address = v;
    } else if (value("--http-address", &v)) {
      args->http_address = v;
    } else if (value("--timeout-ms", &v)) {
      if (!absl::SimpleAtoi(v, &args->timeout_ms) || args->timeout_ms <= 0) {
        return "--timeout-ms needs a positive integer";
      }
    } else if (value("--input", &v)) {
      args->inputs.push_back(v);
    } else if (value("--output", &v) || value("-o", &v)) {
      args->outputs.push_back(v);
    } else if (a.rfind("--", 0) == 0) {
      const std::string name = a.substr(2, a.find('=') == std::string::npos
                                               ? std::string::npos
                                               : a.find('=') - 2);
      if (kiln::client::IsTrainBoolFlag(name) && name.size() + 2 == a.size()) {
        args->train[name] = "true";
      } else if (kiln::client::IsTrainValueFlag(name) && value("--" + name, &v)) {
        args->train[name] = v;
      } else if (kiln::client::IsTrainValueFlag(name)) {
        return absl::StrCat("--", name, " needs a value");
      } else {
        return absl::StrCat("unknown option ", a);
      }
    } else {
      args->positional.push_back(a);
    }
  }
  return "";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string ProtoJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Elements as JSON numbers (at most `limit`; -1 = all).
std::string Values(const NpyArray& a, int64_t limit) {
  const int64_t size = kiln::client::DtypeSize(a.dtype);
  if (size == 0) return "";
  std::vector<std::string> out;
  const int64_t n = static_cast<int64_t>(a.data.size()) / size;
  for (int64_t i = 0; i < n && (limit < 0 || i < limit); ++i) {
    const char* p = a.data.data() + i * size;
    const std::string& t = a.dtype;
    if (t == "float32")
      out.push_back(absl::StrFormat("%.9g", Load<float>(p)));
    else if (t == "float64")
      out.push_back(absl::StrFormat("%.17g", Load<double>(p)));
    else if (t == "bool")
      out.push_back(*p ? "true" : "false");
    else if (t == "int8")
      out.push_back(absl::StrCat(Load<int8_t>(p)));
    else if (t == "uint8")
      out.push_back(absl::StrCat(Load<uint8_t>(p)));
    else if (t == "int16")
      out.push_back(absl::StrCat(Load<int16_t>(p)));
    else if (t == "uint16")
      out.push_back(absl::StrCat(Load<uint16_t>(p)));
    else if (t == "int32")
      out.push_back(absl::StrCat(Load<int32_t>(p)));
    else if (t == "uint32")
      out.push_back(absl::StrCat(Load<uint32_t>(p)));
    else if (t == "int64")
      out.push_back(absl::StrCat(Load<int64_t>(p)));
    else if (t == "uint64")
      out.push_back(absl::StrCat(Load<uint64_t>(p)));
    else
      out.push_back("null");  // float16: written to .npy only
  }
  std::string text = absl::StrJoin(out, ", ");
  if (limit >= 0 && n > limit) text += ", ...";
  return text;
}

// --input NAME=FILE.npy -> tensors; returns a usage error or "".
std::string ReadInputs(const std::vector<std::string>& specs, std::vector<NamedTensor>* out) {
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return absl::StrCat("--input needs NAME=FILE.npy, got '", spec, "'");
    }
    auto array = kiln::client::ReadNpy(spec.substr(eq + 1));
    if (!array.ok()) return std::string(array.status().message());
    out->push_back({spec.substr(0, eq), *std::move(array)});
  }
  return "";
}

// Prints or saves outputs; --output FILE (one output) or NAME=FILE.
int EmitOutputs(const Args& args, const std::string& header_json,
                const std::vector<NamedTensor>& outputs) {
  for (const std::string& spec : args.outputs) {
    const size_t eq = spec.find('=');
    std::string name, path = spec;
    if (eq != std::string::npos) {
      name = spec.substr(0, eq);
      path = spec.substr(eq + 1);
    } else if (outputs.size() != 1) {
      return Usage(absl::StrCat("--output ", spec, ": ", outputs.size(),
                                " outputs; use --output NAME=FILE.npy"));
    }
    const NamedTensor* found = nullptr;
    for (const NamedTensor& t : outputs) {
      if (name.empty() || t.name == name) found = &t;
    }
    if (found == nullptr) return Usage(absl::StrCat("--output ", spec, ": no output '", name, "'"));
    if (auto s = kiln::client::WriteNpy(path, found->array); !s.ok()) {
      return Usage(std::string(s.message()));
    }
  }
  if (args.json) {
    std::vector<std::string> items;
    for (const NamedTensor& t : outputs) {
      items.push_back(absl::StrCat("{\"name\": ", JsonString(t.name),
                                   ", \"dtype\": ", JsonString(t.array.dtype), ", \"shape\": [",
                                   absl::StrJoin(t.array.shape, ", "), "], \"data\": [",
                                   Values(t.array, -1), "]}"));
    }
    std::cout << "{" << header_json << "\"outputs\": [" << absl::StrJoin(items, ", ") << "]}\n";
  } else {
    for (const NamedTensor& t : outputs) {
      std::cout << t.name << " " << t.array.dtype << "[" << absl::StrJoin(t.array.shape, ", ")
                << "]: " << Values(t.array, 16) << "\n";
    }
  }
  return kOk;
}

int Status(KilnClient& client, const Args& args) {
  auto live = client.ServerLive();
  if (!live.ok()) return Failed(live.status());
  auto ready = client.ServerReady();
  if (!ready.ok()) return Failed(ready.status());
  auto md = client.ServerMetadata();
  if (!md.ok()) return Failed(md.status());
  if (args.json) {
    std::cout << "{\"address\": " << JsonString(args.address)
              << ", \"live\": " << (*live ? "true" : "false")
              << ", \"ready\": " << (*ready ? "true" : "false")
              << ", \"metadata\": " << ProtoJson(*md) << "}\n";
  } else {
    std::cout << md->name() << " " << md->version() << " at " << args.address << ": "
              << (*live ? "live" : "not live") << ", " << (*ready ? "ready" : "not ready")
              << "\nextensions: " << absl::StrJoin(md->extensions(), ", ") << "\n";
  }
  return *live && *ready ? kOk : kFailed;
}

int Models(KilnClient& client, const Args& args) {
  auto index = client.RepositoryIndex();
  if (!index.ok()) return Failed(index.status());
  if (args.json) {
    std::cout << ProtoJson(*index) << "\n";
    return kOk;
  }
  std::cout << absl::StrFormat("%-24s %-8s %-12s %s\n", "MODEL", "VERSION", "STATE", "REASON");
  for (const auto& m : index->models()) {
    std::cout << absl::StrFormat("%-24s %-8s %-12s %s\n", m.name(), m.version(), m.state(),
                                 m.reason());
  }
  return kOk;
}

int Stats(KilnClient& client, const Args& args, const std::string& model) {
  auto stats = client.Statistics(model);
  if (!stats.ok()) return Failed(stats.status());
  if (args.json) {
    std::cout << ProtoJson(*stats) << "\n";
    return kOk;
  }
  std::cout << absl::StrFormat("%-24s %-8s %10s %8s %12s %12s %14s\n", "MODEL", "VERSION",
                               "SUCCESS", "FAIL", "INFERENCES", "EXECUTIONS", "AVG_INFER_US");
  for (const auto& m : stats->model_stats()) {
    const auto& s = m.inference_stats();
    const double avg_us = s.compute_infer().count() == 0
                              ? 0.0
                              : static_cast<double>(s.compute_infer().ns()) /
                                    static_cast<double>(s.compute_infer().count()) / 1000.0;
    std::cout << absl::StrFormat("%-24s %-8s %10d %8d %12d %12d %14.1f\n", m.name(), m.version(),
                                 s.success().count(), s.fail().count(), m.inference_count(),
                                 m.execution_count(), avg_us);
  }
  return kOk;
}

int Infer(KilnClient& client, const Args& args) {
  if (args.positional.size() != 2) return Usage("infer needs exactly one model name");
  if (args.inputs.empty()) return Usage("infer needs at least one --input NAME=FILE.npy");
  std::vector<NamedTensor> inputs;
  if (std::string e = ReadInputs(args.inputs, &inputs); !e.empty()) return Usage(e);
  auto outputs = client.Infer(args.positional[1], inputs);
  if (!outputs.ok()) return Failed(outputs.status());
  return EmitOutputs(args, absl::StrCat("\"model\": ", JsonString(args.positional[1]), ", "),
                     *outputs);
}

int GraphRun(KilnClient& client, const Args& args) {
  if (args.positional.size() != 3 || args.positional[1] != "run") {
    return Usage("graph needs: graph run <file>");
  }
  const std::string& path = args.positional[2];
  std::ifstream in(path, std::ios::binary);
  if (!in) return Usage(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  kiln::v1::ExecuteRequest request;
  const bool is_json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (is_json) {
    auto s = google::protobuf::util::JsonStringToMessage(text.str(), &request);
    if (!s.ok())
      return Usage(absl::StrCat(path, ": not a kiln.v1.ExecuteRequest in JSON: ",
                                std::string(s.message().data(), s.message().size())));
  } else if (!google::protobuf::TextFormat::ParseFromString(text.str(), &request) ||
             !request.has_graph()) {
    request.Clear();
    if (!google::protobuf::TextFormat::ParseFromString(text.str(), request.mutable_graph())) {
      return Usage(absl::StrCat(path,
                                ": neither a kiln.v1.ExecuteRequest nor a kiln.v1.Graph "
                                "in protobuf text format"));
    }
  }
  std::vector<NamedTensor> inputs;
  if (std::string e = ReadInputs(args.inputs, &inputs); !e.empty()) return Usage(e);
  for (const NamedTensor& t : inputs) {
    kiln::v1::Tensor* w = request.add_inputs();
    w->set_name(t.name);
    w->set_dtype(t.array.dtype);
    for (int64_t d : t.array.shape) w->add_shape(d);
    w->set_raw(t.array.data);
  }
  auto response = client.Execute(request);
  if (!response.ok()) return Failed(response.status());
  std::vector<NamedTensor> outputs;
  for (const auto& o : response->outputs()) {
    outputs.push_back({o.name(), {o.dtype(), {o.shape().begin(), o.shape().end()}, o.raw()}});
  }
  uint64_t kernel_ns = 0;
  for (const auto& k : response->kernels()) kernel_ns += k.duration_ns();
  if (!args.json) {
    std::cout << response->kernels_size() << " kernel launches, " << kernel_ns / 1000
              << " us; compiled " << response->kernels_compiled() << "\n";
  }
  return EmitOutputs(args,
                     absl::StrCat("\"kernels\": ", response->kernels_size(),
                                  ", \"kernels_compiled\": ", response->kernels_compiled(), ", "),
                     outputs);
}

// `kiln onnx ...` runs the local kiln-onnx program (it links the engine, which clients/ may not): the one next to
// this executable, else KILN_ONNX_TOOL. Returns only when it cannot be started.
int ExecOnnxTool(int argc, char** argv, int first) {
  std::string tool;
  if (const char* env = std::getenv("KILN_ONNX_TOOL"); env != nullptr && env[0] != '\0') {
    tool = env;
  } else {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = '\0';
      std::string dir(self);
      tool = dir.substr(0, dir.find_last_of('/')) + "/kiln-onnx";
    }
  }
  std::vector<char*> args = {tool.data()};
  for (int i = first; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(tool.c_str(), args.data());
  std::cerr << "kiln: cannot run " << tool << " (kiln-onnx is built next to kiln; or set KILN_ONNX_TOOL)\n";
  return kFailed;
}

std::string PercentEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

// `kiln profile SECONDS [MODEL]`: GET /v2/profile on kilnd's HTTP port. Plain HTTP/1.1 over a socket
// (the CLI links no HTTP library; kilnd answers with Content-Length and closes on Connection: close).
int Profile(const Args& args) {
  std::string hostport = args.http_address;
  if (hostport.empty()) hostport = args.address.substr(0, args.address.rfind(':')) + ":8000";
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) return Usage("--http-address: expected HOST:PORT");
  std::string host = hostport.substr(0, colon);
  const std::string port = hostport.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return Failed(absl::UnavailableError(absl::StrCat("cannot resolve ", hostport)));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return Failed(absl::UnavailableError(absl::StrCat("cannot connect to ", hostport)));
  std::string query = absl::StrCat("seconds=", PercentEncode(args.positional[1]));
  if (args.positional.size() > 2) absl::StrAppend(&query, "&model=", PercentEncode(args.positional[2]));
  const std::string request = absl::StrCat("GET /v2/profile?", query, " HTTP/1.1\r\nHost: ", hostport,
                                           "\r\nConnection: close\r\n\r\n");
  timeval tv{};  // the window (at most 60 s) plus --timeout-ms
  tv.tv_sec = 60 + args.timeout_ms / 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return Failed(absl::UnavailableError("the request could not be sent"));
    }
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[65536];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) response.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t head_end = response.find("\r\n\r\n");
  int status = 0;
  if (head_end == std::string::npos || std::sscanf(response.c_str(), "HTTP/1.%*d %d", &status) != 1) {
    return Failed(absl::UnavailableError("no HTTP response from kilnd"));
  }
  std::string body = response.substr(head_end + 4);
  if (status != 200) {
    std::cerr << "kiln: HTTP " << status << ": " << body << "\n";
    return kFailed;
  }
  if (args.outputs.empty()) {
    std::cout << body << "\n";
    return kOk;
  }
  std::ofstream f(args.outputs[0], std::ios::binary | std::ios::trunc);
  f << body;
  f.close();
  if (!f) return Failed(absl::PermissionDeniedError(absl::StrCat("cannot write ", args.outputs[0])));
  if (!args.json) std::cerr << "wrote " << args.outputs[0] << " (" << body.size() << " bytes)\n";
  return kOk;
}

// Runs the command in `args`; the exit code.
int Dispatch(const Args& args) {
  const std::string& command = args.positional[0];
  const size_t n = args.positional.size();
  auto no_io = [&] { return args.inputs.empty() && args.outputs.empty(); };
  KilnClient client(args.address, std::chrono::milliseconds(args.timeout_ms));
  if ((command == "train" || command == "jobs") && args.inputs.empty()) {
    std::string usage_error;
    const int rc = kiln::client::TrainCommand(client, args.json, args.positional, args.train,
                                              args.outputs, &usage_error);
    return rc == kUsage ? Usage(usage_error) : rc;
  }
  if (!args.train.empty()) {
    return Usage(absl::StrCat("--", args.train.begin()->first, " is a `kiln train` option"));
  }
  if (command == "status" && n == 1 && no_io()) return Status(client, args);
  if (command == "profile" && (n == 2 || n == 3) && args.inputs.empty() && args.outputs.size() <= 1) {
    return Profile(args);
  }
  if (command == "models" && n == 1 && no_io()) return Models(client, args);
  if ((command == "load" || command == "unload") && n == 2 && no_io()) {
    const absl::Status s =
        command == "load" ? client.Load(args.positional[1]) : client.Unload(args.positional[1]);
    if (!s.ok()) return Failed(s);
    if (args.json) {
      std::cout << "{\"" << command << "ed\": " << JsonString(args.positional[1]) << "}\n";
    } else {
      std::cout << command << "ed " << args.positional[1] << "\n";
    }
    return kOk;
  }
  if (command == "stats" && n <= 2 && no_io()) {
    return Stats(client, args, n == 2 ? args.positional[1] : "");
  }
  if (command == "infer") return Infer(client, args);
  if (command == "graph") return GraphRun(client, args);
  return Usage(
      absl::StrCat("unknown command or wrong arguments: ", absl::StrJoin(args.positional, " ")));
}

}  // namespace

int main(int argc, char** argv) {
  // `kiln onnx ...` is local (the first positional argument decides), unless help is asked for.
  bool help = false;
  int onnx_at = 0;
  int viz_at = 0;  // `kiln viz ...` and `kiln tune ...` are kiln-onnx's `viz` and `tune` commands
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    help |= a == "--help" || a == "-h";
    if (onnx_at == 0 && viz_at == 0 && a.rfind("-", 0) != 0) {
      if (a == "onnx") onnx_at = i;
      if (a == "viz" || a == "tune") viz_at = i;
      if (a != "onnx" && a != "viz" && a != "tune") break;
    }
    if (a == "--address" || a == "--timeout-ms") ++i;
  }
  if (onnx_at != 0 && !help) return ExecOnnxTool(argc, argv, onnx_at + 1);
  if (viz_at != 0 && !help) return ExecOnnxTool(argc, argv, viz_at);
  Args args;
  if (std::string e = ParseArgs(argc, argv, &args); !e.empty()) return Usage(e);
  if (!args.help && !args.positional.empty() && args.positional[0] == "help") {
    args.help = true;
    args.positional.erase(args.positional.begin());
  }
  if (args.help) {
    const std::string text = HelpFor(args.positional);
    if (text.empty()) {
      return Usage(absl::StrCat("no help for '", absl::StrJoin(args.positional, " "), "'"));
    }
    std::cout << text;
    return kOk;
  }
  if (args.positional.empty()) return Usage("missing command");
  return Dispatch(args);
}
