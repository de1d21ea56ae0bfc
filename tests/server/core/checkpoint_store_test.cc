// CheckpointStore: what a failed or interrupted write leaves behind, and how a full disk is named.
#include "server/core/checkpoint_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/checkpoint_manifest.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_ckpt_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static absl::Status Write(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    return out ? absl::OkStatus() : absl::InternalError("write");
  }
  std::set<std::string> Files() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.insert(e.path().filename().string());
    return out;
  }
  fs::path dir_;
};

TEST_F(CheckpointStoreTest, FullDiskIsNamedAndLeavesTheLastGenerationIntact) {
  CheckpointStore store(dir_, 2, "<data-dir>/jobs/j");
  ASSERT_TRUE(store.Save(2, [](const std::string& p) { return Write(p, "two"); }).ok());
  ASSERT_TRUE(store.Save(4, [](const std::string& p) { return Write(p, "four"); }).ok());
  // The writer (SafeSave) reports ENOSPC as text after writing part of the temp file.
  absl::StatusOr<CheckpointInfo> st = store.Save(6, [](const std::string& p) {
    (void)Write(p, "partial");
    return absl::InternalError("write failed: " + p + ".tmp.1: No space left on device");
  });
  ASSERT_EQ(st.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.status().message(), HasSubstr("no space left on device (ENOSPC)"));
  EXPECT_THAT(st.status().message(),
              HasSubstr("writing <data-dir>/jobs/j/ckpt-0000000006.safetensors.tmp"));
  EXPECT_THAT(st.status().message(), HasSubstr("the checkpoint at step 4 is intact"));
  EXPECT_THAT(std::string(st.status().message()), ::testing::Not(HasSubstr(dir_.string())));
  EXPECT_EQ(Files(), (std::set<std::string>{
                         "ckpt-0000000002.manifest", "ckpt-0000000002.safetensors",
                         "ckpt-0000000004.manifest", "ckpt-0000000004.safetensors"}));
  absl::StatusOr<CheckpointInfo> latest =
      store.Latest([](const CheckpointInfo&) { return absl::OkStatus(); });
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->step, 4);
}

TEST_F(CheckpointStoreTest, OtherWriterErrorsKeepTheirCode) {
  CheckpointStore store(dir_, 2, "<data-dir>/jobs/j");
  absl::StatusOr<CheckpointInfo> st =
      store.Save(1, [](const std::string&) { return absl::PermissionDeniedError("denied"); });
  ASSERT_EQ(st.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.status().message(), HasSubstr("no earlier checkpoint exists"));
  EXPECT_TRUE(Files().empty());
}

TEST_F(CheckpointStoreTest, CleanRemovesEveryTempAndDataWithoutManifest) {
  CheckpointStore store(dir_, 2);
  ASSERT_TRUE(store.Save(4, [](const std::string& p) { return Write(p, "four"); }).ok());
  for (const char* name : {"ckpt-0000000008.safetensors.tmp", "ckpt-0000000008.safetensors",
                           "ckpt-0000000012.safetensors.tmp.tmp.4242",
                           "ckpt-0000000012.manifest.tmp"}) {
    ASSERT_TRUE(Write((dir_ / name).string(), "x").ok());
  }
  store.Clean();
  EXPECT_EQ(Files(), (std::set<std::string>{"ckpt-0000000004.manifest",
                                             "ckpt-0000000004.safetensors"}));
}

TEST_F(CheckpointStoreTest, KeepsTheNewestTwoAndSkipsACorruptOne) {
  CheckpointStore store(dir_, 2);
  for (int step : {1, 2, 3}) {
    ASSERT_TRUE(
        store.Save(step, [&](const std::string& p) { return Write(p, std::string(step, 'a')); })
            .ok());
  }
  EXPECT_EQ(store.List().size(), 2u);
  {
    std::ofstream out(dir_ / "ckpt-0000000003.safetensors", std::ios::binary | std::ios::trunc);
    out << "bbb";  // same size, different bytes
  }
  absl::StatusOr<CheckpointInfo> latest =
      store.Latest([](const CheckpointInfo&) { return absl::OkStatus(); });
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->step, 2);
}

}  // namespace
// The manifest format (checkpoint_manifest.h), as fuzz_checkpoint exercises it.
TEST(CheckpointManifestTest, FormatThenParseIsTheSameManifest) {
  const CheckpointManifest m{.step = 42,
                             .file = "ckpt-0000000042.safetensors",
                             .bytes = 123456,
                             .sha256 = std::string(64, 'a')};
  const std::string text = FormatCheckpointManifest(m);
  EXPECT_EQ(text,
            "kiln-checkpoint 1\nstep 42\nfile ckpt-0000000042.safetensors\nbytes 123456\nsha256 " +
                std::string(64, 'a') + "\n");
  absl::StatusOr<CheckpointManifest> back = ParseCheckpointManifest(text, 42);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 42);
  EXPECT_EQ(back->file, m.file);
  EXPECT_EQ(back->bytes, m.bytes);
  EXPECT_EQ(back->sha256, m.sha256);
  // Any whitespace between keys and values; unknown keys ignored; the last of a repeated key wins.
  back = ParseCheckpointManifest("kiln-checkpoint 1\n bytes\t7 extra x\r\nstep 42 file "
                                 "ckpt-0000000042.safetensors sha256 " + std::string(64, '0') +
                                     "\nbytes 9",
                                 42);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bytes, 9u);
}

TEST(CheckpointManifestTest, RejectsManifestsOfAnotherGenerationOrIncomplete) {
  const std::string sha(64, 'f');
  const std::string ok = "kiln-checkpoint 1\nstep 5\nfile ckpt-0000000005.safetensors\nbytes 1\n";
  struct Case {
    std::string text;
    std::string words;
  };
  const std::vector<Case> cases = {
      {"", "header is wrong"},
      {"kiln-checkpoint 2\n", "header is wrong"},
      {"kiln-checkpoint 1", "incomplete"},
      {ok, "incomplete"},                                      // no sha256
      {ok + "sha256 " + sha.substr(1), "incomplete"},          // 63 digits
      {ok + "sha256 " + std::string(64, 'F'), "incomplete"},   // not lowercase hex
      {ok + "sha256 " + std::string(63, 'f') + "g", "incomplete"},
      {"kiln-checkpoint 1\nstep 6\nfile ckpt-0000000005.safetensors\nbytes 1\nsha256 " + sha,
       "incomplete"},  // another step
      {"kiln-checkpoint 1\nstep 5\nfile ../ckpt-0000000005.safetensors\nbytes 1\nsha256 " + sha,
       "incomplete"},  // another file
      {"kiln-checkpoint 1\nstep 5\nfile ckpt-0000000005.safetensors\nbytes -1\nsha256 " + sha,
       "incomplete"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CheckpointManifest> m = ParseCheckpointManifest(c.text, 5);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << c.text;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(c.words)) << c.text;
  }
  EXPECT_TRUE(ParseCheckpointManifest(ok + "sha256 " + sha, 5).ok());
}

}  // namespace kiln::server
