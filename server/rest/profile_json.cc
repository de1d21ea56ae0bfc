#include "server/rest/profile_json.h"

#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace kiln::server {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void Str(Writer* w, const std::string& s) { w->String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

void Meta(Writer* w, int pid, int tid, const char* what, const std::string& name) {
  w->StartObject();
  w->Key("name");
  w->String(what);
  w->Key("ph");
  w->String("M");
  w->Key("pid");
  w->Int(pid);
  w->Key("tid");
  w->Int(tid);
  w->Key("args");
  w->StartObject();
  w->Key("name");
  Str(w, name);
  w->EndObject();
  w->EndObject();
}

// Microseconds, to the nanosecond.
double Micros(int64_t ns) { return static_cast<double>(ns) / 1e3; }

void Complete(Writer* w, const std::string& name, const char* cat, int pid, int tid, int64_t ts_ns,
              int64_t dur_ns) {
  w->Key("name");
  Str(w, name);
  w->Key("cat");
  w->String(cat);
  w->Key("ph");
  w->String("X");
  w->Key("ts");
  w->Double(Micros(ts_ns));
  w->Key("dur");
  w->Double(Micros(dur_ns));
  w->Key("pid");
  w->Int(pid);
  w->Key("tid");
  w->Int(tid);
}

}  // namespace

std::string ProfileJson(const Profile& profile) {
  const int pid = static_cast<int>(getpid());
  // One thread per lane, numbered in order of first appearance.
  std::map<std::pair<std::string, int>, int> tids;
  std::map<int, std::string> names;
  auto tid_of = [&](const ProfiledRun& r) {
    const int instance = r.model.empty() ? -1 : r.instance;
    auto [it, fresh] = tids.emplace(std::make_pair(r.device, instance), static_cast<int>(tids.size()) + 1);
    if (fresh) {
      names[it->second] = instance < 0 ? absl::StrCat(r.device, " kiln.v1 graphs")
                                       : absl::StrCat(r.device, " instance ", instance);
    }
    return it->second;
  };
  for (const ProfiledRun& r : profile.runs) tid_of(r);

  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("traceEvents");
  w.StartArray();
  Meta(&w, pid, 0, "process_name", "kilnd");
  for (const auto& [tid, name] : names) Meta(&w, pid, tid, "thread_name", name);
  int64_t untimed = 0;
  for (const ProfiledRun& r : profile.runs) {
    const int tid = tid_of(r);
    const std::string run_name = r.model.empty() ? "kiln.v1 graph" : r.model;
    w.StartObject();
    Complete(&w, run_name, "run", pid, tid, r.start_ns - profile.start_ns, static_cast<int64_t>(r.duration_ns));
    w.Key("args");
    w.StartObject();
    w.Key("model");
    Str(&w, r.model);
    w.Key("version");
    Str(&w, r.version);
    w.Key("jit");
    Str(&w, r.jit_event);
    w.Key("kernels");
    w.Uint64(r.kernels.size());
    w.EndObject();
    w.EndObject();
    for (const api::KernelTiming& k : r.kernels) {
      if (!k.timed || k.start_ns == 0) {
        ++untimed;
        continue;
      }
      w.StartObject();
      Complete(&w, k.name, "kernel", pid, tid, k.start_ns - profile.start_ns, static_cast<int64_t>(k.duration_ns));
      w.Key("args");
      w.StartObject();
      w.Key("device");
      Str(&w, k.device);
      w.Key("model");
      Str(&w, r.model);
      w.Key("bytes");
      w.Int64(k.bytes);
      w.Key("flops");
      w.Int64(k.flops);
      w.EndObject();
      w.EndObject();
    }
  }
  w.EndArray();
  w.Key("displayTimeUnit");
  w.String("ms");
  w.Key("otherData");
  w.StartObject();
  w.Key("model");
  Str(&w, profile.model);
  w.Key("seconds");
  w.Double(static_cast<double>(profile.end_ns - profile.start_ns) / 1e9);
  w.Key("runs");
  w.Uint64(profile.runs.size());
  w.Key("untimed_launches");
  w.Int64(untimed);
  w.Key("dropped_runs");
  w.Int64(profile.dropped_runs);
  w.EndObject();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace kiln::server
