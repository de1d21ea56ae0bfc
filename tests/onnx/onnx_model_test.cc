// engine/onnx loader and runner: bad models are clear load errors (never a crash), good ones run and match values
// computed here by hand. Models are built with the ONNX protobuf classes (compiled from the onnx 1.22.0 wheel).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/register_all.h"
#include "engine/base/status.h"
#include "engine/onnx/model.h"
#include "engine/onnx/runner.h"
#include "engine/schedule/schedule.h"
#include "gtest/gtest.h"
#include "onnx/onnx-ml.pb.h"

namespace kiln::onnx {
namespace {

namespace fs = std::filesystem;

::onnx::ModelProto Base(int64_t ir = 8, int64_t opset = 17) {
  ::onnx::ModelProto m;
  m.set_ir_version(ir);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  return m;
}

void AddIo(::onnx::ValueInfoProto* vi, const std::string& name, int elem, std::vector<int64_t> dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    if (d < 0) shape->add_dim()->set_dim_param("N");
    else shape->add_dim()->set_dim_value(d);
  }
}

::onnx::NodeProto* AddNode(::onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                           std::vector<std::string> out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(absl::StrCat(op, "_", g->node_size()));
  for (auto& s : in) n->add_input(s);
  for (auto& s : out) n->add_output(s);
  return n;
}

// y = Relu(x + w) with a float initializer w of shape (3,).
::onnx::ModelProto AddRelu() {
  ::onnx::ModelProto m = Base();
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "x", 1, {-1, 3});
  AddIo(g->add_output(), "y", 1, {-1, 3});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  w->add_dims(3);
  for (float v : {1.0f, -2.0f, 0.5f}) w->add_float_data(v);
  AddNode(g, "Add", {"x", "w"}, {"s"});
  AddNode(g, "Relu", {"s"}, {"y"});
  return m;
}

absl::StatusOr<std::shared_ptr<const Model>> Load(const ::onnx::ModelProto& m, const std::string& dir = "") {
  return LoadModelFromBytes(m.SerializeAsString(), dir);
}

// A float32 tensor input holding `values` (host data, as kilnd hands a request's tensor to the runner).
Value FloatInput(const std::vector<double>& values, const Shape& shape) {
  Value v;
  v.kind = Value::Kind::kTensor;
  v.host = std::make_shared<const HostArray>(HostArray::FromDoubles(dtypes::kFloat32, shape, values));
  return v;
}

void ExpectLoadError(const ::onnx::ModelProto& m, const std::string& words, const std::string& dir = "") {
  auto r = Load(m, dir);
  ASSERT_FALSE(r.ok()) << "loaded but should fail with: " << words;
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find(words), std::string::npos) << r.status();
}

class OnnxModelTest : public ::testing::Test {
 protected:
  void SetUp() override { backends::RegisterAllBackends(); }
};

TEST_F(OnnxModelTest, RunsAGraphWithAnInitializerAndASymbolicDim) {
  auto model = Load(AddRelu());
  ASSERT_TRUE(model.ok()) << model.status();
  for (int64_t n : {1, 2}) {  // the dim_param N binds to each input's size
    HostArray x = HostArray::FromDoubles(dtypes::kFloat32, {n, 3}, {-1, 1, 1, 2, 3, -4});
    Value v;
    v.kind = Value::Kind::kTensor;
    v.host = std::make_shared<const HostArray>(x);
    auto r = kiln::onnx::Run(**model, {{"x", v}}, RunOptions{});
    ASSERT_TRUE(r.ok()) << r.status();
    auto out = ValueToHost(r->outputs[0]);
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<double> want = {0, 0, 1.5, 3, 1, 0};
    ASSERT_EQ((*out)->numel(), 3 * n);
    for (int64_t i = 0; i < 3 * n; ++i) EXPECT_EQ((*out)->GetDouble(i), want[i]) << i;
  }
}

TEST_F(OnnxModelTest, InputChecksNameTheInput) {
  auto model = Load(AddRelu());
  ASSERT_TRUE(model.ok());
  Value v;
  v.kind = Value::Kind::kTensor;
  v.host = std::make_shared<const HostArray>(HostArray::Zeros(dtypes::kFloat32, {2, 4}));
  auto r = kiln::onnx::Run(**model, {{"x", v}}, RunOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("input 'x': dim 1 is 4, the model declares 3"), std::string::npos)
      << r.status();
  auto missing = kiln::onnx::Run(**model, {}, RunOptions{});
  EXPECT_NE(std::string(missing.status().message()).find("input 'x' is missing"), std::string::npos);
}

TEST_F(OnnxModelTest, TruncatedFileIsALoadError) {
  const std::string bytes = AddRelu().SerializeAsString();
  for (size_t cut : {size_t{1}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    auto r = LoadModelFromBytes(bytes.substr(0, cut), "");
    EXPECT_FALSE(r.ok()) << "cut at " << cut;
  }
  auto r = LoadModelFromBytes(std::string("\xff\xff\xff\xff\x0f garbage", 14), "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("not a valid ONNX model"), std::string::npos) << r.status();
}

TEST_F(OnnxModelTest, IrVersion99IsALoadError) {
  ::onnx::ModelProto m = AddRelu();
  m.set_ir_version(99);
  ExpectLoadError(m, "IR version 99 is not supported");
}

TEST_F(OnnxModelTest, OpsetBeyond27IsALoadError) {
  ::onnx::ModelProto m = AddRelu();
  m.mutable_opset_import(0)->set_version(28);
  ExpectLoadError(m, "opset 28 of domain 'ai.onnx' is not supported");
}

TEST_F(OnnxModelTest, UnknownOpNamesNodeOpAndOpset) {
  ::onnx::ModelProto m = AddRelu();
  m.mutable_graph()->mutable_node(1)->set_op_type("FancyNewOp");
  ExpectLoadError(m, "node 'Relu_2' (FancyNewOp, opset 17): operator FancyNewOp of domain ai.onnx is not supported");
}

TEST_F(OnnxModelTest, UnsupportedAttributeIsALoadError) {
  ::onnx::ModelProto m = AddRelu();
  auto* a = m.mutable_graph()->mutable_node(1)->add_attribute();
  a->set_name("mystery");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(1);
  ExpectLoadError(m, "attribute 'mystery' is not supported");
}

TEST_F(OnnxModelTest, CyclicGraphIsALoadError) {
  ::onnx::ModelProto m = Base();
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "x", 1, {3});
  AddIo(g->add_output(), "y", 1, {3});
  AddNode(g, "Add", {"x", "b"}, {"a"});
  AddNode(g, "Relu", {"a"}, {"b"});
  AddNode(g, "Neg", {"b"}, {"y"});
  ExpectLoadError(m, "the graph has a cycle");
}

TEST_F(OnnxModelTest, UnsupportedDtypeIsALoadError) {
  ::onnx::ModelProto m = AddRelu();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(8);  // STRING
  ExpectLoadError(m, "graph input 'x': dtype STRING is not supported by kiln");
}

TEST_F(OnnxModelTest, HugeDimIsALoadError) {
  ::onnx::ModelProto m = AddRelu();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_dims();
  w->add_dims(int64_t{1} << 40);
  ExpectLoadError(m, "has more than");
  ::onnx::ModelProto m2 = AddRelu();
  auto* dim = m2.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1);
  dim->set_dim_value(int64_t{1} << 40);
  ExpectLoadError(m2, "has more than");
}

TEST_F(OnnxModelTest, ShortInitializerIsALoadError) {
  ::onnx::ModelProto m = AddRelu();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_raw_data(std::string(8, '\0'));  // 2 floats for a shape of 3
  ExpectLoadError(m, "initializer 'w': holds 8 bytes but its shape (3,) of float needs 12");
}

TEST_F(OnnxModelTest, ExternalDataIsConfinedToTheModelFolder) {
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("kiln_onnx_ext_", getpid());
  fs::create_directories(dir / "model");
  {
    std::ofstream(dir / "model" / "w.bin", std::ios::binary).write("\0\0\x80\x3f\0\0\0\x40\0\0\x40\x40", 12);
    std::ofstream(dir / "secret.bin", std::ios::binary).write("\0\0\x80\x3f\0\0\0\x40\0\0\x40\x40", 12);
  }
  auto with_location = [](const std::string& loc) {
    ::onnx::ModelProto m = AddRelu();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_float_data();
    w->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto* kv = w->add_external_data();
    kv->set_key("location");
    kv->set_value(loc);
    return m;
  };
  const std::string model_dir = (dir / "model").string();
  auto ok = Load(with_location("w.bin"), model_dir);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->graph->initializers.at("w")->GetDouble(2), 3.0);
  ExpectLoadError(with_location("../secret.bin"), "must not leave the model's folder", model_dir);
  ExpectLoadError(with_location((dir / "secret.bin").string()), "not an absolute path", model_dir);
  fs::create_symlink(dir / "secret.bin", dir / "model" / "link.bin");
  ExpectLoadError(with_location("link.bin"), "resolves outside the model's folder", model_dir);
  ExpectLoadError(with_location("missing.bin"), "does not exist", model_dir);
  fs::remove_all(dir);
}

TEST_F(OnnxModelTest, InspectModeListsMissingOps) {
  ::onnx::ModelProto m = AddRelu();
  m.mutable_graph()->mutable_node(1)->set_op_type("FancyNewOp");
  LoadOptions lenient;
  lenient.require_supported_ops = false;
  auto model = LoadModelFromBytes(m.SerializeAsString(), "", lenient);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<std::string> missing = UnsupportedOps(**model);
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0], "FancyNewOp (ai.onnx, opset 17): not implemented");
}

TEST_F(OnnxModelTest, ValueInputsAreReported) {
  // Reshape(x, shape) with `shape` a graph input: the graph depends on its values.
  ::onnx::ModelProto m = Base(8, 14);
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "x", 1, {6});
  AddIo(g->add_input(), "shape", 7, {2});
  AddIo(g->add_output(), "y", 1, {-1, -1});
  AddNode(g, "Reshape", {"x", "shape"}, {"y"});
  auto model = Load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  Value x, s;
  x.kind = s.kind = Value::Kind::kTensor;
  x.host = std::make_shared<const HostArray>(HostArray::FromDoubles(dtypes::kFloat32, {6}, {0, 1, 2, 3, 4, 5}));
  s.host = std::make_shared<const HostArray>(HostArray::FromInts(dtypes::kInt64, {2}, {3, 2}));
  auto r = kiln::onnx::Run(**model, {{"x", x}, {"shape", s}}, RunOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->value_inputs, std::vector<int>{1});
  EXPECT_EQ(r->outputs[0].shape(), Shape({3, 2}));
}

// y = Pad(x, pads) in `mode` over x of shape (2, 3), pads on the last axis only.
absl::StatusOr<std::vector<double>> PadLastAxis(const std::string& mode, int64_t before, int64_t after) {
  ::onnx::ModelProto m = Base(8, 18);
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "x", 1, {2, 3});
  AddIo(g->add_output(), "y", 1, {2, -1});
  auto* p = g->add_initializer();
  p->set_name("pads");
  p->set_data_type(7);
  p->add_dims(4);
  for (int64_t v : {int64_t{0}, before, int64_t{0}, after}) p->add_int64_data(v);
  auto* a = AddNode(g, "Pad", {"x", "pads"}, {"y"})->add_attribute();
  a->set_name("mode");
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(mode);
  auto model = Load(m);
  if (!model.ok()) return model.status();
  Value x;
  x.kind = Value::Kind::kTensor;
  x.host = std::make_shared<const HostArray>(HostArray::FromDoubles(dtypes::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}));
  KILN_ASSIGN_OR_RETURN(RunResult r, kiln::onnx::Run(**model, {{"x", x}}, RunOptions{}));
  KILN_ASSIGN_OR_RETURN(HostArrayPtr out, ValueToHost(r.outputs[0]));
  std::vector<double> v;
  for (int64_t i = 0; i < out->numel(); ++i) v.push_back(out->GetDouble(i));
  return v;
}

// y = OP(x) over x of shape (n,), opset 18.
absl::StatusOr<std::vector<double>> Unary(const std::string& op, const std::vector<double>& xs) {
  ::onnx::ModelProto m = Base(8, 18);
  auto* g = m.mutable_graph();
  const int64_t n = static_cast<int64_t>(xs.size());
  AddIo(g->add_input(), "x", 1, {n});
  AddIo(g->add_output(), "y", 1, {n});
  AddNode(g, op, {"x"}, {"y"});
  auto model = Load(m);
  if (!model.ok()) return model.status();
  KILN_ASSIGN_OR_RETURN(RunResult r, kiln::onnx::Run(**model, {{"x", FloatInput(xs, {n})}}, RunOptions{}));
  KILN_ASSIGN_OR_RETURN(HostArrayPtr out, ValueToHost(r.outputs[0]));
  std::vector<double> v;
  for (int64_t i = 0; i < out->numel(); ++i) v.push_back(out->GetDouble(i));
  return v;
}

TEST_F(OnnxModelTest, SoftplusAndMishSaturateWithoutOverflow) {
  // log(1 + e^x) in double (log1p): e^x overflows float32 above x = 88.7, where Softplus(x) = x (kiln returned inf).
  const std::vector<double> xs = {-200, -90, -20, -1, 0, 0.5, 20, 88, 89, 100, 1000};
  auto sp = Unary("Softplus", xs);
  auto mish = Unary("Mish", xs);
  ASSERT_TRUE(sp.ok()) << sp.status();
  ASSERT_TRUE(mish.ok()) << mish.status();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double want = x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    EXPECT_NEAR((*sp)[i], want, 1e-6 * std::abs(want) + 1e-7) << "Softplus(" << x << ")";
    EXPECT_NEAR((*mish)[i], x * std::tanh(want), 1e-6 * std::abs(x) + 1e-7) << "Mish(" << x << ")";
  }
}

TEST_F(OnnxModelTest, PadsWiderThanTheAxisMatchNumpy) {
  // np.pad([[1, 2, 3], [4, 5, 6]], ((0, 0), (7, 5)), mode=...): pads longer than the axis wrap around
  // the period more than once (the ONNX backend suite pads by at most the axis length).
  const std::map<std::string, std::vector<double>> want = {
      {"reflect", {2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 5, 6, 5, 4, 5, 6, 5, 4, 5, 6, 5, 4, 5, 6, 5}},
      {"wrap", {3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 6, 4, 5, 6, 4, 5, 6, 4, 5, 6, 4, 5, 6, 4, 5}},
      {"edge", {1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5, 6, 6, 6, 6, 6, 6}},
  };
  for (const auto& [mode, values] : want) {
    auto got = PadLastAxis(mode, 7, 5);
    ASSERT_TRUE(got.ok()) << mode << ": " << got.status();
    EXPECT_EQ(*got, values) << mode;
  }
}

// A transformer block's LayerNorm: its input (a residual sum) and its output are each stored once, not recomputed by
// every kernel that reads them -- the matmuls after it read the stored output (MiniLM's FFN projection ran 3x slower
// recomputing it per output tile). Values against a double-precision reference.
TEST_F(OnnxModelTest, LayerNormInputAndOutputAreStoredForTheMatmulsAfterIt) {
  constexpr int64_t kRows = 8, kD = 32, kCols = 64;
  ::onnx::ModelProto m = Base();
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "x", 1, {kRows, kD});
  AddIo(g->add_input(), "r", 1, {kRows, kD});
  AddIo(g->add_output(), "p", 1, {kRows, kCols});
  AddIo(g->add_output(), "q", 1, {kRows, kCols});
  auto init = [&](const std::string& name, std::vector<int64_t> dims, double scale) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(1);
    int64_t n = 1;
    for (int64_t d : dims) t->add_dims(d), n *= d;
    for (int64_t i = 0; i < n; ++i) t->add_float_data(static_cast<float>(scale * ((i * 37 % 23) - 11)));
  };
  init("gamma", {kD}, 0.1);
  init("beta", {kD}, 0.05);
  init("w1", {kD, kCols}, 0.02);
  init("w2", {kD, kCols}, -0.03);
  AddNode(g, "Add", {"x", "r"}, {"s"});
  AddNode(g, "LayerNormalization", {"s", "gamma", "beta"}, {"y"});
  AddNode(g, "MatMul", {"y", "w1"}, {"p"});
  AddNode(g, "MatMul", {"y", "w2"}, {"q"});
  auto model = Load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<double> xs(kRows * kD), rs(kRows * kD);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.3 * i), rs[i] = std::cos(0.7 * i);
  auto r = kiln::onnx::Run(**model, {{"x", FloatInput(xs, {kRows, kD})}, {"r", FloatInput(rs, {kRows, kD})}},
                           RunOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs.size(), 2u);
  absl::StatusOr<Schedule> s = CreateSchedule({r->outputs[0].tensor.uop(), r->outputs[1].tensor.uop()});
  ASSERT_TRUE(s.ok()) << s.status();
  // Fused, the products read x, r, the mean, the inverse deviation, gamma and beta besides their weights (8 buffers
  // with the output); with both ends stored the widest kernel is the normalization (output, s, mean, inverse
  // deviation, gamma, beta).
  for (size_t i = 0; i < s->items.size(); ++i) {
    if (s->items[i].kind != ScheduleItem::Kind::kKernel) continue;
    EXPECT_LE(s->items[i].buffers.size(), 6u) << "item " << i;
  }
  std::vector<double> w1(kD * kCols), w2(kD * kCols), gamma(kD), beta(kD);
  for (int64_t i = 0; i < kD; ++i) gamma[i] = 0.1 * ((i * 37 % 23) - 11), beta[i] = 0.05 * ((i * 37 % 23) - 11);
  for (int64_t i = 0; i < kD * kCols; ++i) w1[i] = 0.02 * ((i * 37 % 23) - 11), w2[i] = -0.03 * ((i * 37 % 23) - 11);
  for (int out = 0; out < 2; ++out) {
    auto got = ValueToHost(r->outputs[out]);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<double>& w = out == 0 ? w1 : w2;
    for (int64_t i = 0; i < kRows; ++i) {
      double mean = 0, var = 0;
      for (int64_t k = 0; k < kD; ++k) mean += xs[i * kD + k] + rs[i * kD + k];
      mean /= kD;
      for (int64_t k = 0; k < kD; ++k) var += std::pow(xs[i * kD + k] + rs[i * kD + k] - mean, 2);
      const double inv = 1 / std::sqrt(var / kD + 1e-5);
      for (int64_t j = 0; j < kCols; ++j) {
        double want = 0;
        for (int64_t k = 0; k < kD; ++k)
          want += ((xs[i * kD + k] + rs[i * kD + k] - mean) * inv * gamma[k] + beta[k]) * w[k * kCols + j];
        EXPECT_NEAR((*got)->GetDouble(i * kCols + j), want, 1e-4 * (1 + std::abs(want))) << out << " " << i << " " << j;
      }
    }
  }
}

// A MatMul whose B is an initializer (constant) reads it through a packed copy ([N / 16][K][16], one copy kernel that
// a JIT trace runs once) whatever N, where a B that is a graph input is packed only at widths whose rows alias in the
// caches (N * 4 bytes a multiple of 1 KiB; here 320 floats are not). MiniLM's N = 384 projections ran 1.3-1.7x slower
// reading their unpacked weights from far memory. Values of both against a double-precision reference.
TEST_F(OnnxModelTest, ConstantMatmulWeightIsPackedAtAnyWidth) {
  constexpr int64_t kRows = 64, kK = 256, kCols = 320;
  std::vector<double> xs(kRows * kK), ws(kK * kCols);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.3 * static_cast<double>(i));
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = 0.01 * (static_cast<double>(i * 37 % 23) - 11);
  for (const bool initializer : {true, false}) {
    ::onnx::ModelProto m = Base();
    auto* g = m.mutable_graph();
    AddIo(g->add_input(), "x", 1, {kRows, kK});
    AddIo(g->add_output(), "y", 1, {kRows, kCols});
    if (initializer) {
      auto* t = g->add_initializer();
      t->set_name("w");
      t->set_data_type(1);
      t->add_dims(kK);
      t->add_dims(kCols);
      for (double v : ws) t->add_float_data(static_cast<float>(v));
    } else {
      AddIo(g->add_input(), "w", 1, {kK, kCols});
    }
    AddNode(g, "MatMul", {"x", "w"}, {"y"});
    auto model = Load(m);
    ASSERT_TRUE(model.ok()) << model.status();
    std::map<std::string, Value> feeds = {{"x", FloatInput(xs, {kRows, kK})}};
    if (!initializer) feeds.emplace("w", FloatInput(ws, {kK, kCols}));
    WeightCache cache;  // as kilnd's ONNX models hold their initializers: uploaded once, marked constant
    RunOptions opts;
    opts.weights = &cache;
    auto r = kiln::onnx::Run(**model, feeds, opts);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->outputs.size(), 1u);
    absl::StatusOr<Schedule> s = CreateSchedule({r->outputs[0].tensor.uop()});
    ASSERT_TRUE(s.ok()) << s.status();
    int kernels = 0;
    for (const ScheduleItem& item : s->items) kernels += item.kind == ScheduleItem::Kind::kKernel;
    EXPECT_EQ(kernels, initializer ? 2 : 1) << (initializer ? "initializer B: the pack and the product"
                                                            : "input B: the product alone");
    auto got = ValueToHost(r->outputs[0]);
    ASSERT_TRUE(got.ok()) << got.status();
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < kCols; ++j) {
        double want = 0;
        for (int64_t k = 0; k < kK; ++k) want += xs[i * kK + k] * ws[k * kCols + j];
        ASSERT_NEAR((*got)->GetDouble(i * kCols + j), want, 1e-4 * (1 + std::abs(want))) << i << " " << j;
      }
  }
}

// Attention's probabilities are stored once: P @ V reads them instead of recomputing exp(x - max) / sum for each of
// its column tiles. Values against a double-precision reference.
TEST_F(OnnxModelTest, SoftmaxOutputIsStoredForTheMatmulAfterIt) {
  constexpr int64_t kRows = 16, kKeys = 32, kCols = 32;
  ::onnx::ModelProto m = Base();
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "s", 1, {kRows, kKeys});
  AddIo(g->add_input(), "v", 1, {kKeys, kCols});
  AddIo(g->add_output(), "o", 1, {kRows, kCols});
  AddNode(g, "Softmax", {"s"}, {"p"});
  AddNode(g, "MatMul", {"p", "v"}, {"o"});
  auto model = Load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<double> ss(kRows * kKeys), vs(kKeys * kCols);
  for (size_t i = 0; i < ss.size(); ++i) ss[i] = 3 * std::sin(0.37 * i);
  for (size_t i = 0; i < vs.size(); ++i) vs[i] = std::cos(0.11 * i);
  auto r = kiln::onnx::Run(**model, {{"s", FloatInput(ss, {kRows, kKeys})}, {"v", FloatInput(vs, {kKeys, kCols})}},
                           RunOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<Schedule> s = CreateSchedule({r->outputs[0].tensor.uop()});
  ASSERT_TRUE(s.ok()) << s.status();
  // The product's kernel reads the stored probabilities and V (3 buffers with its output); fused, it read the
  // scores, their max and the sum of exps too (5).
  const ScheduleItem& last = s->items.back();
  ASSERT_EQ(last.kind, ScheduleItem::Kind::kKernel);
  EXPECT_EQ(last.buffers.size(), 3u);
  auto got = ValueToHost(r->outputs[0]);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t i = 0; i < kRows; ++i) {
    double mx = -1e300, sum = 0;
    for (int64_t k = 0; k < kKeys; ++k) mx = std::max(mx, ss[i * kKeys + k]);
    for (int64_t k = 0; k < kKeys; ++k) sum += std::exp(ss[i * kKeys + k] - mx);
    for (int64_t j = 0; j < kCols; ++j) {
      double want = 0;
      for (int64_t k = 0; k < kKeys; ++k) want += std::exp(ss[i * kKeys + k] - mx) / sum * vs[k * kCols + j];
      EXPECT_NEAR((*got)->GetDouble(i * kCols + j), want, 1e-5) << i << " " << j;
    }
  }
}

// A matmul's result transposed to a new innermost axis (attention's keys stored as K^T for Q @ K^T) is stored in its
// own layout first and the transpose is a copy kernel: fused, the projection vectorized along the transposed stores
// instead of its weights' rows. Values against a double-precision reference.
TEST_F(OnnxModelTest, TransposedMatmulResultIsStoredBeforeTheTranspose) {
  constexpr int64_t kT = 16, kD = 32, kHeads = 2, kDh = 16;
  ::onnx::ModelProto m = Base();
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "a", 1, {kT, kD});
  AddIo(g->add_input(), "w", 1, {kD, kD});
  AddIo(g->add_input(), "q", 1, {kHeads, kT, kDh});
  AddIo(g->add_output(), "s", 1, {kHeads, kT, kT});
  auto* shape = g->add_initializer();
  shape->set_name("shape");
  shape->set_data_type(7);
  shape->add_dims(3);
  for (int64_t d : {kT, kHeads, kDh}) shape->add_int64_data(d);
  AddNode(g, "MatMul", {"a", "w"}, {"k"});
  AddNode(g, "Reshape", {"k", "shape"}, {"k3"});
  auto* perm = AddNode(g, "Transpose", {"k3"}, {"kt"})->add_attribute();  // [heads, dh, T]
  perm->set_name("perm");
  perm->set_type(::onnx::AttributeProto::INTS);
  for (int64_t p : {1, 2, 0}) perm->add_ints(p);
  AddNode(g, "MatMul", {"q", "kt"}, {"s"});
  auto model = Load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<double> as(kT * kD), ws(kD * kD), qs(kHeads * kT * kDh);
  for (size_t i = 0; i < as.size(); ++i) as[i] = std::sin(0.3 * i);
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = std::cos(0.7 * i);
  for (size_t i = 0; i < qs.size(); ++i) qs[i] = std::sin(0.13 * i + 1);
  auto r = kiln::onnx::Run(**model, {{"a", FloatInput(as, {kT, kD})}, {"w", FloatInput(ws, {kD, kD})},
                                     {"q", FloatInput(qs, {kHeads, kT, kDh})}},
                           RunOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<Schedule> s = CreateSchedule({r->outputs[0].tensor.uop()});
  ASSERT_TRUE(s.ok()) << s.status();
  int reduces = 0, copies = 0;
  for (const ScheduleItem& it : s->items) {
    if (it.kind != ScheduleItem::Kind::kKernel) continue;
    const std::vector<const UOp*> nodes = Toposort(it.ast);
    const bool reduce = std::any_of(nodes.begin(), nodes.end(), [](const UOp* u) { return u->op() == Op::REDUCE; });
    (reduce ? reduces : copies) += 1;
  }
  EXPECT_EQ(reduces, 2);  // the projection and the scores
  EXPECT_EQ(copies, 1);   // K -> K^T; fused, the projection stored K^T itself (0)
  auto got = ValueToHost(r->outputs[0]);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t i = 0; i < kT; ++i) {
      for (int64_t j = 0; j < kT; ++j) {
        double want = 0;
        for (int64_t d = 0; d < kDh; ++d) {
          double k = 0;  // k[j, h * kDh + d]
          for (int64_t c = 0; c < kD; ++c) k += as[j * kD + c] * ws[c * kD + h * kDh + d];
          want += qs[(h * kT + i) * kDh + d] * k;
        }
        EXPECT_NEAR((*got)->GetDouble((h * kT + i) * kT + j), want, 1e-4 * (1 + std::abs(want))) << h << i << j;
      }
    }
  }
}

TEST_F(OnnxModelTest, HugePadsAreAnErrorNotAHang) {
  // fuzz_onnx: a reflect pad of 867,583,393,792 built one slice per padded element and ran for
  // minutes. Pads past the element limit are an error; a pad within it builds a few nodes.
  for (const std::string mode : {"reflect", "wrap", "edge", "constant"}) {
    auto got = PadLastAxis(mode, 867583393792, 1);
    ASSERT_FALSE(got.ok()) << mode;
    EXPECT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
    EXPECT_NE(std::string(got.status().message()).find("pads 867583393792 and 1 give axis 1"), std::string::npos)
        << got.status();
    auto neg = PadLastAxis(mode, std::numeric_limits<int64_t>::min(), 0);
    ASSERT_FALSE(neg.ok()) << mode;
  }
}

// A Loop over `trip` iterations (cond always true) whose body adds one to a float[2] carried value; with `inner_trip`
// > 0 the body also runs such a loop itself (a nested Loop).
::onnx::GraphProto LoopBody(int64_t inner_trip);
void AddLoop(::onnx::GraphProto* g, const std::string& prefix, int64_t trip, int64_t inner_trip,
             const std::string& in, const std::string& out) {
  auto* t = g->add_initializer();
  t->set_name(prefix + "trip");
  t->set_data_type(7);
  t->add_int64_data(trip);
  auto* c = g->add_initializer();
  c->set_name(prefix + "cond");
  c->set_data_type(9);
  c->add_int32_data(1);
  auto* loop = AddNode(g, "Loop", {prefix + "trip", prefix + "cond", in}, {out});
  auto* body = loop->add_attribute();
  body->set_name("body");
  body->set_type(::onnx::AttributeProto::GRAPH);
  *body->mutable_g() = LoopBody(inner_trip);
}
::onnx::GraphProto LoopBody(int64_t inner_trip) {
  ::onnx::GraphProto b;
  b.set_name("body");
  AddIo(b.add_input(), "iter", 7, {});
  AddIo(b.add_input(), "cond_in", 9, {});
  AddIo(b.add_input(), "acc_in", 1, {2});
  AddIo(b.add_output(), "cond_out", 9, {});
  AddIo(b.add_output(), "acc_out", 1, {2});
  auto* one = b.add_initializer();
  one->set_name("one");
  one->set_data_type(1);
  one->add_dims(2);
  one->add_float_data(1);
  one->add_float_data(1);
  if (inner_trip > 0) {
    AddLoop(&b, "inner_", inner_trip, 0, "acc_in", "acc_mid");
    AddNode(&b, "Add", {"acc_mid", "one"}, {"acc_out"});
  } else {
    AddNode(&b, "Add", {"acc_in", "one"}, {"acc_out"});
  }
  AddNode(&b, "Identity", {"cond_in"}, {"cond_out"});
  return b;
}
absl::StatusOr<RunResult> RunLoop(int64_t trip, int64_t inner_trip) {
  ::onnx::ModelProto m = Base(8, 17);
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "a", 1, {2});
  AddIo(g->add_output(), "final", 1, {2});
  AddLoop(g, "", trip, inner_trip, "a", "final");
  KILN_ASSIGN_OR_RETURN(auto model, Load(m));
  Value a;
  a.kind = Value::Kind::kTensor;
  a.host = std::make_shared<const HostArray>(HostArray::FromDoubles(dtypes::kFloat32, {2}, {0, 0}));
  return kiln::onnx::Run(*model, {{"a", a}}, RunOptions{});
}

TEST_F(OnnxModelTest, LoopsAreBoundedInTripsAndInNodeRuns) {
  // fuzz_onnx: a Loop of 4.25e18 trips with an always-true condition ran 65,536 iterations (the old bound) and timed
  // out under the sanitizers; the bound is now 16,384 trips, and every run is bounded to kMaxNodeRuns node executions,
  // so a Loop inside a Loop (16,384^2 iterations) ends too.
  absl::StatusOr<RunResult> small = RunLoop(5, 0);
  ASSERT_TRUE(small.ok()) << small.status();
  absl::StatusOr<HostArrayPtr> v = ValueToHost(small->outputs[0]);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->GetDouble(0), 5.0);
  EXPECT_EQ(small->node_runs, 1 + 5 * 2);
  absl::StatusOr<RunResult> huge = RunLoop(4251398048237748227, 0);
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(huge.status())) << huge.status();
  EXPECT_NE(std::string(huge.status().message()).find("more than 16384 iterations"), std::string::npos)
      << huge.status();
  absl::StatusOr<RunResult> nested = RunLoop(16384, 16384);
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(std::string(nested.status().message()).find("runs more than 262144 nodes"), std::string::npos)
      << nested.status();
}

TEST_F(OnnxModelTest, ReshapeToAnOverflowingShapeIsAnError) {
  // fuzz_onnx (UBSan): the product of the shape's dims overflowed int64.
  ::onnx::ModelProto m = Base(8, 14);
  auto* g = m.mutable_graph();
  AddIo(g->add_input(), "x", 1, {2, 3});
  AddIo(g->add_output(), "y", 1, {-1, -1});
  auto* shape = g->add_initializer();
  shape->set_name("shape");
  shape->set_data_type(7);
  shape->add_dims(2);
  shape->add_int64_data(1392508929);
  shape->add_int64_data(4467570830351532031);
  AddNode(g, "Reshape", {"x", "shape"}, {"y"});
  auto model = Load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  Value x;
  x.kind = Value::Kind::kTensor;
  x.host = std::make_shared<const HostArray>(HostArray::FromDoubles(dtypes::kFloat32, {2, 3}, {0, 1, 2, 3, 4, 5}));
  auto r = kiln::onnx::Run(**model, {{"x", x}}, RunOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("shape has more than"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace kiln::onnx
