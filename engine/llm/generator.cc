// Generator (generator.h).
#include "engine/llm/generator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace kiln::llm {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "";
}

struct Generator::Seq {
  uint64_t id = 0;
  GenerationRequest req;
  GenerationCallback callback;
  Sampler sampler;
  int64_t slot = -1;
  size_t prompt_fed = 0;   // prompt tokens stepped
  int32_t last = -1;       // the token sampled last (stepped next)
  int64_t completion = 0;  // tokens sampled
  std::string text;  // whole characters of the output so far (stop strings included, until found)
  std::string partial;  // bytes of a character not yet complete
  size_t emitted = 0;   // bytes of `text` reported
  bool done = false;

  Seq(uint64_t id, GenerationRequest r, GenerationCallback cb)
      : id(id), req(std::move(r)), callback(std::move(cb)), sampler(req.sampling) {}
};

namespace {

constexpr size_t kMaxStops = 16;
constexpr size_t kMinPrefill = 8;  // prompt tokens left (besides the last) below which decode steps read them
constexpr size_t kMaxStopBytes = 256;

// Bytes at the end of `s` that begin a UTF-8 sequence not yet complete (0 when `s` ends on a whole character).
size_t IncompleteTail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? back : 0;
  }
  return 0;
}

// Replaces every byte that is not part of a well-formed UTF-8 sequence by U+FFFD (the output is JSON-safe text).
std::string ValidUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80             ? 1
                 : (c & 0xE0) == 0xC0 ? 2
                 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4
                                      : 0;
    bool ok = len > 0 && i + len <= s.size() && !(len == 2 && c < 0xC2);
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len == 3) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && len == 4) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

Generator::Generator(const LlamaModel* model, const BpeTokenizer* tokenizer,
                     const GeneratorOptions& options)
    : model_(model), tok_(tokenizer), options_(options) {}

absl::StatusOr<std::unique_ptr<Generator>> Generator::Create(const LlamaModel* model,
                                                             const BpeTokenizer* tokenizer,
                                                             const GeneratorOptions& options) {
  if (options.max_queue < 0) return absl::InvalidArgumentError("generator: max_queue is negative");
  std::unique_ptr<Generator> g(new Generator(model, tokenizer, options));
  g->context_ = options.context != nullptr ? options.context : &CurrentRealizeContext();
  ScopedRealizeContext scope(*g->context_);
  KILN_ASSIGN_OR_RETURN(g->cache_, model->NewCache(options.max_ctx, options.slots));
  if (options.warm) KILN_RETURN_IF_ERROR(model->WarmUp(*g->cache_));
  g->stats_.slots = options.slots;
  g->stats_.max_ctx = options.max_ctx;
  g->thread_ = std::thread([raw = g.get()] { raw->Loop(); });
  return g;
}

Generator::~Generator() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<uint64_t> Generator::Submit(GenerationRequest request, GenerationCallback callback) {
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) return absl::InvalidArgumentError("prompt: empty (at least one token)");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= tok_->vocab_size())
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt: token id ", t, " is outside the vocabulary of ", tok_->vocab_size()));
  if (n >= options_.max_ctx)
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: ", n, " tokens leave no room in a context of ", options_.max_ctx,
                     " tokens (at most ", options_.max_ctx - 1, ")"));
  if (request.max_tokens < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: ", request.max_tokens, " is below 1"));
  if (absl::Status s = request.sampling.Validate(); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("sampling: ", s.message()));
  if (request.stop.size() > kMaxStops)
    return absl::InvalidArgumentError(
        absl::StrCat("stop: ", request.stop.size(), " strings (at most ", kMaxStops, ")"));
  for (const std::string& s : request.stop)
    if (s.empty() || s.size() > kMaxStopBytes)
      return absl::InvalidArgumentError(
          absl::StrCat("stop: a string of ", s.size(), " bytes (1..", kMaxStopBytes, ")"));
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return absl::UnavailableError("generator: stopping");
    if (static_cast<int64_t>(waiting_.size()) >= options_.max_queue) {
      ++stats_.rejected;
      return absl::ResourceExhaustedError(absl::StrCat(
          "generation queue: ", waiting_.size(),
          " generations already wait for a slot (the limit is ", options_.max_queue, ")"));
    }
    id = next_id_++;
    waiting_.push_back(std::make_unique<Seq>(id, std::move(request), std::move(callback)));
  }
  cv_.notify_all();
  return id;
}

void Generator::Cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    cancel_.push_back(id);
  }
  cv_.notify_all();
}

GeneratorStats Generator::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  GeneratorStats s = stats_;
  s.active = static_cast<int64_t>(active_.size());
  s.queued = static_cast<int64_t>(waiting_.size());
  s.captures = cache_->captures();
  return s;
}

void Generator::Finish(Seq& s, FinishReason why, GenerationEvent* ev) const {
  // What is left is reported: the held-back text (no stop string came) and a dangling partial character.
  s.text += ValidUtf8(s.partial);
  s.partial.clear();
  if (s.emitted < s.text.size()) ev->text += s.text.substr(s.emitted);
  s.emitted = s.text.size();
  s.done = true;
  ev->done = true;
  ev->finish = why;
}

void Generator::Accept(Seq& s, int32_t t, GenerationEvent* ev) const {
  ev->tokens.push_back(t);
  ++s.completion;
  s.last = t;
  if (t == tok_->eos_id() && !s.req.ignore_eos) {
    // Text held back for a stop string that never came is output; the end token itself is not.
    Finish(s, FinishReason::kStop, ev);
    return;
  }
  if (!tok_->is_special(t)) {
    absl::StatusOr<std::string> bytes = tok_->Decode({t});
    if (bytes.ok()) s.partial += *bytes;
    const size_t tail = IncompleteTail(s.partial);
    s.text += ValidUtf8(s.partial.substr(0, s.partial.size() - tail));
    s.partial.erase(0, s.partial.size() - tail);
  }
  // The earliest stop string ends the output before it.
  size_t cut = std::string::npos;
  size_t longest = 0;
  for (const std::string& stop : s.req.stop) {
    longest = std::max(longest, stop.size());
    const size_t from = s.emitted >= stop.size() ? s.emitted - stop.size() + 1 : 0;
    const size_t at = s.text.find(stop, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    s.text.resize(std::max(cut, s.emitted));
    s.partial.clear();
    Finish(s, FinishReason::kStop, ev);
    return;
  }
  // Hold back the longest tail of the text that begins some stop string.
  size_t hold = 0;
  for (const std::string& stop : s.req.stop) {
    for (size_t k = std::min(stop.size() - 1, s.text.size() - s.emitted); k > hold; --k) {
      if (s.text.compare(s.text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  const size_t ready = s.text.size() - hold;
  if (ready > s.emitted) {
    ev->text += s.text.substr(s.emitted, ready - s.emitted);
    s.emitted = ready;
  }
  if (s.completion >= s.req.max_tokens ||
      static_cast<int64_t>(s.req.prompt.size()) + s.completion >= options_.max_ctx) {
    Finish(s, FinishReason::kLength, ev);
  }
}

void Generator::Loop() {
  ScopedRealizeContext scope(*context_);
  const int64_t vocab = tok_->vocab_size();
  for (;;) {
    std::vector<std::pair<std::unique_ptr<Seq>, GenerationEvent>> ended;
    std::vector<SlotToken> step;
    std::vector<std::pair<int64_t, Seq*>> prefill;  // slots with more than their prompt's last token to read
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l,
               [&] { return stop_ || !waiting_.empty() || !active_.empty() || !cancel_.empty(); });
      auto end_now = [&](std::unique_ptr<Seq> s, FinishReason why) {
        GenerationEvent ev;
        Finish(*s, why, &ev);
        ev.prompt_tokens = static_cast<int64_t>(s->req.prompt.size());
        ev.completion_tokens = s->completion;
        ++stats_.cancelled;
        ended.emplace_back(std::move(s), std::move(ev));
      };
      if (stop_) {
        for (auto& [slot, s] : active_) end_now(std::move(s), FinishReason::kCancelled);
        for (auto& s : waiting_) end_now(std::move(s), FinishReason::kCancelled);
        active_.clear();
        waiting_.clear();
        l.unlock();
        for (auto& [s, ev] : ended) s->callback(ev);
        return;
      }
      for (uint64_t id : cancel_) {
        for (auto it = active_.begin(); it != active_.end(); ++it) {
          if (it->second->id == id) {
            end_now(std::move(it->second), FinishReason::kCancelled);
            active_.erase(it);
            break;
          }
        }
        for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
          if ((*it)->id == id) {
            end_now(std::move(*it), FinishReason::kCancelled);
            waiting_.erase(it);
            break;
          }
        }
      }
      cancel_.clear();
      for (int64_t slot = 0; slot < options_.slots && !waiting_.empty(); ++slot) {
        if (active_.count(slot) != 0) continue;
        std::unique_ptr<Seq> s = std::move(waiting_.front());
        waiting_.pop_front();
        s->slot = slot;
        cache_->Reset(slot);
        active_[slot] = std::move(s);
      }
      for (auto& [slot, s] : active_) {
        // A few tokens go through decode steps instead: a prefill run costs a whole chunk whatever its fill (a
        // 4-token prompt's first token: about 0.6 s through a chunk, 0.2 s through steps, 4 slots, 2 cores).
        if (s->prompt_fed + kMinPrefill < s->req.prompt.size()) {
          prefill.emplace_back(slot, s.get());
          continue;
        }
        const bool reading = s->prompt_fed < s->req.prompt.size();
        step.push_back({slot, reading ? s->req.prompt[s->prompt_fed] : s->last});
      }
    }
    for (auto& [s, ev] : ended) s->callback(ev);
    // Chunked prefill: one chunk of each reading slot's prompt (all but its last token, which the decode step reads
    // and samples after) per round, between decode steps, so a long prompt delays the other streams by a chunk's
    // time per token rather than stalling them for the whole prompt. Only this thread touches active_'s entries.
    std::vector<std::pair<Seq*, GenerationEvent>> failed;
    for (auto& [slot, s] : prefill) {
      const size_t fed = s->prompt_fed;
      const size_t n = std::min<size_t>(KvCache::kPrefillChunk, s->req.prompt.size() - 1 - fed);
      const absl::Status st = model_->Prefill(
          *cache_, slot, std::vector<int32_t>(s->req.prompt.begin() + fed, s->req.prompt.begin() + fed + n));
      std::lock_guard<std::mutex> l(mu_);
      if (st.ok()) {
        s->prompt_fed += n;
        stats_.prompt_tokens += static_cast<int64_t>(n);
        continue;
      }
      GenerationEvent ev;
      ev.done = true;
      ev.finish = FinishReason::kError;
      ev.status = st;
      ev.prompt_tokens = static_cast<int64_t>(s->req.prompt.size());
      s->done = true;
      ++stats_.failed;
      failed.emplace_back(s, std::move(ev));
    }
    if (!failed.empty()) {
      std::vector<std::unique_ptr<Seq>> gone;
      {
        std::lock_guard<std::mutex> l(mu_);
        for (auto& [seq, ev] : failed) {
          auto it = active_.find(seq->slot);
          gone.push_back(std::move(it->second));
          active_.erase(it);
        }
      }
      for (auto& [seq, ev] : failed) seq->callback(ev);
    }
    if (step.empty()) continue;

    absl::StatusOr<std::vector<float>> logits = [&]() -> absl::StatusOr<std::vector<float>> {
      KILN_ASSIGN_OR_RETURN(Tensor t, model_->StepBatch(*cache_, step));
      return t.ToVector<float>();
    }();

    std::vector<std::pair<Seq*, GenerationEvent>> events;
    std::vector<std::unique_ptr<Seq>> finished;
    {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.steps;
      stats_.slot_steps += step.size();
      for (const SlotToken& st : step) {
        Seq& s = *active_.at(st.slot);
        GenerationEvent ev;
        if (!logits.ok()) {
          ev.done = true;
          ev.finish = FinishReason::kError;
          ev.status = logits.status();
          s.done = true;
          ++stats_.failed;
        } else {
          const bool prefill = s.prompt_fed < s.req.prompt.size();
          if (prefill) {
            ++s.prompt_fed;
            ++stats_.prompt_tokens;
            if (s.prompt_fed < s.req.prompt.size())
              continue;  // the prompt is not read yet: nothing to sample
          }
          const int32_t next = s.sampler.Sample(
              absl::MakeConstSpan(logits->data() + st.slot * vocab, static_cast<size_t>(vocab)));
          ++stats_.generated_tokens;
          Accept(s, next, &ev);
          if (ev.done) ++stats_.finished;
        }
        ev.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
        ev.completion_tokens = s.completion;
        events.emplace_back(&s, std::move(ev));
      }
      for (auto it = active_.begin(); it != active_.end();) {
        if (it->second->done) {
          finished.push_back(std::move(it->second));
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& [s, ev] : events) s->callback(ev);
  }
}

}  // namespace kiln::llm
