#include "server/core/job_store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"

namespace kiln::server {

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::filesystem::path& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("job store: ", msg));
  }
  std::unique_ptr<JobStore> store(new JobStore(db));
  sqlite3_busy_timeout(db, 5000);
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                          "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, created INTEGER,"
                          " job BLOB)",
                          "CREATE TABLE IF NOT EXISTS losses (id TEXT, step INTEGER, loss REAL,"
                          " PRIMARY KEY (id, step))",
                          "CREATE TABLE IF NOT EXISTS published_models (model TEXT PRIMARY KEY,"
                          " job TEXT)"}) {
    if (absl::Status st = store->Exec(sql); !st.ok()) return st;
  }
  return store;
}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::Status JobStore::StepError(int rc) const {
  if ((rc & 0xff) == SQLITE_FULL) {  // SQLite's name for ENOSPC on a write
    return absl::ResourceExhaustedError(
        "job store <data-dir>/jobs.db: database or disk is full (no space left on device, "
        "ENOSPC)");
  }
  return absl::InternalError(absl::StrCat("job store: ", sqlite3_errmsg(db_)));
}

absl::Status JobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("job store: ", msg));
  }
  return absl::OkStatus();
}

absl::Status JobStore::Put(const kiln::v1::Job& job) {
  absl::MutexLock l(&mu_);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO jobs (id, created, job) VALUES (?, ?, ?)", -1, &st,
                     nullptr);
  const std::string blob = job.SerializeAsString();
  sqlite3_bind_text(st, 1, job.id().data(), static_cast<int>(job.id().size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, job.created_unix_ms());
  sqlite3_bind_blob(st, 3, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return StepError(rc);
  return absl::OkStatus();
}

std::vector<kiln::v1::Job> JobStore::All() const {
  absl::MutexLock l(&mu_);
  std::vector<kiln::v1::Job> out;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_, "SELECT job FROM jobs ORDER BY created, id", -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    kiln::v1::Job job;
    if (job.ParseFromArray(sqlite3_column_blob(st, 0), sqlite3_column_bytes(st, 0))) {
      out.push_back(std::move(job));
    }
  }
  sqlite3_finalize(st);
  return out;
}

absl::Status JobStore::PutLoss(const std::string& id, int64_t step, float loss) {
  absl::MutexLock l(&mu_);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO losses (id, step, loss) VALUES (?, ?, ?)", -1,
                     &st, nullptr);
  sqlite3_bind_text(st, 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, step);
  sqlite3_bind_double(st, 3, static_cast<double>(loss));  // a float is exact in a double
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return StepError(rc);
  return absl::OkStatus();
}

std::vector<float> JobStore::Losses(const std::string& id) const {
  absl::MutexLock l(&mu_);
  std::vector<float> out;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_, "SELECT loss FROM losses WHERE id = ? ORDER BY step", -1, &st, nullptr);
  sqlite3_bind_text(st, 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
  while (sqlite3_step(st) == SQLITE_ROW) {
    out.push_back(static_cast<float>(sqlite3_column_double(st, 0)));
  }
  sqlite3_finalize(st);
  return out;
}

absl::Status JobStore::PutPublishedModel(const std::string& model, const std::string& job) {
  absl::MutexLock l(&mu_);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_, "INSERT OR IGNORE INTO published_models (model, job) VALUES (?, ?)", -1,
                     &st, nullptr);
  sqlite3_bind_text(st, 1, model.data(), static_cast<int>(model.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, job.data(), static_cast<int>(job.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return StepError(rc);
  return absl::OkStatus();
}

bool JobStore::IsPublishedModel(const std::string& model) const {
  absl::MutexLock l(&mu_);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_, "SELECT 1 FROM published_models WHERE model = ?", -1, &st, nullptr);
  sqlite3_bind_text(st, 1, model.data(), static_cast<int>(model.size()), SQLITE_TRANSIENT);
  const bool found = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return found;
}

}  // namespace kiln::server
