// kiln::api architecture registry: the one table of the builtin architectures (kiln_builtin
// models, training jobs). Every layer that names an architecture (Engine::LoadBuiltin, the
// Trainer, server/core's config checks and job validation) asks here; no other file spells a name.
//
//   FindArchitecture     name -> entry (nullptr if unknown).
//   ArchitectureNames    every name, in registry order.
//   KnownArchitectures   the names joined by ", ": what "unknown architecture" messages list.
//
// An entry's Build makes the engine/nn module; only engine/api .cc files call it (nn::Module is
// forward-declared: no engine/nn type reaches server code through this header). The table itself
// (architectures.cc) is data only and links without the engine (the fuzz targets check configs
// with it); Build is in architectures_build.cc, dispatching on the entry's `kind`.
// Thread safety: the table is immutable after static initialization.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::nn {
class Module;
}  // namespace kiln::nn

namespace kiln::api {

struct Architecture {
  enum class Kind { kMlp, kMnistCnn };  // which engine/nn module Build makes
  Kind kind = Kind::kMlp;
  std::string name;
  std::string description;
  // True when the layer sizes {in, hidden..., classes} are chosen per model (a job's mlp_sizes,
  // or read from the weights); false for a fixed shape.
  bool sized = false;
  // Fixed architectures: their sizes. Sized ones: the default when a job gives none; its first
  // entry is replaced by the dataset's pixels per item.
  std::vector<int64_t> default_sizes;
  // One item's input shape for fixed architectures (batch excluded); sized: {sizes.front()}.
  std::vector<int64_t> fixed_input_shape;
  // What a uint8 pixel is divided by before it enters the model in training (the CNN takes raw
  // 0-255 pixels, as tinygrad's beautiful_mnist does: its BatchNorms normalize).
  float pixel_divisor = 255.0f;
  // The module for `sizes` (ignored by fixed architectures) on `device`, uninitialized weights
  // realized lazily. Callers validate `sizes` first.
  std::unique_ptr<nn::Module> Build(const std::string& device,
                                    const std::vector<int64_t>& sizes) const;

  // One item's input shape and the class count for `sizes` (fixed: the fixed ones).
  std::vector<int64_t> InputShape(const std::vector<int64_t>& sizes) const;
  int64_t NumClasses(const std::vector<int64_t>& sizes) const;
};

const Architecture* FindArchitecture(std::string_view name);
std::vector<std::string> ArchitectureNames();
std::string KnownArchitectures();

}  // namespace kiln::api
