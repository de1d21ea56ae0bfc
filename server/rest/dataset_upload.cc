// POST /v1/training/datasets (training_routes.h): a multipart/form-data body streamed into a
// JobManager::Upload as it arrives, at most kUploadBuffer of part data held before writing.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "kiln/v1/training.pb.h"
#include "server/rest/http_status.h"
#include "server/rest/multipart.h"
#include "server/rest/training_routes.h"

namespace kiln::server {
namespace {

constexpr size_t kUploadBuffer = 1 << 20;  // part data held per upload before writing

// Multipart part names of an upload -> DatasetChunk::File.
kiln::v1::DatasetChunk::File PartFile(const std::string& name) {
  if (name == "train_images" || name == "TRAIN_IMAGES") return kiln::v1::DatasetChunk::TRAIN_IMAGES;
  if (name == "train_labels" || name == "TRAIN_LABELS") return kiln::v1::DatasetChunk::TRAIN_LABELS;
  if (name == "test_images" || name == "TEST_IMAGES") return kiln::v1::DatasetChunk::TEST_IMAGES;
  if (name == "test_labels" || name == "TEST_LABELS") return kiln::v1::DatasetChunk::TEST_LABELS;
  return kiln::v1::DatasetChunk::FILE_UNSPECIFIED;
}

class DatasetUploadSink : public BodySink {
 public:
  DatasetUploadSink(JobManager* jobs, const HttpRequest& req, std::string boundary)
      : jobs_(jobs), reader_(std::move(boundary)), named_(req.HasParam("name")) {
    if (named_) query_name_ = std::string(req.Param("name"));
    chunk_.mutable_data()->reserve(kUploadBuffer);
  }

  bool Write(std::string_view piece, HttpResponse* res) override {
    if (!Begin(res)) return false;
    const bool ok = reader_.Feed(
        piece, [this](const MultipartReader::Part& part) { return OnPart(part); },
        [this](const char* data, size_t n) { return OnData(data, n); });
    if (ok) return true;
    Refuse(res);
    return false;
  }

  void Finish(HttpResponse* res) override {
    if (!Begin(res)) return;
    if (!FinishPart()) return Refuse(res);
    if (!reader_.complete()) return Refuse(res);
    if (!any_file_) {
      error_ = absl::InvalidArgumentError(
          "request body: no file parts (need train_images and train_labels)");
      return Refuse(res);
    }
    absl::StatusOr<kiln::v1::UploadDatasetResponse> done = upload_->Finish();
    if (!done.ok()) {
      upload_.reset();  // its staging folder goes before the client hears of the failure
      return SetStatus(res, done.status());
    }
    google::protobuf::util::JsonPrintOptions opt;
    opt.always_print_primitive_fields = true;
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(*done, &json, opt).ok()) json = "{}";
    SetJson(res, std::move(json));
  }

 private:
  // Starts the upload on the first call (it creates the staging folder, so not on an I/O
  // thread); the ?name= parameter is its first chunk.
  bool Begin(HttpResponse* res) {
    if (upload_ != nullptr) return true;
    if (refused_) return false;  // no calls follow a refusal; never start a second upload
    absl::StatusOr<std::unique_ptr<JobManager::Upload>> started = jobs_->BeginUpload();
    if (!started.ok()) {
      SetStatus(res, started.status());
      return false;
    }
    upload_ = *std::move(started);
    if (named_) {
      kiln::v1::DatasetChunk chunk;
      chunk.set_name(query_name_);
      if (!Append(chunk)) {
        Refuse(res);
        return false;
      }
    }
    return true;
  }

  bool Append(kiln::v1::DatasetChunk& chunk) {
    if (!error_.ok()) return false;
    error_ = upload_->Append(chunk);
    if (!error_.ok() && upload_->over_limit()) over_limit_ = true;
    return error_.ok();
  }

  bool Flush() {
    if (chunk_.data().empty()) return true;
    const bool ok = Append(chunk_);
    chunk_.mutable_data()->clear();
    return ok;
  }

  bool FinishPart() {
    if (in_name_part_) {
      kiln::v1::DatasetChunk first;
      first.set_name(name_text_);
      in_name_part_ = false;
      return Append(first);
    }
    return Flush();
  }

  bool OnPart(const MultipartReader::Part& part) {
    if (!FinishPart()) return false;
    const std::string part_name = part.name.substr(0, 64);
    if (part.name == "name") {
      if (named_ || any_file_) {
        error_ = absl::InvalidArgumentError(
            "name: send it once, as the first part (or as ?name=), before the file parts");
        return false;
      }
      named_ = in_name_part_ = true;
      name_text_.clear();
      return true;
    }
    const kiln::v1::DatasetChunk::File file = PartFile(part.name);
    if (file == kiln::v1::DatasetChunk::FILE_UNSPECIFIED) {
      error_ = absl::InvalidArgumentError(absl::StrCat(
          "part '", part_name,
          "': unknown (known: name, train_images, train_labels, test_images, test_labels)"));
      return false;
    }
    if (seen_[file]) {
      error_ = absl::InvalidArgumentError(absl::StrCat("part '", part_name, "': sent twice"));
      return false;
    }
    seen_[file] = any_file_ = true;
    chunk_.set_file(file);
    return true;
  }

  bool OnData(const char* data, size_t n) {
    if (in_name_part_) {
      if (name_text_.size() + n > kMaxDatasetPath) {
        error_ = absl::InvalidArgumentError(
            absl::StrCat("name: longer than the limit of ", kMaxDatasetPath, " characters"));
        return false;
      }
      name_text_.append(data, n);
      return true;
    }
    if (chunk_.file() == kiln::v1::DatasetChunk::FILE_UNSPECIFIED) return true;
    // Over the limit: write now, so Append refuses it with the limit named.
    const int64_t max_bytes = jobs_->max_dataset_bytes();
    if (upload_->bytes() + static_cast<int64_t>(chunk_.data().size() + n) > max_bytes) {
      chunk_.mutable_data()->append(data, n);
      return Flush();
    }
    chunk_.mutable_data()->append(data, n);
    return chunk_.data().size() < kUploadBuffer || Flush();
  }

  // The error response; the upload's staging folder is removed first, so it is gone by the time
  // the client reads the answer.
  void Refuse(HttpResponse* res) {
    upload_.reset();
    refused_ = true;
    if (over_limit_) return SetError(res, 413, std::string(error_.message()));
    if (!error_.ok()) {
      // A full disk is 507 Insufficient Storage, not "too many requests".
      const int http = absl::IsResourceExhausted(error_) ? 507 : HttpStatusFor(error_.code());
      return SetError(res, http, std::string(error_.message()));
    }
    SetError(res, 400,
             "request body: incomplete or malformed multipart/form-data (framing, boundary or "
             "timeout)");
  }

  JobManager* const jobs_;
  MultipartReader reader_;
  std::unique_ptr<JobManager::Upload> upload_;
  std::string query_name_;
  kiln::v1::DatasetChunk chunk_;  // the current part's data not yet written
  bool named_ = false, in_name_part_ = false, any_file_ = false, over_limit_ = false;
  bool refused_ = false;
  std::string name_text_;
  bool seen_[5] = {false, false, false, false, false};
  absl::Status error_;
};

}  // namespace

std::unique_ptr<BodySink> MakeDatasetUploadSink(JobManager* jobs, const HttpRequest& req,
                                                std::string boundary) {
  return std::make_unique<DatasetUploadSink>(jobs, req, std::move(boundary));
}

}  // namespace kiln::server
