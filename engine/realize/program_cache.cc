#include "engine/realize/program_cache.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/build_id.h"
#include "engine/base/env.h"
#include "engine/base/sha256.h"

namespace kiln::realize_internal {
namespace {

constexpr char kFormat[] = "kiln-program-v2";

class Writer {
 public:
  void Int(int64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void Str(const std::string& s) {
    Int(static_cast<int64_t>(s.size()));
    out_ += s;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  bool Int(int64_t* v) {
    if (s_.size() - pos_ < sizeof(*v)) return false;
    std::memcpy(v, s_.data() + pos_, sizeof(*v));
    pos_ += sizeof(*v);
    return true;
  }
  bool Str(std::string* v) {
    int64_t n = 0;
    if (!Int(&n) || n < 0 || static_cast<uint64_t>(n) > s_.size() - pos_) return false;
    v->assign(s_.data() + pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }
  bool Done() const { return pos_ == s_.size(); }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

std::string TargetString(const codegen::Target& t) {
  std::string s = absl::StrCat(t.renderer, "|", t.has_threads, "|", t.max_threads, "|", t.has_local, "|",
                               t.max_upcast, "|", t.supports_vectors, "|", t.vector_bytes, "|", t.max_local_size, "|",
                               t.wide_index, "|", t.global_max[0], ",", t.global_max[1], ",", t.global_max[2]);
  for (const codegen::TensorCore& tc : t.tensor_cores)
    absl::StrAppend(&s, "|tc", tc.m, "x", tc.n, "x", tc.k, ":", static_cast<int>(tc.in), ":", static_cast<int>(tc.acc),
                    ":", tc.threads, ":", static_cast<int>(tc.b_type()));
  return s;
}

}  // namespace

std::string ProgramCacheKey(runtime::Device& dev, const UOpPtr& ast, const codegen::Target& target,
                            const codegen::LowerOptions& lower) {
  const std::string& build = KilnBuildId();
  if (build.empty()) return "";
  Sha256 h;
  h.UpdateField(kFormat);
  h.UpdateField(build);
  h.UpdateField(dev.renderer());
  h.UpdateField(dev.compiler().CacheKey());
  h.UpdateField(TargetString(target));
  h.UpdateField(DigestHex(ast->Key()));
  h.UpdateField(absl::StrCat(GetKnob(Knob::kNoOpt), "|", GetKnob(Knob::kTc), "|", lower.use_explicit_opts));
  for (const codegen::Opt& o : lower.opts) h.UpdateField(o.ToString());
  return absl::StrCat("program:", DigestHex(h.Final()));
}

std::string SerializeProgram(const codegen::Program& p, int64_t source_bytes, const std::string& binary_key) {
  Writer w;
  w.Str(kFormat);
  w.Str(p.name);
  w.Int(static_cast<int64_t>(p.buffers.size()));
  for (const codegen::BufferParam& b : p.buffers) {
    w.Int(b.slot);
    w.Str(b.dtype.Name());
    w.Int(b.size);
    w.Int(b.is_output);
  }
  for (int i = 0; i < 3; ++i) w.Int(p.global_size[i]);
  for (int i = 0; i < 3; ++i) w.Int(p.local_size[i]);
  w.Int(p.threads);
  w.Int(static_cast<int64_t>(p.applied_opts.size()));
  for (const std::string& o : p.applied_opts) w.Str(o);
  w.Int(p.flops);
  w.Int(p.mem_bytes);
  w.Int(p.no_gather);
  w.Int(p.strided_loads);
  w.Int(p.slp_max_vf);
  w.Int(static_cast<int64_t>(p.uops.size()));
  w.Int(source_bytes);
  w.Str(binary_key);
  return w.Take();
}

bool DeserializeProgram(const std::string& blob, CachedProgram* out) {
  Reader r(blob);
  std::string format;
  if (!r.Str(&format) || format != kFormat) return false;
  codegen::Program& p = out->program;
  int64_t n = 0;
  if (!r.Str(&p.name) || !r.Int(&n) || n < 0 || n > (int64_t{1} << 20)) return false;
  for (int64_t i = 0; i < n; ++i) {
    codegen::BufferParam b;
    std::string dt;
    int64_t out_flag = 0;
    if (!r.Int(&b.slot) || !r.Str(&dt) || !r.Int(&b.size) || !r.Int(&out_flag)) return false;
    std::optional<DType> d = ParseDType(dt);
    if (!d) return false;
    b.dtype = *d;
    b.is_output = out_flag != 0;
    p.buffers.push_back(b);
  }
  for (int i = 0; i < 3; ++i)
    if (!r.Int(&p.global_size[i])) return false;
  for (int i = 0; i < 3; ++i)
    if (!r.Int(&p.local_size[i])) return false;
  int64_t threads = 0, flags[3] = {0, 0, 0}, vf = 0;
  if (!r.Int(&threads) || !r.Int(&n) || n < 0 || n > 4096) return false;
  p.threads = static_cast<int>(threads);
  for (int64_t i = 0; i < n; ++i) {
    std::string o;
    if (!r.Str(&o)) return false;
    p.applied_opts.push_back(std::move(o));
  }
  if (!r.Int(&p.flops) || !r.Int(&p.mem_bytes) || !r.Int(&flags[0]) || !r.Int(&flags[1]) || !r.Int(&vf) ||
      !r.Int(&out->uop_count) || !r.Int(&out->source_bytes) || !r.Str(&out->binary_key) || out->binary_key.empty() ||
      !r.Done())
    return false;
  p.no_gather = flags[0] != 0;
  p.strided_loads = flags[1] != 0;
  p.slp_max_vf = static_cast<int>(vf);
  return true;
}

}  // namespace kiln::realize_internal
