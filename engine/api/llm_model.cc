// LlmModel (llm_model.h).
#include "engine/api/llm_model.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/api/guard.h"
#include "engine/base/status.h"
#include "engine/llm/chat_template.h"
#include "engine/llm/generator.h"
#include "engine/llm/llama.h"
#include "engine/llm/tokenizer.h"
#include "engine/nn/state/gguf.h"
#include "engine/realize/realize.h"

namespace kiln::api {

struct LlmModel::State {
  LlmInfo info;
  RealizeContext ctx;
  std::unique_ptr<nn::GgufModel> gguf;
  std::unique_ptr<llm::BpeTokenizer> tok;
  std::unique_ptr<llm::LlamaModel> model;
  std::optional<llm::ChatTemplate> chat;
  std::unique_ptr<llm::Generator> gen;  // declared last: stopped first
};

LlmModel::LlmModel(std::unique_ptr<State> state) : state_(std::move(state)) {}

LlmModel::~LlmModel() { state_->gen.reset(); }

absl::StatusOr<std::shared_ptr<LlmModel>> LlmModel::Load(const std::string& gguf_path,
                                                         const LlmOptions& options) {
  return GuardEngineCall("LlmModel::Load", [&]() -> absl::StatusOr<std::shared_ptr<LlmModel>> {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(gguf_path, ec))
      return absl::NotFoundError(absl::StrCat("model file ",
                                              std::filesystem::path(gguf_path).filename().string(),
                                              " is missing or not a regular file"));
    auto st = std::make_unique<State>();
    ScopedRealizeContext scope(st->ctx);
    KILN_ASSIGN_OR_RETURN(st->gguf, nn::GgufModel::Open(gguf_path));
    KILN_ASSIGN_OR_RETURN(st->tok, llm::BpeTokenizer::FromGguf(st->gguf->file()));
    KILN_ASSIGN_OR_RETURN(
        st->model,
        llm::LlamaModel::Create(*st->gguf, options.device.empty() ? "CPU" : options.device,
                                {.int8_activations = options.int8_activations}));
    const llm::LlamaConfig& c = st->model->config();
    if (options.max_ctx < 2 || options.max_ctx > c.context_length)
      return absl::InvalidArgumentError(absl::StrCat("max_ctx: ", options.max_ctx,
                                                     " is outside 2..", c.context_length,
                                                     " (the model's context length)"));
    if (options.slots < 1 || options.slots > 256)
      return absl::InvalidArgumentError(
          absl::StrCat("slots: ", options.slots, " is outside 1..256"));
    if (st->gguf->file().Find("tokenizer.chat_template") != nullptr) {
      absl::StatusOr<std::string> text = st->gguf->file().GetString("tokenizer.chat_template");
      if (!text.ok()) return text.status();
      absl::StatusOr<llm::ChatTemplate> chat = llm::ChatTemplate::Parse(*text);
      if (!chat.ok())
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.chat_template: ", chat.status().message()));
      st->chat = std::move(*chat);
    }
    LlmInfo& info = st->info;
    info.architecture = "llama";
    if (absl::StatusOr<std::string> name = st->gguf->file().GetString("general.name"); name.ok())
      info.name = *name;
    info.context_length = c.context_length;
    info.vocab = c.vocab;
    info.n_layer = c.n_layer;
    info.n_embd = c.n_embd;
    for (const nn::GgufTensorInfo& t : st->gguf->file().tensors) info.params += t.numel();
    info.slots = options.slots;
    info.max_ctx = options.max_ctx;
    info.has_chat_template = st->chat.has_value();
    info.quantized_activations = st->model->quantizes_activations();
    KILN_ASSIGN_OR_RETURN(st->gen, llm::Generator::Create(st->model.get(), st->tok.get(),
                                                          {.slots = options.slots,
                                                           .max_ctx = options.max_ctx,
                                                           .max_queue = options.max_queue,
                                                           .context = &st->ctx,
                                                           .warm = options.warm}));
    return std::shared_ptr<LlmModel>(new LlmModel(std::move(st)));
  });
}

const LlmInfo& LlmModel::info() const { return state_->info; }

absl::StatusOr<std::string> LlmModel::ApplyChatTemplate(const std::vector<ChatTurn>& messages,
                                                        bool add_generation_prompt) const {
  if (!state_->chat.has_value())
    return absl::FailedPreconditionError("the model file has no tokenizer.chat_template");
  std::vector<llm::ChatMessage> m;
  for (const ChatTurn& t : messages) m.push_back({t.role, t.content});
  const llm::BpeTokenizer& tok = *state_->tok;
  const std::string bos = tok.bos_id() >= 0 ? tok.Decode({tok.bos_id()}).value_or("") : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.Decode({tok.eos_id()}).value_or("") : "";
  return state_->chat->Render(m, add_generation_prompt, bos, eos);
}

absl::StatusOr<std::vector<int32_t>> LlmModel::Tokenize(std::string_view text) const {
  return state_->tok->Encode(text, /*parse_special=*/true);
}

absl::StatusOr<uint64_t> LlmModel::Submit(std::vector<int32_t> prompt, const GenerateParams& params,
                                          GenerateCallback callback) {
  llm::GenerationRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = params.max_tokens;
  req.sampling = {.temperature = params.temperature,
                  .top_k = params.top_k,
                  .top_p = params.top_p,
                  .seed = params.seed};
  req.stop = params.stop;
  req.ignore_eos = params.ignore_eos;
  return state_->gen->Submit(std::move(req),
                             [cb = std::move(callback)](const llm::GenerationEvent& ev) {
                               GenerateEvent out;
                               out.text = ev.text;
                               out.new_tokens = static_cast<int64_t>(ev.tokens.size());
                               out.done = ev.done;
                               out.finish_reason = llm::FinishReasonName(ev.finish);
                               out.status = ev.status;
                               out.prompt_tokens = ev.prompt_tokens;
                               out.completion_tokens = ev.completion_tokens;
                               cb(out);
                             });
}

void LlmModel::Cancel(uint64_t id) { state_->gen->Cancel(id); }

LlmStats LlmModel::stats() const {
  const llm::GeneratorStats g = state_->gen->stats();
  return {.slots = g.slots,
          .active = g.active,
          .queued = g.queued,
          .steps = g.steps,
          .slot_steps = g.slot_steps,
          .prompt_tokens = g.prompt_tokens,
          .generated_tokens = g.generated_tokens,
          .finished = g.finished,
          .cancelled = g.cancelled,
          .failed = g.failed,
          .rejected = g.rejected};
}

}  // namespace kiln::api
