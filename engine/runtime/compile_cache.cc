#include "engine/runtime/compile_cache.h"

#include <sqlite3.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/base/env.h"
#include "engine/base/sha256.h"
#include "engine/base/status.h"
#include "engine/codegen/render/renderer.h"
#include "spdlog/spdlog.h"

namespace kiln::runtime {
namespace {

absl::Mutex g_global_mu;
CompileCache* g_global ABSL_GUARDED_BY(g_global_mu) = nullptr;

bool IsFatalSqlite(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_CANTOPEN ||
         primary == SQLITE_IOERR || primary == SQLITE_READONLY || primary == SQLITE_PERM ||
         primary == SQLITE_FULL || primary == SQLITE_ERROR;
}

}  // namespace

CompileCache::CompileCache(Options options) : options_(std::move(options)) {
  db_path_ = options_.db_path.empty() ? DefaultPath() : options_.db_path;
  absl::MutexLock lock(&mem_mu_);
  memory_.SetLimits(options_.memory_entries, options_.memory_bytes);
}

CompileCache::~CompileCache() {
  absl::MutexLock lock(&disk_mu_);
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

CompileCache& CompileCache::Global() {
  absl::MutexLock lock(&g_global_mu);
  if (g_global == nullptr) g_global = new CompileCache(Options{});
  return *g_global;
}

void CompileCache::ConfigureGlobal(Options options) {
  absl::MutexLock lock(&g_global_mu);
  // The previous instance is leaked on purpose: references to it may still be held.
  g_global = new CompileCache(std::move(options));
}

std::string CompileCache::DefaultPath() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d != nullptr && *d != '\0') return absl::StrCat(d, "/cache.db");
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d != '\0')
    return absl::StrCat(d, "/kiln/cache.db");
  if (const char* d = std::getenv("HOME"); d != nullptr && *d != '\0') return absl::StrCat(d, "/.cache/kiln/cache.db");
  return "";
}

std::string CompileCache::Key(const std::string& renderer, const std::string& compiler_key, const std::string& name,
                              const std::string& source) {
  Sha256 h;
  h.UpdateField("kiln-compile-cache-v1");
  h.UpdateField(renderer);
  h.UpdateField(compiler_key);
  h.UpdateField(name);
  h.UpdateField(source);
  return DigestHex(h.Final());
}

void CompileCache::DiskFailed(const char* what) {
  const int rc = db_ != nullptr ? sqlite3_extended_errcode(db_) : SQLITE_CANTOPEN;
  const bool fatal = !disk_opened_ || db_ == nullptr || IsFatalSqlite(rc);
  spdlog::warn("compile cache: {} failed on {} ({}); {}", what, db_path_,
               db_ != nullptr ? sqlite3_errmsg(db_) : "cannot open",
               fatal ? "continuing without the disk cache" : "skipping the disk for this kernel");
  if (fatal) {
    disk_broken_ = true;
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = nullptr;
  }
  absl::MutexLock lock(&mem_mu_);
  ++stats_.disk_errors;
}

bool CompileCache::DiskUsable() {
  if (!options_.disk || disk_broken_ || db_path_.empty()) return false;
  if (disk_opened_) return db_ != nullptr;
  disk_opened_ = true;
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(db_path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  int rc = sqlite3_open_v2(db_path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    disk_opened_ = false;  // so DiskFailed treats it as fatal
    DiskFailed("open");
    disk_opened_ = true;
    return false;
  }
  sqlite3_busy_timeout(db_, 2000);
  const char* kSetup =
      "PRAGMA journal_mode=WAL;"
      "CREATE TABLE IF NOT EXISTS compile_cache(key TEXT PRIMARY KEY, binary BLOB NOT NULL, created INTEGER NOT NULL);";
  if (sqlite3_exec(db_, kSetup, nullptr, nullptr, nullptr) != SQLITE_OK) {
    disk_opened_ = false;
    DiskFailed("setup");
    disk_opened_ = true;
    return false;
  }
  return true;
}

bool CompileCache::DiskGet(const std::string& key, std::string* out) {
  absl::MutexLock lock(&disk_mu_);
  if (!DiskUsable()) return false;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT binary FROM compile_cache WHERE key = ?1", -1, &st, nullptr) != SQLITE_OK) {
    DiskFailed("read");
    return false;
  }
  sqlite3_bind_text(st, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st);
  bool found = false;
  if (rc == SQLITE_ROW) {
    const void* blob = sqlite3_column_blob(st, 0);
    const int n = sqlite3_column_bytes(st, 0);
    out->assign(static_cast<const char*>(blob), blob != nullptr ? static_cast<size_t>(n) : 0);
    found = true;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) DiskFailed("read");
  return found;
}

void CompileCache::DiskPut(const std::string& key, const std::string& binary) {
  absl::MutexLock lock(&disk_mu_);
  if (!DiskUsable()) return;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO compile_cache(key, binary, created) VALUES(?1, ?2, ?3)", -1,
                         &st, nullptr) != SQLITE_OK) {
    DiskFailed("write");
    return;
  }
  sqlite3_bind_text(st, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  sqlite3_bind_blob64(st, 2, binary.data(), binary.size(), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 3, static_cast<sqlite3_int64>(std::time(nullptr)));
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    DiskFailed("write");
    return;
  }
  absl::MutexLock mlock(&mem_mu_);
  ++stats_.disk_writes;
}

bool CompileCache::MemGet(const std::string& key, std::string* out) {
  absl::MutexLock lock(&mem_mu_);
  const std::string* hit = memory_.Get(key);
  if (hit == nullptr) return false;
  *out = *hit;
  ++stats_.memory_hits;
  return true;
}

void CompileCache::MemPut(const std::string& key, const std::string& binary) {
  if (options_.memory_entries == 0) return;
  absl::MutexLock lock(&mem_mu_);
  const int64_t before = memory_.stats().evictions;
  memory_.Put(key, binary, key.size() + binary.size());
  stats_.memory_evictions += memory_.stats().evictions - before;
}

absl::StatusOr<std::string> CompileCache::GetOrCompile(Compiler& compiler, const std::string& renderer,
                                                       const std::string& source, const std::string& name) {
  const std::string key = Key(renderer, compiler.CacheKey(), name, source);
  std::string binary;
  if (MemGet(key, &binary)) return binary;
  const bool use_disk = options_.disk && GetKnob(Knob::kCacheLevel) > 0;
  if (use_disk && DiskGet(key, &binary)) {
    {
      absl::MutexLock lock(&mem_mu_);
      ++stats_.disk_hits;
    }
    MemPut(key, binary);
    return binary;
  }
  const auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(binary, compiler.Compile(source, name));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    absl::MutexLock lock(&mem_mu_);
    ++stats_.misses;
    stats_.compile_seconds += secs;
  }
  MemPut(key, binary);
  if (use_disk) DiskPut(key, binary);
  return binary;
}

bool CompileCache::Lookup(const std::string& key, std::string* value) {
  if (MemGet(key, value)) return true;
  if (!options_.disk || GetKnob(Knob::kCacheLevel) <= 0 || !DiskGet(key, value)) return false;
  {
    absl::MutexLock lock(&mem_mu_);
    ++stats_.disk_hits;
  }
  MemPut(key, *value);
  return true;
}

void CompileCache::Store(const std::string& key, const std::string& value) {
  MemPut(key, value);
  if (options_.disk && GetKnob(Knob::kCacheLevel) > 0) DiskPut(key, value);
}

CompileCacheStats CompileCache::stats() const {
  absl::MutexLock lock(&mem_mu_);
  CompileCacheStats s = stats_;
  s.memory_entries = static_cast<int64_t>(memory_.size());
  s.memory_bytes = static_cast<int64_t>(memory_.bytes());
  s.memory_max_bytes = static_cast<int64_t>(options_.memory_bytes);
  return s;
}

void CompileCache::ClearMemory() {
  absl::MutexLock lock(&mem_mu_);
  memory_.Clear();
}

absl::StatusOr<CompiledKernel> CompileKernel(Device& device, const codegen::Program& program, CompileCache* cache) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(const codegen::Renderer* renderer, codegen::RendererFor(device.renderer()));
  CompiledKernel k;
  KILN_ASSIGN_OR_RETURN(k.source, renderer->Render(program));
  if (cache == nullptr) cache = &CompileCache::Global();
  KILN_ASSIGN_OR_RETURN(std::string binary,
                        cache->GetOrCompile(device.compiler(), renderer->name(), k.source, program.name));
  KILN_ASSIGN_OR_RETURN(k.program, device.Load(binary, program.name));
  k.binary_bytes = binary.size();
  k.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return k;
}

}  // namespace kiln::runtime
