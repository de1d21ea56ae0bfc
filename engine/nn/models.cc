#include "engine/nn/models.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/nn/state/safetensors.h"

namespace kiln::nn {

namespace {
Tensor Relu(const Tensor& x) { return x.Relu(); }
Tensor MaxPool2(const Tensor& x) { return x.MaxPool2d({2, 2}); }
Tensor Flatten1(const Tensor& x) { return x.Flatten(1); }

std::string ShapeText(const Shape& s) { return absl::StrCat("(", absl::StrJoin(s, ", "), ")"); }
}  // namespace

MnistCnn::MnistCnn(const std::string& device) {
  layers.Emplace<Conv2d>(1, 32, 5, ConvOptions{}, true, device);  // 0
  layers.Add(Relu);
  layers.Emplace<Conv2d>(32, 32, 5, ConvOptions{}, true, device);  // 2
  layers.Add(Relu);
  layers.Emplace<BatchNorm>(32, 1e-5, true, true, 0.1, device);  // 4
  layers.Add(MaxPool2);
  layers.Emplace<Conv2d>(32, 64, 3, ConvOptions{}, true, device);  // 6
  layers.Add(Relu);
  layers.Emplace<Conv2d>(64, 64, 3, ConvOptions{}, true, device);  // 8
  layers.Add(Relu);
  layers.Emplace<BatchNorm>(64, 1e-5, true, true, 0.1, device);  // 10
  layers.Add(MaxPool2);
  layers.Add(Flatten1);
  layers.Emplace<Linear>(576, 10, true, device);  // 13
}

Mlp::Mlp(const std::vector<int64_t>& sizes, const std::string& device) {
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (i > 0) layers.Add(Relu);
    layers.Emplace<Linear>(sizes[i], sizes[i + 1], true, device);
  }
}

Tensor Mlp::Forward(const Tensor& x) {
  if (layers.size() == 0) {
    return Tensor::FromStatus(absl::InvalidArgumentError("Mlp needs at least two layer sizes"));
  }
  return layers.Forward(x);
}

absl::Status LoadStateDict(Module& m, const std::map<std::string, Tensor>& state, bool strict) {
  std::vector<NamedTensor> targets = StateDict(m);
  std::vector<Tensor> values;
  values.reserve(targets.size());
  std::set<std::string> used;
  // validate everything before changing anything
  for (const NamedTensor& nt : targets) {
    auto it = state.find(nt.name);
    if (it == state.end())
      return absl::InvalidArgumentError(absl::StrCat("state dict lacks ", nt.name));
    const Tensor& v = it->second;
    KILN_RETURN_IF_ERROR(v.status());
    if (v.shape() != nt.tensor->shape()) {
      return absl::InvalidArgumentError(absl::StrCat(nt.name, ": shape ", ShapeText(v.shape()),
                                                     " != model's ",
                                                     ShapeText(nt.tensor->shape())));
    }
    if (v.dtype() != nt.tensor->dtype() && !(v.dtype().IsFloat() && nt.tensor->dtype().IsFloat())) {
      return absl::InvalidArgumentError(absl::StrCat(nt.name, ": dtype ", v.dtype().Name(),
                                                     " != model's ", nt.tensor->dtype().Name()));
    }
    values.push_back(v.Cast(nt.tensor->dtype()));
    used.insert(nt.name);
  }
  if (strict) {
    std::vector<std::string> extra;
    for (const auto& [name, t] : state) {
      if (!used.contains(name)) extra.push_back(name);
    }
    if (!extra.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("state dict has names the model lacks: ", absl::StrJoin(extra, ", ")));
    }
  }
  std::vector<Tensor*> to_realize;
  for (size_t i = 0; i < targets.size(); ++i) {
    Tensor* t = targets[i].tensor;
    if (t->IsRealized()) {
      t->Assign(values[i]);
    } else {
      *t = values[i].Contiguous();
    }
    KILN_RETURN_IF_ERROR(t->status());
    to_realize.push_back(t);
  }
  return Tensor::Realize(to_realize);
}

absl::Status LoadModel(Module& m, const std::string& path, bool strict) {
  KILN_ASSIGN_OR_RETURN(auto state, SafeLoad(path));
  return LoadStateDict(m, state, strict);
}

absl::Status SaveModel(Module& m, const std::string& path,
                       const std::map<std::string, std::string>& metadata) {
  std::map<std::string, Tensor> tensors;
  for (const NamedTensor& nt : StateDict(m)) tensors.emplace(nt.name, *nt.tensor);
  return SafeSave(tensors, path, metadata);
}

}  // namespace kiln::nn
