// Sampler (sampler.h).
#include "engine/llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace kiln::llm {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0 && temperature <= 100.0))
    return absl::InvalidArgumentError(
        absl::StrCat("temperature ", temperature, " is outside [0, 100]"));
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k ", top_k, " is negative"));
  if (!(top_p > 0.0 && top_p <= 1.0))
    return absl::InvalidArgumentError(absl::StrCat("top_p ", top_p, " is outside (0, 1]"));
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed.has_value() ? *params.seed : std::random_device{}()) {}

namespace {

int32_t Argmax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

// The kept ids (largest first, ties toward the lower id) and their unnormalised weights exp((l - max) / T).
void Kept(const SamplingParams& p, absl::Span<const float> logits, std::vector<int32_t>* order,
          std::vector<double>* weight) {
  const int64_t n = static_cast<int64_t>(logits.size());
  order->resize(n);
  std::iota(order->begin(), order->end(), 0);
  const auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, n) : n;
  if (k < n) {
    std::partial_sort(order->begin(), order->begin() + k, order->end(), before);
  } else {
    std::sort(order->begin(), order->end(), before);
  }
  order->resize(k);
  const double top = logits[(*order)[0]];
  weight->resize(k);
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    (*weight)[i] = std::exp((static_cast<double>(logits[(*order)[i]]) - top) / p.temperature);
    sum += (*weight)[i];
  }
  if (p.top_p < 1.0) {
    double cum = 0.0;
    int64_t keep = 0;
    while (keep < k) {
      cum += (*weight)[keep] / sum;
      ++keep;
      if (cum >= p.top_p) break;
    }
    order->resize(keep);
    weight->resize(keep);
  }
}

}  // namespace

int32_t Sampler::Sample(absl::Span<const float> logits) {
  if (logits.empty()) return -1;
  if (params_.temperature == 0.0) return Argmax(logits);
  std::vector<double> weight;
  Kept(params_, logits, &order_, &weight);
  const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double cum = 0.0;
  for (size_t i = 0; i < weight.size(); ++i) {
    cum += weight[i];
    if (u < cum) return order_[i];
  }
  return order_.back();
}

std::vector<double> Sampler::Distribution(absl::Span<const float> logits) const {
  std::vector<double> dist(logits.size(), 0.0);
  if (logits.empty()) return dist;
  if (params_.temperature == 0.0) {
    dist[Argmax(logits)] = 1.0;
    return dist;
  }
  std::vector<int32_t> order;
  std::vector<double> weight;
  Kept(params_, logits, &order, &weight);
  const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
  for (size_t i = 0; i < order.size(); ++i) dist[order[i]] = weight[i] / total;
  return dist;
}

}  // namespace kiln::llm
