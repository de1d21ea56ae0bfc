// The manifest of one checkpoint generation (checkpoint_store.h): text that names the data file of
// the generation and its size and SHA-256, so a reader trusts only data that is complete on disk.
//
//   kiln-checkpoint 1                       the format line, exactly
//   step 42                                 then whitespace-separated "key value" pairs, one per
//   file ckpt-0000000042.safetensors        line as written; a reader accepts any whitespace,
//   bytes 123456                            ignores unknown keys and keeps the last of repeated ones
//   sha256 <64 hex digits>
//
// Pure functions; thread-safe. Parsing never trusts the text: the step must equal the one the
// file name gave, the file must be this step's data file, the SHA-256 64 lowercase hex digits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kiln::server {

struct CheckpointManifest {
  int64_t step = 0;
  std::string file;  // the data file's name in the checkpoint folder, no path
  uint64_t bytes = 0;
  std::string sha256;  // lowercase hex
};

// "ckpt-0000000042": the stem of a generation's files (".safetensors", ".manifest").
std::string CheckpointStem(int64_t step);

std::string FormatCheckpointManifest(const CheckpointManifest& manifest);

// DATA_LOSS "checkpoint <step>: manifest header is wrong" / "manifest is incomplete" when the text
// is not a manifest of generation `step`.
absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(std::string_view text, int64_t step);

}  // namespace kiln::server
