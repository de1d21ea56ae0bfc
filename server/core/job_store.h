// JobStore: training jobs in SQLite (<data-dir>/jobs.db, embedded, WAL): one row per job (the
// kiln.v1.Job message), one row per (job, step) loss, and one row per repository model that
// training created (the publishing lineage: JobManager lets a job write versions only into a new
// model or one of these). Every write is one transaction, so a crash leaves the last committed
// state.
// Thread safety: every method may be called from any thread (one connection behind a mutex).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kiln/v1/training.pb.h"

struct sqlite3;

namespace kiln::server {

class JobStore {
 public:
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::filesystem::path& path);
  ~JobStore();

  absl::Status Put(const kiln::v1::Job& job);
  std::vector<kiln::v1::Job> All() const;  // by creation time
  absl::Status PutLoss(const std::string& id, int64_t step, float loss);
  std::vector<float> Losses(const std::string& id) const;  // steps 0.. in order

  // Records that training job `job` creates repository model `model` (idempotent: the first
  // job to claim a name keeps it).
  absl::Status PutPublishedModel(const std::string& model, const std::string& job);
  // True if a training job created repository model `model` (PutPublishedModel).
  bool IsPublishedModel(const std::string& model) const;

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql);
  // A failed sqlite3_step as a Status: SQLITE_FULL (disk full) is RESOURCE_EXHAUSTED naming it.
  absl::Status StepError(int rc) const;
  mutable absl::Mutex mu_;
  sqlite3* db_;
};

}  // namespace kiln::server
