// The ssh config lookup of the ssh room (src/ssh/settings.cc): what a host file's alias names.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "msrun_ssh/ssh.h"

namespace msrun_ssh {
namespace {

class SshConfig : public ::testing::Test {
 protected:
  SshConfig() {
    dir_ =
        std::filesystem::temp_directory_path() / ("msrun-ssh-config-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "config").string();
    std::ofstream(path_) << "Host alias\n  HostName 198.18.7.7\n  User someone\n"
                            "Host node*\n  HostName %h.cluster.example\n";
  }
  ~SshConfig() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(SshConfig, AliasGivesItsHostName) {
  EXPECT_EQ(ssh_config_hostname("alias", path_), "198.18.7.7");
  EXPECT_EQ(ssh_config_hostname("node07", path_), "node07.cluster.example");
}

TEST_F(SshConfig, NameWithoutEntryStaysAsIs) {
  EXPECT_EQ(ssh_config_hostname("198.18.1.10", path_), "198.18.1.10");
  EXPECT_EQ(ssh_config_hostname("other", path_), "other");
}

TEST_F(SshConfig, TheUsersConfigIsInTheHomeOfThePasswordDatabaseAsSshReadsIt) {
  // ssh reads ~/.ssh/config from the user's home in the password database, whatever $HOME says:
  // a config under another $HOME changes nothing.
  const char* home = std::getenv("HOME");
  std::string saved = home ? home : "";
  setenv("HOME", dir_.c_str(), 1);
  std::filesystem::create_directories(dir_ / ".ssh");
  std::filesystem::copy_file(path_, dir_ / ".ssh" / "config");
  EXPECT_EQ(ssh_config_hostname("alias", ""), "alias");
  if (home)
    setenv("HOME", saved.c_str(), 1);
  else
    unsetenv("HOME");
}

}  // namespace
}  // namespace msrun_ssh
