#include "clients/cpp/kiln_train_cli.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "openssl/evp.h"

namespace kiln::client {
namespace {

using kiln::v1::Job;
using kiln::v1::JobEvent;
using kiln::v1::JobSpec;

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;

constexpr const char* kValueFlags[] = {
    "arch",          "mlp-sizes",  "dataset-dir",         "dataset-id",   "steps",
    "batch",         "lr",         "optimizer",           "output-model", "seed",
    "name",          "device",     "eval-interval",       "eval-images",  "momentum",
    "weight-decay",  "checkpoint-interval"};
constexpr const char* kBoolFlags[] = {"deterministic", "nesterov"};

// One row per `kiln train` subcommand (TrainHelp; dispatch in TrainCommand).
struct SubcommandHelp {
  const char* name;
  const char* synopsis;
  const char* summary;
  const char* details;
};

constexpr SubcommandHelp kTrainSubcommands[] = {
    {"start",
     "start --arch mlp|mnist_cnn|model:NAME --dataset-dir DIR|--dataset-id ID --steps N\n"
     "            --batch N --output-model NAME [options]",
     "start a training job; prints its id (--json: the Job)",
     "  --arch A                 mlp, mnist_cnn, or model:NAME (a kiln_builtin repository model's\n"
     "                           latest weights and architecture are the starting point)\n"
     "  --mlp-sizes 784,32,10    mlp layer sizes (default 784,128,10)\n"
     "  --dataset-dir DIR        IDX folder under one of kilnd's --dataset-roots (e.g.\n"
     "                           fashion-mnist); or --dataset-id ID of an uploaded dataset\n"
     "  --steps N --batch N      optimizer steps and batch size\n"
     "  --lr X --optimizer O     learning rate (0.001) and adam (default), sgd or adamw;\n"
     "                           --momentum X --nesterov --weight-decay X\n"
     "  --output-model NAME      the repository model the result is published as: a new name or a\n"
     "                           model an earlier job published (never another model)\n"
     "  --seed N --name NAME --device D --deterministic\n"
     "  --eval-interval N --eval-images N --checkpoint-interval N\n"},
    {"watch", "watch ID", "live progress until the job ends; exit 0 only when it SUCCEEDED",
     "On a terminal one line redrawn in place, otherwise a line per state change, evaluation,\n"
     "checkpoint and about every 5% of the steps. Ends at SUCCEEDED (exit 0), FAILED, CANCELLED\n"
     "or INTERRUPTED (exit 1). --json prints the final Job only.\n"},
    {"ls", "ls", "every job: id, state, architecture, step, loss, accuracy, model",
     "--json prints the ListJobsResponse.\n"},
    {"show", "show ID", "one job's state and progress", "--json prints the Job.\n"},
    {"cancel", "cancel ID", "stop a job (a running one after checkpointing its progress)",
     "A QUEUED job stops at once; a RUNNING one at its next step boundary, after a checkpoint,\n"
     "and the command returns once it has stopped (CANCELLED). `resume` continues it.\n"},
    {"resume", "resume ID", "queue an INTERRUPTED, FAILED or CANCELLED job again",
     "The job continues from its newest checkpoint (its loss curve continues as if it had not\n"
     "stopped).\n"},
    {"checkpoint", "checkpoint ID -o FILE", "download the job's newest checkpoint",
     "Writes the newest valid checkpoint (safetensors: weights, optimizer state, step and\n"
     "data-order RNG state) to FILE (written to FILE.tmp, then renamed) and checks its size\n"
     "and SHA-256 against kilnd's. Prints the step, size and SHA-256 (--json: as an object).\n"
     "The same file is GET /v1/training/jobs/ID/checkpoint over REST.\n"},
};

int Failed(const absl::Status& status) {
  std::cerr << "kiln: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return kFailed;
}

std::string ProtoJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

bool IsTerminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED || s == v1::INTERRUPTED;
}

std::string Duration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string Accuracy(const Job& job) {
  return job.eval_accuracy() < 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * job.eval_accuracy());
}

// One line: "[#####.....] step 12/20  loss 0.6123  1234 ex/s  ETA 3s  acc 71.2%  RUNNING".
std::string ProgressLine(const Job& job) {
  constexpr int kWidth = 20;
  const int64_t steps = job.spec().steps();
  const int filled =
      steps > 0 ? static_cast<int>(kWidth * std::min(job.step(), steps) / steps) : 0;
  std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  std::string line = absl::StrFormat("[%s] step %d/%d  loss %.4f  %.0f ex/s  ETA %s  acc %s  %s",
                                     bar, job.step(), steps, job.loss(),
                                     job.examples_per_second(),
                                     job.examples_per_second() > 0 || IsTerminal(job.state())
                                         ? Duration(job.eta_seconds())
                                         : "?",
                                     Accuracy(job), v1::JobState_Name(job.state()));
  if (!job.message().empty()) absl::StrAppend(&line, ": ", job.message());
  return line;
}

template <typename T>
bool ParseNumber(const std::map<std::string, std::string>& flags, const std::string& name, T* out,
                 std::string* error) {
  auto it = flags.find(name);
  if (it == flags.end()) return true;
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    ok = absl::SimpleAtod(it->second, out);
  } else {
    ok = absl::SimpleAtoi(it->second, out);
  }
  if (!ok) *error = absl::StrCat("--", name, " needs a number, got '", it->second, "'");
  return ok;
}

// --flags -> JobSpec; the server validates ranges. Returns a usage error or "".
std::string BuildSpec(const std::map<std::string, std::string>& flags, JobSpec* spec) {
  auto get = [&](const std::string& name) {
    auto it = flags.find(name);
    return it == flags.end() ? std::string() : it->second;
  };
  if (get("arch").empty()) return "train start needs --arch mlp|mnist_cnn|model:<name>";
  if (get("output-model").empty()) return "train start needs --output-model NAME";
  if (get("dataset-dir").empty() == get("dataset-id").empty()) {
    return "train start needs one of --dataset-dir DIR (under kilnd's --dataset-roots) or "
           "--dataset-id ID";
  }
  spec->set_architecture(get("arch"));
  spec->set_output_model(get("output-model"));
  spec->set_name(get("name"));
  spec->set_device(get("device"));
  if (!get("dataset-dir").empty()) spec->mutable_dataset()->set_idx_dir(get("dataset-dir"));
  if (!get("dataset-id").empty()) spec->mutable_dataset()->set_dataset_id(get("dataset-id"));
  if (!get("mlp-sizes").empty()) {
    for (absl::string_view part : absl::StrSplit(get("mlp-sizes"), ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(part, &v)) {
        return absl::StrCat("--mlp-sizes needs comma-separated integers, got '", get("mlp-sizes"),
                            "'");
      }
      spec->add_mlp_sizes(v);
    }
  }
  std::string error;
  int64_t steps = 0, batch = 0, eval_interval = 0, eval_images = 0, checkpoint_interval = 0;
  uint64_t seed = 0;
  double lr = 0, momentum = 0, weight_decay = 0;
  if (!ParseNumber(flags, "steps", &steps, &error) ||
      !ParseNumber(flags, "batch", &batch, &error) ||
      !ParseNumber(flags, "eval-interval", &eval_interval, &error) ||
      !ParseNumber(flags, "eval-images", &eval_images, &error) ||
      !ParseNumber(flags, "checkpoint-interval", &checkpoint_interval, &error) ||
      !ParseNumber(flags, "seed", &seed, &error) || !ParseNumber(flags, "lr", &lr, &error) ||
      !ParseNumber(flags, "momentum", &momentum, &error) ||
      !ParseNumber(flags, "weight-decay", &weight_decay, &error)) {
    return error;
  }
  if (batch > INT32_MAX || batch < INT32_MIN) return "--batch is out of range";
  spec->set_steps(steps);
  spec->set_batch_size(static_cast<int32_t>(batch));
  spec->set_eval_interval(eval_interval);
  spec->set_eval_images(eval_images);
  spec->set_checkpoint_interval(checkpoint_interval);
  spec->set_seed(seed);
  spec->set_deterministic(flags.count("deterministic") > 0);
  auto* opt = spec->mutable_optimizer();
  opt->set_name(get("optimizer"));
  opt->set_lr(lr);
  opt->set_momentum(momentum);
  opt->set_weight_decay(weight_decay);
  opt->set_nesterov(flags.count("nesterov") > 0);
  return "";
}

int Start(KilnClient& client, bool json, const std::map<std::string, std::string>& flags,
          std::string* usage_error) {
  JobSpec spec;
  if (std::string e = BuildSpec(flags, &spec); !e.empty()) {
    *usage_error = e;
    return kUsage;
  }
  auto job = client.StartJob(spec);
  if (!job.ok()) return Failed(job.status());
  std::cout << (json ? ProtoJson(*job) : job->id()) << "\n";
  return kOk;
}

// Live progress on stdout: on a terminal one line redrawn in place; otherwise a line per state
// change, evaluation and checkpoint, and one about every 5% of the steps. --json prints only the
// final Job.
int Watch(KilnClient& client, bool json, const std::string& id) {
  const bool tty = !json && isatty(STDOUT_FILENO);
  Job last;
  bool seen = false;
  absl::Status s = client.WatchJob(id, [&](const JobEvent& event) {
    last = event.job();
    seen = true;
    if (json) return true;
    if (tty) {
      std::cout << "\r\033[K" << ProgressLine(last) << std::flush;
      return true;
    }
    const int64_t every = std::max<int64_t>(1, last.spec().steps() / 20);
    const bool step_due = event.kind() == JobEvent::STEP &&
                          (last.step() % every == 0 || last.step() == last.spec().steps());
    if (event.kind() != JobEvent::STEP || step_due) {
      std::cout << ProgressLine(last) << "\n" << std::flush;
    }
    return true;
  });
  if (tty && seen) std::cout << "\n";
  if (!s.ok()) return Failed(s);
  if (!seen || !IsTerminal(last.state())) {
    // The stream ended before the job did: report what the job is now.
    auto now = client.GetJob(id);
    if (!now.ok()) return Failed(now.status());
    last = *now;
  }
  if (json) {
    std::cout << ProtoJson(last) << "\n";
  } else {
    std::cout << "job " << last.id() << " " << v1::JobState_Name(last.state());
    if (last.state() == v1::SUCCEEDED && last.published_version() > 0) {
      std::cout << ": published " << last.spec().output_model() << " version "
                << last.published_version();
    }
    if (!last.message().empty()) std::cout << ": " << last.message();
    std::cout << "\n";
  }
  return last.state() == v1::SUCCEEDED ? kOk : kFailed;
}

int List(KilnClient& client, bool json) {
  auto jobs = client.ListJobs();
  if (!jobs.ok()) return Failed(jobs.status());
  if (json) {
    std::cout << ProtoJson(*jobs) << "\n";
    return kOk;
  }
  std::cout << absl::StrFormat("%-16s %-11s %-10s %-15s %9s %7s %-24s %s\n", "ID", "STATE", "ARCH",
                               "STEP", "LOSS", "ACC", "MODEL", "MESSAGE");
  for (const Job& j : jobs->jobs()) {
    std::string model = j.spec().output_model();
    if (j.published_version() > 0) absl::StrAppend(&model, ":", j.published_version());
    std::cout << absl::StrFormat("%-16s %-11s %-10s %-15s %9.4f %7s %-24s %s\n", j.id(),
                                 v1::JobState_Name(j.state()), j.spec().architecture(),
                                 absl::StrCat(j.step(), "/", j.spec().steps()), j.loss(),
                                 Accuracy(j), model, j.message());
  }
  return kOk;
}

int Show(bool json, const absl::StatusOr<Job>& job, const std::string& verb) {
  if (!job.ok()) return Failed(job.status());
  if (json) {
    std::cout << ProtoJson(*job) << "\n";
  } else {
    if (!verb.empty()) std::cout << verb << " ";
    std::cout << job->id() << ": " << ProgressLine(*job) << "\n";
  }
  return kOk;
}

// `s` as a JSON string literal.
std::string JsonQuote(const std::string& s) {
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

// SHA-256 of a byte stream, as lowercase hex.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  void Update(const std::string& data) { EVP_DigestUpdate(ctx_, data.data(), data.size()); }
  std::string Hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, digest, &len);
    std::string out;
    for (unsigned int i = 0; i < len; ++i) absl::StrAppendFormat(&out, "%02x", digest[i]);
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

// Downloads the newest checkpoint to `path`: written to path.tmp and renamed once its size and
// SHA-256 match what kilnd announced.
int Checkpoint(KilnClient& client, bool json, const std::string& id, const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::FILE* out = nullptr;
  kiln::v1::CheckpointChunk first;
  int64_t written = 0;
  Sha256 sha;
  absl::Status s = client.GetCheckpoint(id, [&](const kiln::v1::CheckpointChunk& c) {
    if (out == nullptr) {
      first = c;
      first.clear_data();
      out = std::fopen(tmp.c_str(), "wb");
      if (out == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(tmp, ": cannot create"));
      }
    }
    if (!c.data().empty() &&
        std::fwrite(c.data().data(), 1, c.data().size(), out) != c.data().size()) {
      return absl::InvalidArgumentError(absl::StrCat(tmp, ": write failed"));
    }
    written += static_cast<int64_t>(c.data().size());
    sha.Update(c.data());
    return absl::OkStatus();
  });
  const bool closed = out == nullptr || std::fclose(out) == 0;
  if (s.ok() && out == nullptr) s = absl::DataLossError("kilnd sent no checkpoint data");
  if (s.ok() && !closed) s = absl::InvalidArgumentError(absl::StrCat(tmp, ": write failed"));
  if (s.ok() && written != first.bytes()) {
    s = absl::DataLossError(absl::StrCat("received ", written, " bytes of ", first.bytes()));
  }
  if (s.ok() && sha.Hex() != first.sha256()) {
    s = absl::DataLossError("the received checkpoint's SHA-256 differs from kilnd's");
  }
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::InvalidArgumentError(absl::StrCat(path, ": cannot write"));
  }
  if (!s.ok()) {
    std::remove(tmp.c_str());
    return Failed(s);
  }
  if (json) {
    std::cout << absl::StrFormat(
        "{\"id\": %s, \"file\": %s, \"step\": %d, \"bytes\": %d, \"sha256\": %s}\n",
        JsonQuote(id), JsonQuote(path), first.step(), first.bytes(), JsonQuote(first.sha256()));
  } else {
    std::cout << "wrote " << path << ": job " << id << " checkpoint at step " << first.step()
              << ", " << first.bytes() << " bytes, sha256 " << first.sha256() << "\n";
  }
  return kOk;
}

}  // namespace

bool IsTrainValueFlag(const std::string& name) {
  for (const char* f : kValueFlags) {
    if (name == f) return true;
  }
  return false;
}

bool IsTrainBoolFlag(const std::string& name) {
  for (const char* f : kBoolFlags) {
    if (name == f) return true;
  }
  return false;
}

std::string TrainHelp(const std::string& command, const std::string& sub) {
  constexpr char kGlobal[] =
      "global options: --address HOST:PORT ($KILN_URL, else localhost:8001), --json, "
      "--timeout-ms N\n";
  if (sub.empty()) {
    std::string out = absl::StrCat("usage: kiln [global options] ", command,
                                   " SUBCOMMAND ...\ntraining jobs on kilnd (kiln.v1.Training; "
                                   "kilnd needs --data-dir)",
                                   command == "jobs" ? "; `kiln jobs` is `kiln train`" : "",
                                   "\n\nsubcommands:\n");
    for (const SubcommandHelp& s : kTrainSubcommands) {
      absl::StrAppendFormat(&out, "  %-11s %s\n", s.name, s.summary);
    }
    absl::StrAppend(&out, "\n", kGlobal, "`kiln ", command,
                    " SUBCOMMAND --help` describes one subcommand.\n");
    return out;
  }
  for (const SubcommandHelp& s : kTrainSubcommands) {
    if (sub == s.name) {
      return absl::StrCat("usage: kiln [global options] ", command, " ", s.synopsis, "\n",
                          s.summary, ".\n\n", s.details, "\n", kGlobal);
    }
  }
  return "";
}

int TrainCommand(KilnClient& client, bool json, const std::vector<std::string>& positional,
                 const std::map<std::string, std::string>& flags,
                 const std::vector<std::string>& outputs, std::string* usage_error) {
  const std::string sub = positional.size() >= 2 ? positional[1] : "";
  const size_t n = positional.size();
  auto usage = [&](const std::string& e) {
    *usage_error = e;
    return kUsage;
  };
  if (sub != "checkpoint" && !outputs.empty()) {
    return usage(absl::StrCat("-o/--output is for `train checkpoint`, not `train ", sub, "`"));
  }
  if (sub == "start") {
    if (n != 2) return usage("train start takes options only");
    return Start(client, json, flags, usage_error);
  }
  if (!flags.empty()) return usage(absl::StrCat("train ", sub, " takes no training options"));
  if (sub == "ls" && n == 2) return List(client, json);
  if (n != 3) {
    return usage(
        "train needs: start [options] | watch ID | ls | show ID | cancel ID | resume ID | "
        "checkpoint ID -o FILE");
  }
  const std::string& id = positional[2];
  if (sub == "checkpoint") {
    if (outputs.size() != 1) return usage("train checkpoint needs -o FILE");
    return Checkpoint(client, json, id, outputs[0]);
  }
  if (sub == "watch") return Watch(client, json, id);
  if (sub == "show") return Show(json, client.GetJob(id), "");
  if (sub == "cancel") return Show(json, client.CancelJob(id), "cancelled");
  if (sub == "resume") return Show(json, client.ResumeJob(id), "resumed");
  return usage(absl::StrCat("unknown train subcommand '", sub, "'"));
}

}  // namespace kiln::client
