// Without an ssh client libssh reads the ssh config (ssh_config.h): what it would read otherwise
// than OpenSSH is refused, by file, line and keyword; what it reads as OpenSSH passes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "msrun_ssh/error.h"
#include "msrun_ssh/ssh_config.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using test::TempDirTest;

// The message refuse_what_libssh_misreads throws for config `path`, or "" when it passes.
std::string refused(const std::string& path, const std::vector<std::string>& names = {"n1"}) {
  try {
    refuse_what_libssh_misreads(path, names);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

class FallbackConfig : public TempDirTest {};

TEST_F(FallbackConfig, WhatLibsshReadsAsSshPasses) {
  std::string cfg = write("config",
                          "# a comment\n\nHost n? !n9\n  HostName 198.18.1.10\n  Port 2222\n"
                          "  User root\nHost *\n  UserKnownHostsFile /k\n  ConnectTimeout=5\n"
                          "  StrictHostKeyChecking yes\n  ProxyJump none\n  IdentitiesOnly no\n"
                          "  ServerAliveInterval 0\n  ServerAliveCountMax 9\n  SendEnv LANG\n"
                          "  ForwardAgent yes\n  BatchMode yes\n  HashKnownHosts yes\n");
  EXPECT_EQ(refused(cfg), "");
}

TEST_F(FallbackConfig, EachLineLibsshReadsOtherwiseIsRefusedByFileLineAndKeyword) {
  struct Case {
    std::string line;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"Match host n1", "Match: not read without an ssh client the way ssh reads it"},
      {"IdentityFile ~/.ssh/id_a", "IdentityFile: not read without an ssh client"},
      {"HostKeyAlias other", "HostKeyAlias: not read"},
      {"ProxyJump j1", "ProxyJump: only \"none\" is read"},
      {"ProxyCommand ssh -W %h:%p j", "ProxyCommand: only \"none\" is read"},
      {"StrictHostKeyChecking accept-new", "StrictHostKeyChecking: only \"yes\" is read"},
      {"ServerAliveInterval 30", "ServerAliveInterval: only \"0\" is read"},
      {"CertificateFile /c", "CertificateFile: not read"},
      {"CanonicalizeHostname yes", "CanonicalizeHostname: only \"no\" is read"},
      {"HostName %h.example", "HostName: tokens and variables are not expanded"},
      {"User ${USER}", "User: tokens and variables are not expanded"},
      {"UserKnownHostsFile /a /b", "UserKnownHostsFile: only one file is read"},
      {"Host Node1", "Host: a pattern with capitals is matched otherwise"},
      {"HostName \"n 1\"", "HostName: a quoted value is not read"},
      {"NoSuchKeyword yes", "NoSuchKeyword: not read without an ssh client"},
  };
  for (const auto& c : cases) {
    std::string cfg = write("config", "Host n1\n  Port 22\n  " + c.line + "\n");
    std::string got = refused(cfg);
    EXPECT_NE(got.find("ssh config " + cfg + " line 3: " + c.why), std::string::npos)
        << c.line << ": " << got;
    EXPECT_NE(got.find("install OpenSSH's client (openssh-client)"), std::string::npos) << got;
  }
}

TEST_F(FallbackConfig, AnIncludedFileIsCheckedAndNamed) {
  std::string inc = write("included.conf", "Host n2\n  HostName 198.18.1.11\n  Match all\n");
  std::string cfg = write("config", "Host n1\n  Include " + dir_ + "/inc*.conf\n");
  EXPECT_NE(refused(cfg).find("ssh config " + inc + " line 3: Match: "), std::string::npos)
      << refused(cfg);
}

TEST_F(FallbackConfig, AConfigThatIncludesItselfIsRefusedByName) {
  std::string cfg = dir_ + "/config";
  write("config", "Host n1\n  Include " + cfg + "\n");
  EXPECT_NE(refused(cfg).find("ssh config " + cfg + ": Include nested too deeply"),
            std::string::npos)
      << refused(cfg);
}

TEST_F(FallbackConfig, AHostNameWithCapitalsIsRefusedWhereAConfigIsRead) {
  std::string cfg = write("config", "Host n1\n  Port 22\n");
  std::string got = refused(cfg, {"n1", "Node2"});
  EXPECT_NE(got.find("host Node2: a name with capitals is matched against the ssh config " + cfg),
            std::string::npos)
      << got;
  EXPECT_EQ(refused(cfg, {"n1", "node2"}), "");
}

}  // namespace
}  // namespace msrun_ssh
