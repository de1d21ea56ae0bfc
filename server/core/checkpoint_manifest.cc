#include "server/core/checkpoint_manifest.h"

#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kiln::server {
namespace {

constexpr char kManifestHeader[] = "kiln-checkpoint 1";

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string CheckpointStem(int64_t step) { return absl::StrFormat("ckpt-%010d", step); }

std::string FormatCheckpointManifest(const CheckpointManifest& m) {
  return absl::StrCat(kManifestHeader, "\nstep ", m.step, "\nfile ", m.file, "\nbytes ", m.bytes,
                      "\nsha256 ", m.sha256, "\n");
}

absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(std::string_view text, int64_t step) {
  const size_t eol = text.find('\n');
  if (text.substr(0, eol) != kManifestHeader) {
    return absl::DataLossError(absl::StrCat("checkpoint ", step, ": manifest header is wrong"));
  }
  std::map<std::string, std::string, std::less<>> kv;
  if (eol != std::string_view::npos) {
    const std::string_view rest = text.substr(eol + 1);
    std::vector<absl::string_view> words =
        absl::StrSplit(absl::string_view(rest.data(), rest.size()), absl::ByAnyChar(" \t\n\v\f\r"),
                       absl::SkipEmpty());
    for (size_t i = 0; i + 1 < words.size(); i += 2)
      kv[std::string(words[i])] = std::string(words[i + 1]);
  }
  CheckpointManifest m;
  if (!absl::SimpleAtoi(kv["step"], &m.step) || m.step != step ||
      !absl::SimpleAtoi(kv["bytes"], &m.bytes) || kv["sha256"].size() != 64 ||
      !IsLowerHex(kv["sha256"]) || kv["file"] != CheckpointStem(step) + ".safetensors") {
    return absl::DataLossError(absl::StrCat("checkpoint ", step, ": manifest is incomplete"));
  }
  m.file = kv["file"];
  m.sha256 = kv["sha256"];
  return m;
}

}  // namespace kiln::server
