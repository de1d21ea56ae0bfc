// SharedMemoryManager on real POSIX shared memory objects (shm_open): registration checks (name,
// key, window inside the object, duplicates, bounds, disabled), Resolve's checks naming the
// parameter, the bytes seen both ways through the mapping, and a mapping held by a resolved block
// outliving Unregister.
#include "server/core/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

// A shared memory object of `size` bytes, mapped here too; unlinked at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t size)
      : key_("/kiln_shm_test_" + std::to_string(getpid()) + "_" + std::to_string(next_++)), size_(size) {
    const int fd = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    data_ = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  ~ShmObject() {
    munmap(data_, size_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  char* data() { return data_; }

 private:
  static inline int next_ = 0;
  std::string key_;
  size_t size_;
  char* data_ = nullptr;
};

SharedMemoryParams Params(std::string region, int64_t size, int64_t offset = 0) {
  SharedMemoryParams p;
  p.region = std::move(region);
  p.byte_size = size;
  p.offset = offset;
  return p;
}

TEST(SharedMemoryManagerTest, RegisterResolveAndSeeBytesBothWays) {
  ShmObject obj(8192);
  std::memcpy(obj.data() + 4100, "hello", 5);
  SharedMemoryManager m;
  // A window at a page-unaligned offset.
  ASSERT_TRUE(m.Register("r", obj.key(), 4096, 100).ok());
  absl::StatusOr<SharedMemoryBlock> b = m.Resolve(Params("r", 5, 4), "inputs[0].parameters");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(std::string(b->data, b->size), "hello");
  std::memcpy(b->data, "HELLO", 5);  // kilnd's writes reach the client's mapping
  EXPECT_EQ(std::string(obj.data() + 4100, 5), "HELLO");

  absl::StatusOr<std::vector<SharedMemoryRegionStatus>> status = m.Status("");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->size(), 1u);
  EXPECT_EQ((*status)[0].name, "r");
  EXPECT_EQ((*status)[0].key, obj.key());
  EXPECT_EQ((*status)[0].offset, 4096u);
  EXPECT_EQ((*status)[0].byte_size, 100u);
}

TEST(SharedMemoryManagerTest, ResolveNamesTheParameter) {
  ShmObject obj(64);
  SharedMemoryManager m;
  ASSERT_TRUE(m.Register("r", obj.key(), 0, 64).ok());
  auto err = [&](const SharedMemoryParams& p) {
    return std::string(m.Resolve(p, "outputs[1].parameters").status().message());
  };
  EXPECT_THAT(err(Params("nope", 4)), HasSubstr("outputs[1].parameters.shared_memory_region: no system shared memory region named 'nope'"));
  EXPECT_THAT(err(Params("r", 64, 4)), HasSubstr("outputs[1].parameters.shared_memory_offset: offset 4 + byte size 64 is past the end"));
  EXPECT_THAT(err(Params("r", 65)), HasSubstr("past the end of region 'r' (64 bytes)"));
  EXPECT_THAT(err(Params("r", -1)), HasSubstr("shared_memory_byte_size: -1 is negative"));
  EXPECT_THAT(err(Params("r", 4, -8)), HasSubstr("shared_memory_offset: -8 is negative"));
  SharedMemoryParams no_size;
  no_size.region = "r";
  EXPECT_THAT(err(no_size), HasSubstr("shared_memory_byte_size: missing"));
  SharedMemoryParams no_region;
  no_region.byte_size = 4;
  EXPECT_THAT(err(no_region), HasSubstr("shared_memory_region: missing"));
  EXPECT_TRUE(m.Resolve(Params("r", 0, 64), "x").ok());  // an empty window at the end
}

TEST(SharedMemoryManagerTest, RegistrationChecks) {
  ShmObject obj(64);
  SharedMemoryManager m(/*allow_client=*/true, /*max_regions=*/2, /*max_bytes=*/100);
  EXPECT_TRUE(absl::IsInvalidArgument(m.Register("", obj.key(), 0, 8)));
  EXPECT_TRUE(absl::IsInvalidArgument(m.Register("a", "", 0, 8)));
  EXPECT_TRUE(absl::IsInvalidArgument(m.Register("a", "/a/b", 0, 8)));
  EXPECT_TRUE(absl::IsInvalidArgument(m.Register("a", "/..", 0, 8)));
  EXPECT_TRUE(absl::IsInvalidArgument(m.Register("a", obj.key(), 0, 0)));
  EXPECT_TRUE(absl::IsInvalidArgument(m.Register("a", obj.key(), UINT64_MAX, 2)));
  absl::Status past = m.Register("a", obj.key(), 32, 64);
  EXPECT_TRUE(absl::IsInvalidArgument(past));
  EXPECT_THAT(std::string(past.message()), HasSubstr("past the end of shared memory object"));
  absl::Status missing = m.Register("a", "/kiln_shm_test_does_not_exist", 0, 8);
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("kiln_shm_test_does_not_exist"));

  ASSERT_TRUE(m.Register("a", obj.key(), 0, 64).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(m.Register("a", obj.key(), 0, 8)));
  EXPECT_TRUE(absl::IsResourceExhausted(m.Register("b", obj.key(), 0, 64)));  // 128 > 100 bytes
  ASSERT_TRUE(m.Register("b", obj.key(), 0, 8).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(m.Register("c", obj.key(), 0, 8)));  // 3 > 2 regions
  EXPECT_TRUE(absl::IsNotFound(m.Status("c").status()));
  ASSERT_TRUE(m.Unregister("a").ok());
  ASSERT_TRUE(m.Unregister("a").ok());  // unknown: OK, as Triton's
  ASSERT_TRUE(m.Register("c", obj.key(), 0, 64).ok());
  ASSERT_TRUE(m.Unregister("").ok());
  EXPECT_TRUE(m.Status("")->empty());

  SharedMemoryManager off(/*allow_client=*/false);
  EXPECT_TRUE(absl::IsFailedPrecondition(off.Register("a", obj.key(), 0, 8)));
}

TEST(SharedMemoryManagerTest, ABlockKeepsItsMappingAfterUnregister) {
  SharedMemoryManager m;
  SharedMemoryBlock held;
  {
    ShmObject obj(4096);
    std::memcpy(obj.data(), "still here", 10);
    ASSERT_TRUE(m.Register("r", obj.key(), 0, 4096).ok());
    absl::StatusOr<SharedMemoryBlock> b = m.Resolve(Params("r", 10), "x");
    ASSERT_TRUE(b.ok());
    held = *std::move(b);
    ASSERT_TRUE(m.Unregister("r").ok());
    EXPECT_FALSE(m.Resolve(Params("r", 10), "x").ok());
  }  // the object is unlinked and this test's own mapping is gone
  EXPECT_EQ(std::string(held.data, held.size), "still here");
  held.data[0] = 'S';  // writable: the manager's mapping lives while the block does
  EXPECT_EQ(held.data[0], 'S');
}

}  // namespace
}  // namespace kiln::server
