// CompileCache: compiled kernels by content, in memory (LRU) and on disk (SQLite), so a restart compiles nothing it
// has compiled before (DESIGN.md §3 Caches).
//
// Key = SHA-256 over (renderer name, compiler CacheKey() -- target CPU, features, LLVM version --, entry name, source
// text), each length-prefixed. Value = the compiler's binary bytes (e.g. an ELF object for CPU).
//
// Disk: one SQLite file, table `compile_cache(key TEXT PRIMARY KEY, binary BLOB, created INTEGER)`, WAL mode,
// busy_timeout 2 s; several processes may share it. The path is Options::db_path, or DefaultPath():
// $KILN_CACHE_DIR/cache.db, else $XDG_CACHE_HOME/kiln/cache.db, else $HOME/.cache/kiln/cache.db (directories are
// created). CACHELEVEL=0 (GetKnob(Knob::kCacheLevel), read on every call, so a kiln::Context may override it) skips
// the disk entirely. The cache never fails a compile: a DB that cannot be opened, is corrupt, locked or read-only
// logs one warning and the cache continues in memory only (stats().disk_errors counts these).
//
// Thread-safe. Two threads missing on the same key at once may both compile (both results are identical).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/lru_cache.h"
#include "engine/codegen/program.h"
#include "engine/runtime/device.h"

struct sqlite3;

namespace kiln::runtime {

struct CompileCacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;       // binaries and Lookup values read from the disk
  int64_t misses = 0;          // = compiles performed through this cache
  int64_t disk_writes = 0;
  int64_t disk_errors = 0;     // open/read/write failures (each also disables or skips the disk)
  double compile_seconds = 0;  // total time spent in Compiler::Compile on misses
  int64_t memory_entries = 0;  // binaries held in memory now
  int64_t memory_bytes = 0;    // ... and their bytes (keys included)
  int64_t memory_evictions = 0;
  int64_t memory_max_bytes = 0;  // Options::memory_bytes
};

class CompileCache {
 public:
  struct Options {
    std::string db_path;             // empty: DefaultPath()
    size_t memory_entries = 4096;    // LRU capacity (entries); 0 disables the memory level
    size_t memory_bytes = 64u << 20; // LRU capacity (bytes of binaries and keys); 0 = no byte bound
    bool disk = true;                // false: memory only, regardless of CACHELEVEL
  };
  CompileCache() : CompileCache(Options{}) {}
  explicit CompileCache(Options options);
  ~CompileCache();
  CompileCache(const CompileCache&) = delete;
  CompileCache& operator=(const CompileCache&) = delete;

  // The process-wide cache (created on first use with default Options; never destroyed).
  static CompileCache& Global();
  // Replaces the global cache's options (kilnd --cache-dir, tests). Counters restart at zero. Call at start-up,
  // before other threads use Global().
  static void ConfigureGlobal(Options options);

  // The binary for `source`: from memory, else disk, else compiler.Compile(source, name) (then stored in both).
  // Compile errors are returned as is (and not cached).
  absl::StatusOr<std::string> GetOrCompile(Compiler& compiler, const std::string& renderer, const std::string& source,
                                           const std::string& name);

  // Small values stored beside the binaries under the caller's own keys (BEAM's chosen opts, engine/realize/beam.h):
  // memory, then disk (same table and CACHELEVEL rule as the binaries). Keys must not collide with Key()'s hex
  // digests: prefix them ("beam:..."). Lookup never fails: false when absent or unreadable.
  bool Lookup(const std::string& key, std::string* value);
  void Store(const std::string& key, const std::string& value);

  CompileCacheStats stats() const;
  // Drops the in-memory entries (the disk keeps them). For tests.
  void ClearMemory();
  // The resolved disk path (empty if none could be determined).
  const std::string& db_path() const { return db_path_; }

  static std::string DefaultPath();
  // The cache key for the given inputs (hex SHA-256).
  static std::string Key(const std::string& renderer, const std::string& compiler_key, const std::string& name,
                         const std::string& source);

 private:
  bool DiskUsable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(disk_mu_);
  void DiskFailed(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(disk_mu_);
  bool DiskGet(const std::string& key, std::string* out);
  void DiskPut(const std::string& key, const std::string& binary);
  bool MemGet(const std::string& key, std::string* out);
  void MemPut(const std::string& key, const std::string& binary);

  Options options_;
  std::string db_path_;

  mutable absl::Mutex mem_mu_;
  // Binaries by key; an entry's bytes are its key's and its binary's.
  LruCache<std::string, std::string> memory_ ABSL_GUARDED_BY(mem_mu_){1, 0};
  CompileCacheStats stats_ ABSL_GUARDED_BY(mem_mu_);

  absl::Mutex disk_mu_;
  sqlite3* db_ ABSL_GUARDED_BY(disk_mu_) = nullptr;
  bool disk_opened_ ABSL_GUARDED_BY(disk_mu_) = false;
  bool disk_broken_ ABSL_GUARDED_BY(disk_mu_) = false;
};

// A kernel rendered, compiled (through the cache) and loaded on a device.
struct CompiledKernel {
  std::string source;
  std::unique_ptr<Program> program;
  size_t binary_bytes = 0;     // size of the compiled binary that was loaded
  double compile_seconds = 0;  // render + compile + load wall time
};

// Renders `program` with the device's renderer, compiles it through `cache` (Global() when null) and loads it.
absl::StatusOr<CompiledKernel> CompileKernel(Device& device, const codegen::Program& program,
                                             CompileCache* cache = nullptr);

}  // namespace kiln::runtime
