// InferenceServer::GenerateInfer (inference_server.h): KServe v2 inference on kiln_llm models,
// with the tensors of Triton's vLLM backend, so that stock tritonclient code runs against kilnd:
//
//   text_input               BYTES, shape [1] or [1, 1]  the prompt, used as it is (no chat
//                                                        template), as the generate route uses it
//   stream                   BOOL [1], optional          one response per text delta (streams only)
//   sampling_parameters      BYTES [1], optional         a JSON object of llm_sampling.h's fields
//   exclude_input_in_output  BOOL [1], optional          true only: kiln never echoes the prompt
//   text_output              BYTES, shape as text_input  the generated text (or a delta of it)
//
// The sampling fields are also read from the request parameters (Triton's generate extension),
// after sampling_parameters (a field in both: the parameter wins); other parameters are ignored
// except triton_enable_empty_final_response (bool; kiln always ends a stream's generation with
// an empty final response). As Triton's vLLM backend reads them, a number or boolean field may be
// sent as a string ("0.7", "true"). Every error is INVALID_ARGUMENT naming the input, output or
// parameter and the rule, before anything is submitted.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rapidjson/document.h"
#include "server/core/guard.h"
#include "server/core/inference_server.h"
#include "server/core/limits.h"
#include "server/core/llm_generation.h"
#include "server/core/llm_sampling.h"

namespace kiln::server {
namespace {

constexpr std::string_view kTextInput = "text_input";
constexpr std::string_view kStream = "stream";
constexpr std::string_view kSamplingParameters = "sampling_parameters";
constexpr std::string_view kExcludeInput = "exclude_input_in_output";
constexpr std::string_view kTextOutput = "text_output";
constexpr std::string_view kInputNames =
    "text_input, stream, sampling_parameters, exclude_input_in_output";

// What a kiln_llm inference request asks for.
struct LlmInferRequest {
  std::string text;
  bool stream = false;
  SamplingFields sampling;
  size_t text_rank = 1;  // of text_input; text_output answers with the same
};

absl::Status Bad(std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(problem)));
}

// Shown in messages: a client's name is cut, so a huge name cannot make a huge message.
std::string Where(std::string_view kind, std::string_view name) {
  return absl::StrCat(std::string(kind), "['", std::string(name.substr(0, kMaxNameLength)), "']");
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i == 0 ? "" : ", ", shape[i]);
  return s + "]";
}

// The input's datatype and shape: one element, shape [1] or [1, 1].
absl::Status CheckOne(const InferInput& in, const std::string& where, std::string_view datatype,
                      std::string_view what) {
  if (in.datatype != datatype) {
    return Bad(where + ".datatype",
               absl::StrCat("'", in.datatype.substr(0, 16), "', expected ", std::string(datatype),
                            " (", std::string(what), ")"));
  }
  int64_t elements = 1;
  bool ones = !in.shape.empty() && in.shape.size() <= 2;
  for (int64_t d : in.shape) {
    ones = ones && d == 1;
    if (d < 0 || elements < 0) {
      elements = -1;
    } else if (__builtin_mul_overflow(elements, d, &elements)) {
      elements = INT64_MAX;
    }
  }
  if (ones) return absl::OkStatus();
  const std::string shape = ShapeText(in.shape);
  if (elements > 1) {
    return Bad(where + ".shape",
               absl::StrCat(shape, " holds ", elements, " elements: a kiln_llm model takes one ",
                            in.name == kTextInput ? "prompt" : "value",
                            " per request (shape [1] or [1, 1]); send one request per prompt"));
  }
  return Bad(where + ".shape", absl::StrCat(shape, " is not [1] or [1, 1]"));
}

// Whether the input's data is its raw bytes (else its typed contents).
bool RawForm(const InferRequest& request, const InferInput& in) {
  return request.raw_input_count > 0 || in.shared_memory;
}

// The one BYTES element of `in` (checked by CheckOne).
absl::StatusOr<std::string_view> BytesValue(const InferRequest& request, const InferInput& in,
                                            const std::string& where) {
  if (!RawForm(request, in)) {
    if (in.typed.bytes.size() != 1) {
      return Bad(where + ".contents", absl::StrCat("holds ", in.typed.bytes.size(),
                                                   " bytes_contents elements, expected 1"));
    }
    return in.typed.bytes[0];
  }
  const std::string_view raw = in.raw;
  uint32_t length = 0;
  if (raw.size() >= 4) std::memcpy(&length, raw.data(), 4);  // little-endian, as the wire is
  if (raw.size() < 4 || raw.size() - 4 != length) {
    return Bad(where, absl::StrCat("its ", raw.size(),
                                   " bytes of data are not one BYTES element (a 4-byte "
                                   "little-endian length, then that many bytes)"));
  }
  return raw.substr(4);
}

// The one BOOL element of `in` (checked by CheckOne).
absl::StatusOr<bool> BoolValue(const InferRequest& request, const InferInput& in,
                               const std::string& where) {
  if (!RawForm(request, in)) {
    if (in.typed.bools.size() != 1) {
      return Bad(where + ".contents", absl::StrCat("holds ", in.typed.bools.size(),
                                                   " bool_contents elements, expected 1"));
    }
    return in.typed.bools[0];
  }
  if (in.raw.size() != 1) {
    return Bad(where, absl::StrCat(in.raw.size(), " bytes of data, expected 1 (one BOOL)"));
  }
  return in.raw[0] != 0;
}

// A string sent for a number or boolean field ("0.7", "16", "true"), as Triton's vLLM backend
// accepts it, becomes what it spells; any other value is copied.
void CoerceInto(std::string_view key, const rapidjson::Value& in, rapidjson::Value* out,
                rapidjson::Document::AllocatorType& alloc) {
  if (in.IsString() && key != "stop") {
    const absl::string_view s(in.GetString(), in.GetStringLength());
    int64_t i = 0;
    double d = 0;
    if (key == "ignore_eos") {
      if (s == "true" || s == "True" || s == "false" || s == "False") {
        out->SetBool(s[0] == 't' || s[0] == 'T');
        return;
      }
    } else if (absl::SimpleAtoi(s, &i)) {
      out->SetInt64(i);
      return;
    } else if (absl::SimpleAtod(s, &d)) {
      out->SetDouble(d);
      return;
    }
  }
  out->CopyFrom(in, alloc);
}

// sampling_parameters: a JSON object of sampling fields, each one known.
absl::Status ReadSamplingParameters(std::string_view json, const std::string& where,
                                    SamplingFields* out) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(json.data(), json.size());
  if (doc.HasParseError()) {
    return Bad(where, absl::StrCat("not valid JSON (error at byte ", doc.GetErrorOffset(), ")"));
  }
  if (!doc.IsObject()) return Bad(where, "not a JSON object");
  const rapidjson::Value& object = doc;
  for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
    const std::string_view key(it->name.GetString(), it->name.GetStringLength());
    const std::string field =
        absl::StrCat(std::string(kSamplingParameters), ".", std::string(key.substr(0, 64)));
    rapidjson::Value v;
    CoerceInto(key, it->value, &v, doc.GetAllocator());
    absl::StatusOr<bool> read = ReadSamplingField(key, v, field, out);
    if (!read.ok()) return read.status();
    if (!*read) {
      return Bad(field, absl::StrCat("not a sampling field kiln reads (it reads ",
                                     std::string(kSamplingFieldNames), ")"));
    }
  }
  return absl::OkStatus();
}

// The request parameters: sampling fields (others ignored, as Triton ignores them).
absl::Status ReadParameters(const Parameters& parameters, SamplingFields* out) {
  for (const auto& [key, value] : parameters) {
    const std::string field = absl::StrCat("parameters.", key.substr(0, 64));
    if (key == "triton_enable_empty_final_response") {
      if (!std::holds_alternative<bool>(value)) return Bad(field, "expected a bool");
      continue;  // kiln always sends the empty final response of a streamed generation
    }
    rapidjson::Document doc;
    if (const bool* b = std::get_if<bool>(&value)) {
      doc.SetBool(*b);
    } else if (const int64_t* i = std::get_if<int64_t>(&value)) {
      doc.SetInt64(*i);
    } else if (const uint64_t* u = std::get_if<uint64_t>(&value)) {
      doc.SetUint64(*u);
    } else if (const double* d = std::get_if<double>(&value)) {
      doc.SetDouble(*d);
    } else if (const std::string* s = std::get_if<std::string>(&value)) {
      rapidjson::Value text(s->data(), static_cast<rapidjson::SizeType>(s->size()));
      CoerceInto(key, text, &doc, doc.GetAllocator());
    } else {
      const std::string& json = std::get<ParameterJson>(value).text;
      doc.Parse<rapidjson::kParseIterativeFlag>(json.data(), json.size());
      if (doc.HasParseError()) return Bad(field, "not valid JSON");
    }
    absl::StatusOr<bool> read = ReadSamplingField(key, doc, field, out);
    if (!read.ok()) return read.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<LlmInferRequest> ReadRequest(const ModelVersion& version,
                                            const InferRequest& request,
                                            int64_t max_request_bytes) {
  LlmInferRequest out;
  bool seen[4] = {false, false, false, false};
  const std::string_view names[4] = {kTextInput, kStream, kSamplingParameters, kExcludeInput};
  std::string_view sampling_json;
  int64_t wire_inputs = 0;
  for (const InferInput& in : request.inputs) {
    const std::string where = Where("inputs", in.name);
    const int k = static_cast<int>(std::find(names, names + 4, in.name) - names);
    if (k == 4) {
      return Bad(where, absl::StrCat("not an input of kiln_llm model '", version.name,
                                     "' (it reads ", std::string(kInputNames), ")"));
    }
    if (seen[k]) return Bad(where, "given twice");
    seen[k] = true;
    if (!in.shared_memory) ++wire_inputs;
    if (in.has_contents && RawForm(request, in)) {
      return Bad(where + ".contents", "set together with raw or shared memory data (use one form)");
    }
    const bool bytes = k == 0 || k == 2;
    if (absl::Status s = CheckOne(in, where, bytes ? "BYTES" : "BOOL",
                                  k == 0   ? "the prompt"
                                  : k == 2 ? "a JSON object"
                                           : "true or false");
        !s.ok()) {
      return s;
    }
    if (bytes) {
      absl::StatusOr<std::string_view> value = BytesValue(request, in, where);
      if (!value.ok()) return value.status();
      if (static_cast<int64_t>(value->size()) > max_request_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat(where, ": ", value->size(), " bytes exceed the limit of ",
                         max_request_bytes, " bytes (--max-request-bytes)"));
      }
      if (k == 0) {
        out.text = std::string(*value);
        out.text_rank = in.shape.size();
      } else {
        sampling_json = *value;
      }
      continue;
    }
    absl::StatusOr<bool> value = BoolValue(request, in, where);
    if (!value.ok()) return value.status();
    if (k == 1) out.stream = *value;
    if (k == 3 && !*value) {
      return Bad(where,
                 "false is not supported: kiln never echoes the prompt in text_output "
                 "(send true or leave the input out)");
    }
  }
  if (request.raw_input_count > 0 && request.raw_input_count != wire_inputs) {
    return Bad("raw_input_contents",
               absl::StrCat(request.raw_input_count, " entries for ", wire_inputs,
                            " inputs (give raw contents for every input or for none)"));
  }
  if (!seen[0]) {
    return Bad("inputs", absl::StrCat("missing input 'text_input' (BYTES, shape [1]: the prompt) "
                                      "for kiln_llm model '",
                                      version.name, "'"));
  }
  for (const std::string& name : request.requested_outputs) {
    if (name != kTextOutput) {
      return Bad(Where("outputs", name), absl::StrCat("not an output of kiln_llm model '",
                                                      version.name, "' (it answers text_output)"));
    }
  }
  if (!request.shared_memory_outputs.empty()) {
    return Bad(Where("outputs", request.shared_memory_outputs.front().name) + ".parameters",
               "shared memory outputs are not supported by kiln_llm models");
  }
  for (int64_t k : request.classification) {
    if (k > 0)
      return Bad("outputs['text_output'].parameters.classification", "not a tensor to classify");
  }
  if (!sampling_json.empty() || seen[2]) {
    if (absl::Status s = ReadSamplingParameters(sampling_json, Where("inputs", kSamplingParameters),
                                                &out.sampling);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ReadParameters(request.parameters, &out.sampling); !s.ok()) return s;
  return out;
}

// One kiln_llm inference from Submit to its final response. OnEvent runs on the generator's
// thread, one event at a time; Started and Cancel on any thread.
class LlmInferCall {
 public:
  LlmInferCall(InferObserver* observer, std::shared_ptr<const ModelVersion> version,
               const InferRequest& request, bool decoupled, const LlmInferRequest& read,
               InferenceServer::StreamCallback respond)
      : meter_(observer, version, decoupled ? "stream_infer" : "infer"),
        model_(version->name),
        version_(std::to_string(version->version)),
        id_(request.id),
        cancellation_(request.cancellation),
        deadline_(
            request.timeout_us > 0
                ? std::min(request.deadline, absl::Now() + absl::Microseconds(request.timeout_us))
                : request.deadline),
        decoupled_(decoupled),
        stream_(read.stream),
        text_rank_(read.text_rank),
        respond_(std::move(respond)) {}

  GenerationMeter& meter() { return meter_; }

  // The generation's number, after Submit: a Cancel that came first takes effect now.
  void Started(uint64_t generation) {
    bool cancel = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      generation_ = generation;
      started_ = true;
      cancel = cancel_requested_ && !ended_;
    }
    if (cancel) meter_.llm().Cancel(generation);
  }

  void Cancel() {
    uint64_t generation = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (ended_ || cancel_requested_) return;
      cancel_requested_ = true;
      if (!started_) return;  // Started cancels it
      generation = generation_;
    }
    meter_.llm().Cancel(generation);  // its slot is free before the next step
  }

  void OnEvent(const api::GenerateEvent& ev) {
    meter_.Time(ev);
    if (!ev.done) {
      // The client went away or its deadline passed: stop at the next step.
      if (cancellation_ != nullptr && cancellation_->cancelled()) Cancel();
      if (absl::Now() >= deadline_) Cancel();
      if (!stream_) {
        text_ += ev.text;
      } else if (!ev.text.empty()) {
        respond_(Response(&ev.text, /*final=*/false), false);
      }
      return;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      ended_ = true;
    }
    if (ev.finish_reason == "error") {
      respond_(ev.status.ok() ? absl::InternalError("the generation failed") : ev.status, true);
      return;
    }
    if (ev.finish_reason == "cancelled") {
      respond_(CancelledStatus(), true);
      return;
    }
    if (!stream_) {
      text_ += ev.text;
      respond_(Response(&text_, /*final=*/true), true);
      return;
    }
    if (!ev.text.empty()) respond_(Response(&ev.text, /*final=*/false), false);
    respond_(Response(nullptr, /*final=*/true), true);
  }

 private:
  // The answer: text_output holding `text` (none when null), and on a stream the parameter
  // triton_final_response.
  InferResponse Response(const std::string* text, bool final) const {
    InferResponse r;
    r.model_name = model_;
    r.model_version = version_;
    r.id = id_;
    if (text != nullptr) {
      InferOutput out;
      out.name = std::string(kTextOutput);
      out.datatype = "BYTES";
      out.shape.assign(text_rank_, 1);
      const uint32_t length = static_cast<uint32_t>(text->size());
      out.raw.resize(4);
      std::memcpy(out.raw.data(), &length, 4);  // little-endian, as the wire is
      out.raw += *text;
      r.outputs.push_back(std::move(out));
    }
    if (decoupled_) r.parameters.emplace_back("triton_final_response", final);
    return r;
  }

  absl::Status CancelledStatus() {
    bool requested = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      requested = cancel_requested_;
    }
    if (cancellation_ != nullptr && cancellation_->cancelled()) {
      return absl::CancelledError("the request was cancelled");
    }
    if (absl::Now() >= deadline_) {
      return absl::DeadlineExceededError("the request's deadline passed during the generation");
    }
    if (requested) return absl::CancelledError("the request was cancelled");
    return absl::UnavailableError(
        "the generation was cancelled: kilnd is stopping or unloading the model");
  }

  GenerationMeter meter_;
  const std::string model_, version_, id_;
  const std::shared_ptr<const api::CancellationToken> cancellation_;
  const absl::Time deadline_;
  const bool decoupled_, stream_;
  const size_t text_rank_;
  const InferenceServer::StreamCallback respond_;
  std::string text_;  // generator thread: the text so far (not streamed)
  std::mutex mu_;
  uint64_t generation_ = 0;        // guarded by mu_
  bool started_ = false;           // guarded by mu_
  bool cancel_requested_ = false;  // guarded by mu_
  bool ended_ = false;             // guarded by mu_
};

}  // namespace

InferenceServer::StreamHandle InferenceServer::GenerateInfer(
    std::shared_ptr<const ModelVersion> version, const InferRequest& request, bool decoupled,
    StreamCallback respond) {
  if (version->llm == nullptr) {
    respond(absl::UnavailableError(
                absl::StrCat("model '", version->name, "' has no engine in this kilnd")),
            true);
    return {};
  }
  api::LlmModel& llm = *version->llm;
  // Everything that can refuse the request, before anything is submitted.
  std::shared_ptr<LlmInferCall> call;
  absl::StatusOr<PreparedGeneration> prepared =
      Guard("ModelInfer (kiln_llm)", [&]() -> absl::StatusOr<PreparedGeneration> {
        absl::StatusOr<LlmInferRequest> read =
            ReadRequest(*version, request, options_.max_request_bytes);
        if (!read.ok()) return read.status();
        if (read->stream && !decoupled) {
          return Bad(Where("inputs", kStream),
                     "true asks for one response per text delta, which only a stream can carry "
                     "(gRPC ModelStreamInfer; over HTTP POST /v2/models/NAME/generate_stream): "
                     "send false or leave it out");
        }
        absl::StatusOr<PreparedGeneration> p =
            PrepareGeneration(llm, read->text, kTextInput, read->sampling.max_tokens,
                              read->sampling.params, /*default_max_tokens=*/16);
        if (!p.ok()) return p.status();
        call =
            std::make_shared<LlmInferCall>(observer_, version, request, decoupled, *read, respond);
        return p;
      });
  if (!prepared.ok()) {
    respond(prepared.status(), true);
    return {};
  }
  absl::StatusOr<uint64_t> generation = Guard("ModelInfer (kiln_llm submit)", [&] {
    return llm.Submit(std::move(prepared->prompt), prepared->params,
                      [call](const api::GenerateEvent& ev) {
                        GuardVoid("ModelInfer (kiln_llm answer)", [&] { call->OnEvent(ev); });
                      });
  });
  if (!generation.ok()) {
    respond(generation.status(), true);
    return {};
  }
  GuardVoid("ModelInfer (kiln_llm started)", [&] {
    call->Started(*generation);
    call->meter().Occupancy();
  });
  if (!decoupled) return {};
  return StreamHandle{true, [call] { call->Cancel(); }};
}

}  // namespace kiln::server
