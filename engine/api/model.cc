// api::Model adapters over the engine's model kinds (model.h).
#include "engine/api/model.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::api {
namespace {

class GraphModel final : public Model {
 public:
  GraphModel(Engine& engine, std::shared_ptr<const PreparedGraph> graph) : engine_(engine), graph_(std::move(graph)) {}
  std::string_view kind() const override { return "kiln_graph"; }
  uint64_t device_bytes() const override { return 0; }

  absl::StatusOr<RunResult> Run(absl::Span<const NamedHostTensorView> inputs, const RunOptions& options) override {
    const GraphSpec& spec = graph_->spec();
    std::vector<HostTensorView> views(spec.inputs.size());
    std::vector<bool> bound(spec.inputs.size(), false);
    for (size_t i = 0; i < inputs.size(); ++i) {
      size_t g = 0;
      while (g < spec.inputs.size() && spec.inputs[g].name != inputs[i].name) ++g;
      if (g == spec.inputs.size() || bound[g]) {
        return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "]: ", inputs[i].name.substr(0, 256),
                                                       bound.size() > g ? " is given twice"
                                                                        : " is not an input of the model's graph"));
      }
      views[g] = inputs[i].view;
      bound[g] = true;
    }
    for (size_t g = 0; g < bound.size(); ++g) {
      if (!bound[g]) {
        return absl::InvalidArgumentError(
            absl::StrCat("inputs: missing ", spec.inputs[g].name, " (an input of the graph)"));
      }
    }
    return engine_.Run(*graph_, views, options);
  }

 private:
  Engine& engine_;
  std::shared_ptr<const PreparedGraph> graph_;
};

class BuiltinAdapter final : public Model {
 public:
  BuiltinAdapter(Engine& engine, std::shared_ptr<const BuiltinModel> model, ModelIo io)
      : engine_(engine), model_(std::move(model)), io_(std::move(io)) {}
  std::string_view kind() const override { return "kiln_builtin"; }
  uint64_t device_bytes() const override { return model_->device_bytes(); }

  absl::StatusOr<RunResult> Run(absl::Span<const NamedHostTensorView> inputs, const RunOptions& options) override {
    if (inputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("inputs: the ", model_->architecture(),
                                                     " architecture takes exactly one input, got ", inputs.size()));
    }
    absl::StatusOr<RunResult> run = engine_.RunBuiltin(*model_, inputs[0].view, options);
    if (!run.ok()) return run.status();
    if (run->outputs.size() != 1) {
      return absl::InternalError(absl::StrCat("the ", model_->architecture(), " architecture returned ",
                                              run->outputs.size(), " outputs, not 1"));
    }
    run->outputs[0].name = io_.output_name;
    return run;
  }

 private:
  Engine& engine_;
  std::shared_ptr<const BuiltinModel> model_;
  ModelIo io_;
};

class OnnxAdapter final : public Model {
 public:
  OnnxAdapter(Engine& engine, std::shared_ptr<const OnnxModel> model) : engine_(engine), model_(std::move(model)) {}
  std::string_view kind() const override { return "onnx"; }
  uint64_t device_bytes() const override { return model_->device_bytes(); }
  absl::StatusOr<RunResult> Run(absl::Span<const NamedHostTensorView> inputs, const RunOptions& options) override {
    return engine_.RunOnnx(*model_, inputs, options);
  }

 private:
  Engine& engine_;
  std::shared_ptr<const OnnxModel> model_;
};

}  // namespace

std::shared_ptr<Model> OpenGraphModel(Engine& engine, std::shared_ptr<const PreparedGraph> graph) {
  if (graph == nullptr) return nullptr;
  return std::make_shared<GraphModel>(engine, std::move(graph));
}

std::shared_ptr<Model> OpenBuiltinModel(Engine& engine, std::shared_ptr<const BuiltinModel> model, ModelIo io) {
  if (model == nullptr) return nullptr;
  return std::make_shared<BuiltinAdapter>(engine, std::move(model), std::move(io));
}

std::shared_ptr<Model> OpenOnnxModel(Engine& engine, std::shared_ptr<const OnnxModel> model) {
  if (model == nullptr) return nullptr;
  return std::make_shared<OnnxAdapter>(engine, std::move(model));
}

}  // namespace kiln::api
