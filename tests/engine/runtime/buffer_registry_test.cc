// BufferTable (memory freed exactly when the BUFFER node dies), Buffer copies, BackendRegistry.
#include <atomic>
#include <cstring>
#include <vector>

#include "engine/runtime/buffer.h"
#include "engine/runtime/host_allocator.h"
#include "engine/runtime/registry.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

class CountingAllocator : public HostAllocator {
 public:
  absl::StatusOr<DeviceMemory> Alloc(size_t n) override {
    ++live;
    return HostAllocator::Alloc(n);
  }
  void Free(DeviceMemory m) override {
    --live;
    HostAllocator::Free(m);
  }
  std::atomic<int> live{0};
};

class FakeDevice : public Device {
 public:
  explicit FakeDevice(std::string name = "FAKE") : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  Allocator& allocator() override { return alloc; }
  Compiler& compiler() override { std::abort(); }
  std::string renderer() const override { return "llvm"; }
  absl::StatusOr<std::unique_ptr<Program>> Load(const std::string&, const std::string&) override {
    return absl::UnimplementedError("fake");
  }
  CountingAllocator alloc;

 private:
  std::string name_;
};

UOpPtr MakeBuffer(int64_t unique, int64_t n) {
  UOpPtr u = UOp::Make(Op::UNIQUE, dtypes::kVoid, {}, Arg(unique));
  UOpPtr d = UOp::Make(Op::DEVICE, dtypes::kVoid, {}, Arg(std::string("FAKE")));
  return UOp::Make(Op::BUFFER, dtypes::kFloat32, {u, d}, Arg(n));
}

TEST(BufferTest, CreateCopyAndFree) {
  FakeDevice dev;
  {
    auto b = Buffer::Create(&dev, dtypes::kFloat32, 10);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->nbytes(), 40u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*b)->memory().ptr) % 64, 0u);
    std::vector<float> in(10, 1.5f), out(10, 0.f);
    ASSERT_TRUE((*b)->CopyIn(in.data(), 40).ok());
    ASSERT_TRUE((*b)->CopyOut(out.data(), 40).ok());
    EXPECT_EQ(in, out);
    EXPECT_EQ((*b)->CopyIn(in.data(), 39).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(dev.alloc.live, 1);
  }
  EXPECT_EQ(dev.alloc.live, 0);
  EXPECT_FALSE(Buffer::Create(&dev, dtypes::kFloat32, -1).ok());
  EXPECT_FALSE(Buffer::Create(&dev, dtypes::kFloat32.Ptr(), 1).ok());
  EXPECT_TRUE(Buffer::Create(&dev, dtypes::kFloat32, 0).ok());
}

TEST(BufferTableTest, MemoryFreedWhenBufferNodeDies) {
  FakeDevice dev;
  BufferTable& table = BufferTable::Global();
  const size_t before = table.size();
  {
    UOpPtr buf = MakeBuffer(424242, 16);
    auto b = Buffer::Create(&dev, dtypes::kFloat32, 16);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(table.Attach(buf.get(), *b).ok());
    EXPECT_EQ(table.Attach(buf.get(), *b).code(), absl::StatusCode::kAlreadyExists);
    b->reset();
    EXPECT_EQ(dev.alloc.live, 1);  // the table keeps it alive
    ASSERT_NE(table.Lookup(buf.get()), nullptr);
    EXPECT_EQ(table.Lookup(buf.get())->numel(), 16);
    {
      UOpPtr view = UOp::Make(Op::RESHAPE, dtypes::kFloat32, {buf}, Arg(IntVec{4, 4}));
      UOpPtr again = MakeBuffer(424242, 16);  // interned: the same node
      EXPECT_EQ(again, buf);
    }
    EXPECT_EQ(dev.alloc.live, 1);  // other references died, the node lives
    EXPECT_EQ(table.size(), before + 1);
  }
  EXPECT_EQ(dev.alloc.live, 0);
  EXPECT_EQ(table.size(), before);
}

TEST(BufferTableTest, BytesPerDeviceFollowAttachAndDeath) {
  FakeDevice a, b;
  BufferTable& table = BufferTable::Global();
  EXPECT_EQ(table.bytes_on(&a), 0u);
  {
    UOpPtr n1 = MakeBuffer(61, 16), n2 = MakeBuffer(62, 4);
    auto b1 = Buffer::Create(&a, dtypes::kFloat32, 16);
    auto b2 = Buffer::Create(&b, dtypes::kFloat32, 4);
    ASSERT_TRUE(b1.ok() && b2.ok());
    ASSERT_TRUE(table.Attach(n1.get(), *b1).ok());
    ASSERT_TRUE(table.Attach(n2.get(), *b2).ok());
    EXPECT_EQ(table.bytes_on(&a), 64u);
    EXPECT_EQ(table.bytes_on(&b), 16u);
    n1 = nullptr;  // the node dies: its bytes leave device a only
    EXPECT_EQ(table.bytes_on(&a), 0u);
    EXPECT_EQ(table.bytes_on(&b), 16u);
  }
  EXPECT_EQ(table.bytes_on(&b), 0u);
}

TEST(BufferTableTest, SharedBufferOutlivesOneNode) {
  FakeDevice dev;
  BufferTable& table = BufferTable::Global();
  auto b = Buffer::Create(&dev, dtypes::kFloat32, 4);
  ASSERT_TRUE(b.ok());
  std::shared_ptr<Buffer> shared = *b;
  {
    UOpPtr n1 = MakeBuffer(51, 4), n2 = MakeBuffer(52, 4);
    ASSERT_TRUE(table.Attach(n1.get(), shared).ok());
    ASSERT_TRUE(table.Attach(n2.get(), shared).ok());
    n1 = nullptr;
    EXPECT_EQ(dev.alloc.live, 1);
  }
  EXPECT_EQ(dev.alloc.live, 1);  // still held here
  shared.reset();
  b->reset();
  EXPECT_EQ(dev.alloc.live, 0);
}

TEST(BufferTableTest, RejectsNonBufferNodes) {
  FakeDevice dev;
  auto b = Buffer::Create(&dev, dtypes::kFloat32, 1);
  UOpPtr c = UOp::Const(dtypes::kFloat32, 1.0);
  EXPECT_EQ(BufferTable::Global().Attach(c.get(), *b).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BufferTable::Global().Lookup(c.get()), nullptr);
}

TEST(RegistryTest, ParseName) {
  auto p = BackendRegistry::ParseName("cl:1");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, "CL");
  EXPECT_EQ(p->index, 1);
  EXPECT_EQ(p->canonical, "CL:1");
  EXPECT_EQ(BackendRegistry::ParseName("cpu")->canonical, "CPU");
  for (const char* bad : {"", ":0", "CPU:", "CPU:x", "C PU", "CPU:99999", "../x"})
    EXPECT_EQ(BackendRegistry::ParseName(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
}

TEST(RegistryTest, CreatesLazilyOnceAndListsKinds) {
  BackendRegistry reg;
  std::atomic<int> made{0};
  EXPECT_TRUE(reg.Register("fake", [&](const std::string& name, int index) -> absl::StatusOr<std::unique_ptr<Device>> {
    ++made;
    if (index > 1) return absl::NotFoundError("no such fake");
    return std::make_unique<FakeDevice>(name);
  }));
  EXPECT_FALSE(reg.Register("FAKE", nullptr));  // first registration wins
  EXPECT_EQ(made, 0);
  auto a = reg.GetDevice("FAKE");
  auto b = reg.GetDevice("fake");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*a)->name(), "FAKE");
  EXPECT_EQ(made, 1);
  auto c = reg.GetDevice("FAKE:1");
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*a, *c);
  EXPECT_EQ(reg.GetDevice("FAKE:2").status().code(), absl::StatusCode::kNotFound);
  auto unknown = reg.GetDevice("METAL");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("FAKE"), std::string::npos);
  EXPECT_EQ(reg.ListDevices(), std::vector<std::string>{"FAKE"});
  EXPECT_TRUE(reg.HasKind("Fake"));
}

}  // namespace
}  // namespace kiln::runtime
