// Architecture::Build: the engine/nn module of a registry entry (architectures.h).
#include "engine/api/architectures.h"

#include <memory>

#include "engine/nn/models.h"

namespace kiln::api {

std::unique_ptr<nn::Module> Architecture::Build(const std::string& device,
                                                const std::vector<int64_t>& sizes) const {
  switch (kind) {
    case Kind::kMlp:
      return std::make_unique<nn::Mlp>(sizes, device);
    case Kind::kMnistCnn:
      return std::make_unique<nn::MnistCnn>(device);
  }
  return nullptr;
}

}  // namespace kiln::api
