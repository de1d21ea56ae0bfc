// RepositoryFiles: nothing below the model repository root is read through a symbolic link or a
// second hard link, unless the operator allows links; messages never carry a refused file's text
// or a link's target. Real files in a temporary folder.
#include "server/core/repository_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Kind = RepositoryFiles::Kind;

constexpr char kSecret[] = "TOPSECRET_API_KEY_12345";

class RepositoryFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("kiln_repo_files_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    root_ = base_ / "repo";
    fs::create_directories(root_ / "model" / "1");
    fs::create_directories(base_ / "outside" / "folder");
    Write(root_ / "model" / "config.pbtxt", "name: \"model\"\n");
    Write(root_ / "model" / "1" / "model.graph", "graph bytes");
    Write(base_ / "outside" / "secret.txt", kSecret);
    Write(base_ / "outside" / "folder" / "config.pbtxt", "name: \"linked\"\n");
    fs::create_directories(root_ / "file_link");
    fs::create_symlink(base_ / "outside" / "secret.txt", root_ / "file_link" / "config.pbtxt");
    fs::create_directory_symlink(base_ / "outside" / "folder", root_ / "linked");
    fs::create_directories(root_ / "hard");
    fs::create_hard_link(base_ / "outside" / "secret.txt", root_ / "hard" / "config.pbtxt");
    ASSERT_EQ(::mkfifo((root_ / "model" / "fifo").c_str(), 0600), 0);
  }
  void TearDown() override { fs::remove_all(base_); }

  static void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

  fs::path base_;
  fs::path root_;
};

TEST_F(RepositoryFilesTest, ReadsPlainFiles) {
  RepositoryFiles files(root_, /*follow_links=*/false);
  absl::StatusOr<std::string> text = files.Read("model/config.pbtxt", 1 << 20, "config.pbtxt");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "name: \"model\"\n");
  EXPECT_EQ(files.Stat("model"), Kind::kDir);
  EXPECT_EQ(files.Stat("model/1/model.graph"), Kind::kFile);
  EXPECT_EQ(files.Stat("model/2"), Kind::kMissing);
  // Folders and links to folders are listed (a linked model is reported, not hidden); files are not.
  EXPECT_THAT(files.ListFolders(""), ElementsAre("file_link", "hard", "linked", "model"));
  EXPECT_THAT(files.ListFolders("model"), ElementsAre("1"));
}

TEST_F(RepositoryFilesTest, RefusesLinksAndSecondNames) {
  RepositoryFiles files(root_, /*follow_links=*/false);
  EXPECT_EQ(files.Stat("linked"), Kind::kLink);
  EXPECT_EQ(files.Stat("linked/config.pbtxt"), Kind::kLink);
  EXPECT_EQ(files.Stat("file_link/config.pbtxt"), Kind::kLink);

  absl::StatusOr<std::string> link = files.Read("file_link/config.pbtxt", 1 << 20, "config.pbtxt");
  ASSERT_TRUE(absl::IsInvalidArgument(link.status())) << link.status();
  EXPECT_THAT(std::string(link.status().message()),
              HasSubstr("config.pbtxt is, or is inside, a symbolic link that leads outside"));
  EXPECT_THAT(std::string(link.status().message()), HasSubstr("--repository-follow-links"));
  EXPECT_THAT(std::string(link.status().message()), Not(HasSubstr(base_.string())));  // no target path
  EXPECT_THAT(std::string(link.status().message()), Not(HasSubstr("secret.txt")));

  absl::StatusOr<std::string> inside = files.Read("linked/config.pbtxt", 1 << 20, "config.pbtxt");
  EXPECT_TRUE(absl::IsInvalidArgument(inside.status())) << inside.status();

  absl::StatusOr<std::string> hard = files.Read("hard/config.pbtxt", 1 << 20, "config.pbtxt");
  ASSERT_TRUE(absl::IsInvalidArgument(hard.status())) << hard.status();
  EXPECT_THAT(std::string(hard.status().message()), HasSubstr("2 hard links"));
  EXPECT_THAT(std::string(hard.status().message()), Not(HasSubstr(kSecret)));

  EXPECT_TRUE(absl::IsInvalidArgument(files.Open("file_link/config.pbtxt", "x").status()));
}

TEST_F(RepositoryFilesTest, RefusesNonRegularFilesAndOversizeAndDotDot) {
  RepositoryFiles files(root_, /*follow_links=*/false);
  absl::StatusOr<std::string> fifo = files.Read("model/fifo", 1 << 20, "model file fifo");
  ASSERT_FALSE(fifo.ok());  // and did not block
  EXPECT_THAT(std::string(fifo.status().message()), HasSubstr("not a regular file"));
  absl::StatusOr<std::string> big = files.Read("model/1/model.graph", 4, "model file 1/model.graph");
  ASSERT_TRUE(absl::IsInvalidArgument(big.status()));
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("11 bytes exceed the limit 4"));
  EXPECT_TRUE(absl::IsInvalidArgument(files.Read("model/../model/config.pbtxt", 100, "x").status()));
  EXPECT_TRUE(absl::IsNotFound(files.Read("model/nope", 100, "model file nope").status()));
}

// A Kubernetes ConfigMap volume: every top-level entry is a relative link into the volume's own
// ..data folder, itself a link to a timestamped folder. Links that stay inside the root are
// followed without the flag.
TEST_F(RepositoryFilesTest, FollowsLinksThatStayInsideTheRoot) {
  fs::create_directories(root_ / "..2026_01_01" / "cm_model" / "1");
  Write(root_ / "..2026_01_01" / "cm_model" / "config.pbtxt", "name: \"cm_model\"\n");
  fs::create_directory_symlink("..2026_01_01", root_ / "..data");
  fs::create_directory_symlink("..data/cm_model", root_ / "cm_model");
  fs::create_symlink("config.pbtxt", root_ / "model" / "alias.pbtxt");
  RepositoryFiles files(root_, /*follow_links=*/false);
  EXPECT_EQ(files.Stat("cm_model"), Kind::kDir);
  EXPECT_EQ(files.Stat("cm_model/config.pbtxt"), Kind::kFile);
  absl::StatusOr<std::string> text = files.Read("cm_model/config.pbtxt", 1 << 20, "config.pbtxt");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "name: \"cm_model\"\n");
  EXPECT_THAT(files.ListFolders("cm_model"), ElementsAre("1"));
  absl::StatusOr<std::string> alias = files.Read("model/alias.pbtxt", 1 << 20, "alias.pbtxt");
  ASSERT_TRUE(alias.ok()) << alias.status();
  EXPECT_EQ(*alias, "name: \"model\"\n");
  // Still refused: links that leave the root, however they are reached.
  fs::create_symlink("../../outside/secret.txt", root_ / "model" / "escape.pbtxt");
  EXPECT_TRUE(absl::IsInvalidArgument(files.Read("model/escape.pbtxt", 1 << 20, "x").status()));
  EXPECT_EQ(files.Stat("model/escape.pbtxt"), Kind::kLink);
}

TEST_F(RepositoryFilesTest, FollowsLinksWhenAllowed) {
  RepositoryFiles files(root_, /*follow_links=*/true);
  EXPECT_EQ(files.Stat("linked"), Kind::kDir);
  absl::StatusOr<std::string> text = files.Read("linked/config.pbtxt", 1 << 20, "config.pbtxt");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "name: \"linked\"\n");
  EXPECT_TRUE(files.Read("hard/config.pbtxt", 1 << 20, "config.pbtxt").ok());
}

TEST_F(RepositoryFilesTest, OpenGivesAPathToTheCheckedFile) {
  RepositoryFiles files(root_, /*follow_links=*/false);
  absl::StatusOr<RepositoryFiles::OpenFile> f = files.Open("model/1/model.graph", "model file 1/model.graph");
  ASSERT_TRUE(f.ok()) << f.status();
  // Replacing the name after the check does not change what the path reaches.
  fs::rename(root_ / "model" / "1" / "model.graph", root_ / "model" / "1" / "old");
  Write(root_ / "model" / "1" / "model.graph", "other bytes");
  std::ifstream in(f->path());
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, "graph bytes");
}

}  // namespace
}  // namespace kiln::server
