// The builtin architecture table (architectures.h): data only, no engine dependency.
#include "engine/api/architectures.h"

#include "absl/strings/str_join.h"

namespace kiln::api {
namespace {

const std::vector<Architecture>& Table() {
  static const std::vector<Architecture>* table = [] {
    auto* t = new std::vector<Architecture>;
    Architecture mlp;
    mlp.kind = Architecture::Kind::kMlp;
    mlp.name = "mlp";
    mlp.description = "Linear+ReLU layers of sizes {in, hidden..., classes}, no ReLU after the last";
    mlp.sized = true;
    mlp.default_sizes = {784, 128, 10};
    mlp.pixel_divisor = 255.0f;
    t->push_back(std::move(mlp));
    Architecture cnn;
    cnn.kind = Architecture::Kind::kMnistCnn;
    cnn.name = "mnist_cnn";
    cnn.description = "tinygrad's beautiful_mnist CNN: float32 (1, 28, 28) images to 10 logits";
    cnn.sized = false;
    cnn.default_sizes = {784, 10};
    cnn.fixed_input_shape = {1, 28, 28};
    cnn.pixel_divisor = 1.0f;
    t->push_back(std::move(cnn));
    return t;
  }();
  return *table;
}

}  // namespace

std::vector<int64_t> Architecture::InputShape(const std::vector<int64_t>& sizes) const {
  if (!sized) return fixed_input_shape;
  return sizes.empty() ? std::vector<int64_t>{} : std::vector<int64_t>{sizes.front()};
}

int64_t Architecture::NumClasses(const std::vector<int64_t>& sizes) const {
  if (!sized) return default_sizes.back();
  return sizes.empty() ? 0 : sizes.back();
}

const Architecture* FindArchitecture(std::string_view name) {
  for (const Architecture& a : Table()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::vector<std::string> ArchitectureNames() {
  std::vector<std::string> out;
  for (const Architecture& a : Table()) out.push_back(a.name);
  return out;
}

std::string KnownArchitectures() { return absl::StrJoin(ArchitectureNames(), ", "); }

}  // namespace kiln::api
