// Fuzz target: a training checkpoint generation as CheckpointStore reads it back: the manifest
// (server/core/checkpoint_manifest.cc) and the data file it names, a safetensors file of
// "model.*" / "optim.*" tensors and the job's metadata (engine/nn/state ParseSafetensors; the data is
// parsed here whether or not its SHA-256 matches, so the fuzzer reaches it).
// Input layout: the manifest text, a NUL byte, the data file. The generation's step (from the file
// name in the store) is the manifest's first "step" value, else 0.
// Oracles: a manifest that parses names this step's data file and a 64-digit lowercase SHA-256, and
// survives a format / parse round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "engine/nn/state/safetensors.h"
#include "server/core/checkpoint_manifest.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

int64_t StepOf(std::string_view manifest) {
  const size_t at = manifest.find("\nstep ");
  if (at == std::string_view::npos) return 0;
  std::string_view rest = manifest.substr(at + 6);
  rest = rest.substr(0, rest.find('\n'));
  int64_t step = 0;
  return absl::SimpleAtoi(absl::string_view(rest.data(), rest.size()), &step) ? step : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view manifest = input.substr(0, nul);
  const std::string_view file = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  const int64_t step = StepOf(manifest);
  absl::StatusOr<kiln::server::CheckpointManifest> m =
      kiln::server::ParseCheckpointManifest(manifest, step);
  if (m.ok()) {
    FUZZ_CHECK(m->step == step, "the manifest's step differs from the file name's");
    FUZZ_CHECK(m->file == kiln::server::CheckpointStem(step) + ".safetensors",
               "the manifest names another data file");
    FUZZ_CHECK(m->sha256.size() == 64, "the SHA-256 is not 64 digits");
    absl::StatusOr<kiln::server::CheckpointManifest> again =
        kiln::server::ParseCheckpointManifest(kiln::server::FormatCheckpointManifest(*m), step);
    FUZZ_CHECK(again.ok() && again->step == m->step && again->file == m->file &&
                   again->bytes == m->bytes && again->sha256 == m->sha256,
               "the manifest does not survive a format / parse round trip");
  }
  absl::StatusOr<kiln::nn::SafetensorsHeader> h = kiln::nn::ParseSafetensors(file);
  if (h.ok()) {
    for (const kiln::nn::SafetensorsEntry& e : h->entries) {
      FUZZ_CHECK(e.end <= file.size() - h->data_offset, "a tensor lies outside the data file");
    }
  }
  return 0;
}
