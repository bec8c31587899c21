// known_hosts narrowing (src/ssh/known_hosts.cc): what each session is handed must contain every
// line OpenSSH's own matcher (`ssh-keygen -F`) finds for its host — plain, hashed, ports, case —
// plus every line only libssh can judge, and should leave out the other hosts' lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "msrun_ssh/ssh.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using test::shell_output;
using test::slurp;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const auto& l : split_lines(text))
    if (l == line) return true;
  return false;
}

class KnownHosts : public test::TempDirTest {
 protected:
  void SetUp() override {
    if (access("/usr/bin/ssh-keygen", X_OK) != 0)
      GTEST_SKIP()
          << "SKIPPED LOUDLY: /usr/bin/ssh-keygen (openssh-client) is needed as the oracle";
    for (const char* k : {"a", "b"}) {
      shell_output("ssh-keygen -q -t ed25519 -N '' -C '' -f " + dir_ + "/" + k + " </dev/null");
      std::string pub = slurp(dir_ + "/" + k + ".pub");
      ASSERT_FALSE(pub.empty());
      key_[k] = pub.substr(0, pub.find_last_not_of(" \n") + 1);
    }
  }
  // Writes `text` to a file, hashes a copy with ssh-keygen -H, and returns both.
  std::pair<std::string, std::string> files(const std::string& text) {
    std::string plain = write("known_hosts", text), hashed = write("known_hosts.hashed", text);
    shell_output("ssh-keygen -q -H -f " + hashed + " >/dev/null 2>&1");
    return {plain, hashed};
  }

  // The lines of `file` that ssh-keygen -F reports for `name`.
  std::vector<std::string> oracle(const std::string& file, const std::string& name) {
    std::vector<std::string> lines = split_lines(slurp(file)), found;
    for (const auto& l : split_lines(shell_output("ssh-keygen -F '" + name + "' -f " + file))) {
      size_t at = l.rfind("found: line ");
      if (l.starts_with("# Host ") && at != std::string::npos)
        found.push_back(lines.at(std::stoul(l.substr(at + 12)) - 1));
    }
    return found;
  }

  std::map<std::string, std::string> key_;
};

TEST_F(KnownHosts, EveryLineOpenSshMatchesIsHandedOnPlainAndHashed) {
  std::string a = key_["a"], b = key_["b"];
  std::string text = "# comment\n\n" + ("node1 " + a + "\n") + ("node2 " + b + "\n") +
                     ("node3,198.18.0.3 " + a + "\n") + ("[node4]:2222 " + b + "\n") +
                     ("node4 " + a + "\n") + ("Node5 " + b + "\n") + ("node1 " + b + "\n");
  auto [plain, hashed] = files(text);
  ASSERT_NE(slurp(hashed).find("|1|"), std::string::npos) << "ssh-keygen -H did not hash";
  KnownHostsIndex plain_index(slurp(plain)), hashed_index(slurp(hashed));
  struct Case {
    std::string host;
    int port;
    std::string lookup;  // the name OpenSSH / libssh look up
  };
  for (const Case& c : std::vector<Case>{{"node1", 22, "node1"},
                                         {"node2", 22, "node2"},
                                         {"198.18.0.3", 22, "198.18.0.3"},
                                         {"node3", 22, "node3"},
                                         {"node4", 2222, "[node4]:2222"},
                                         {"node4", 22, "node4"},
                                         {"node5", 22, "node5"},
                                         {"nowhere", 22, "nowhere"}}) {
    for (const auto& [file, index] : {std::pair{plain, &plain_index}, {hashed, &hashed_index}}) {
      SCOPED_TRACE(c.lookup + " in " + file);
      std::vector<std::string> want = oracle(file, c.lookup);
      // On another port the bare name's plain lines are handed too (a hashed line is tested
      // against the one name libssh hashes).
      if (c.port != 22 && file == plain)
        for (const auto& line : oracle(file, c.host)) want.push_back(line);
      std::string got = index->lines_for(c.host, c.port);
      for (const auto& line : want) EXPECT_TRUE(has_line(got, line)) << line << "\ngot:\n" << got;
      // Narrowed: nothing but what matches (this file has no marker or pattern lines).
      EXPECT_EQ(split_lines(got).size(), want.size()) << got;
    }
  }
  // Case: OpenSSH lower-cases the name it looks up; "Node5" in the file matches "node5".
  EXPECT_EQ(split_lines(plain_index.lines_for("node5", 22)).size(), 1u);
  EXPECT_EQ(split_lines(plain_index.lines_for("NODE5", 22)).size(), 1u);
  // Two keys for node1: both handed, so that libssh can tell "changed" from "other type".
  EXPECT_EQ(split_lines(hashed_index.lines_for("node1", 22)).size(), 2u);
}

TEST_F(KnownHosts, LinesOnlyLibsshCanJudgeGoToEveryHost) {
  std::string a = key_["a"];
  std::vector<std::string> always{
      "@revoked node9 " + a,
      "@cert-authority *.cluster " + a,
      "|1|not-base64|also-not " + a,
      "|1|c2FsdA==|c2hvcnQ= " + a,  // a hash of the wrong length
      "lonelyword",
  };
  std::string text = "*.cluster " + a + "\n";
  for (const auto& l : always) text += l + "\n";
  text += "other " + a + "\n   \n\t# indented comment\n";
  KnownHostsIndex index(text);
  for (const char* host : {"node1", "node7", "x.cluster", "other"}) {
    std::string got = index.lines_for(host, 22);
    for (const auto& line : always) EXPECT_TRUE(has_line(got, line)) << host << ": " << line;
    EXPECT_EQ(has_line(got, "other " + a), std::string(host) == "other") << host;
    EXPECT_EQ(got.find('#'), std::string::npos);
  }
  // File order is kept.
  std::string got = index.lines_for("x.cluster", 22);
  EXPECT_LT(got.find("*.cluster"), got.find("lonelyword"));
  EXPECT_LT(got.find("@revoked"), got.find("lonelyword"));
}

// Pattern lines are handed to the hosts ssh matches them for (ssh-keygen -F), and only to those:
// libssh reads each name of the list alone, so `*.cluster,!login.cluster KEY` gave login.cluster
// the cluster's key (ssh: unknown). Tabs between fields become spaces: libssh split at spaces
// only, and a tab-separated line that ssh reads was unknown to it.
TEST_F(KnownHosts, PatternLinesGoOnlyToTheHostsSshMatchesAndTabsBecomeSpaces) {
  std::string a = key_["a"];
  std::string text = "*.cluster,!login.cluster " + a + "\nnode*,!node7 " + a + "\nn?de " + a +
                     "\n[node4]:2222\t" + a + "\n";
  std::string file = write("known_hosts", text);
  KnownHostsIndex index(text);
  for (const char* host : {"x.cluster", "login.cluster", "node1", "node7", "node", "nodes"}) {
    std::vector<std::string> want = oracle(file, host),
                             got = split_lines(index.lines_for(host, 22));
    EXPECT_EQ(got, want) << host;
  }
  std::string tabbed = "[node4]:2222 " + a;
  EXPECT_EQ(index.lines_for("node4", 2222), tabbed + "\n");
  EXPECT_EQ(oracle(file, "[node4]:2222").size(), 1u);  // ssh reads the tab-separated line
}

// Under a HostKeyAlias the lines are renamed for libssh, so the index judges the pattern lines
// itself: exactly those ssh-keygen -F (OpenSSH's matcher) finds for the alias are handed, with the
// lines that name it; a cluster-wide "*.cluster KEY" line must count, or a changed key would look
// unknown (and accept-new would take it).
TEST_F(KnownHosts, UnderAnAliasThePatternLinesOpenSshMatchesAreHanded) {
  std::string a = key_["a"];
  std::vector<std::string> patterns{
      "*.cluster", "node*,!node7",  "n?de",       "!node8,*", "N*.CLUSTER", "*x*y*",
      "[n1]:22*",  "node1.clust?r", "a,b,*.c",    "*",        "!*",         "n1.*,!*.cluster",
      "?",         "**.cluster",    "*.*.cluster"};
  std::string text;
  for (const auto& p : patterns) text += p + " " + a + "\n";
  text += "n1.cluster " + a + "\n";
  std::string file = write("known_hosts", text);
  KnownHostsIndex index(text);
  for (const char* alias : {"n1.cluster", "node7", "node", "node8", "x1y", "[n1]:2222", "z",
                            "deep.n1.cluster", "b", "node1.cluster"}) {
    std::vector<std::string> want = oracle(file, alias),
                             got = split_lines(index.lines_for(alias, 22, true));
    got.erase(std::remove(got.begin(), got.end(), ""), got.end());
    EXPECT_EQ(got, want) << alias;
  }
}

// @revoked lines, which libssh skips: revoking_line finds the one ssh-keygen -F reports REVOKED
// for the name (plain, hashed, patterns, ports), and only for that key.
TEST_F(KnownHosts, RevokedLinesAreFoundAsOpenSshFindsThem) {
  std::string a = key_["a"], b = key_["b"];
  std::string blob_a = a.substr(a.find(' ') + 1), blob_b = b.substr(b.find(' ') + 1);
  std::string text = "node1 " + a + "\n@revoked node1 " + a + "\n@revoked *.cluster,!x.cluster " +
                     a + "\n@revoked [node4]:2222 " + a + "\n@cert-authority node9 " + a +
                     "\n@revoked node5 " + b + "\n";
  auto [plain, hashed] = files(text);
  for (const auto& file : {plain, hashed}) {
    std::string content = slurp(file);
    for (const char* name :
         {"node1", "n1.cluster", "x.cluster", "[node4]:2222", "node4", "node9", "node5", "other"}) {
      std::string want;
      for (const auto& l :
           split_lines(shell_output("ssh-keygen -F '" + std::string(name) + "' -f " + file)))
        if (l.starts_with("# Host ") && l.ends_with(" REVOKED")) want = l;
      size_t got = revoking_line(content, name, blob_a);
      if (!got) got = revoking_line(content, name, blob_b);  // -F reports either key's line
      EXPECT_EQ(got != 0, !want.empty()) << file << " " << name << ": " << want;
      if (got) {
        EXPECT_NE(want.find("found: line " + std::to_string(got) + " "), std::string::npos) << want;
      }
    }
  }
  EXPECT_NE(revoking_line(text, "node5", blob_b), 0u);
  EXPECT_EQ(revoking_line(text, "node5", blob_a), 0u);  // another key of the host: not revoked
  EXPECT_TRUE(key_listed("# revoked\n" + b + " old\n", blob_b));
  EXPECT_FALSE(key_listed(b + "\n", blob_a));
}

TEST_F(KnownHosts, NonStandardPortKeepsBothSpellings) {
  std::string a = key_["a"];
  KnownHostsIndex index("node1 " + a + "\n[node1]:2222 " + a + "\n[node1]:2223 " + a + "\n");
  std::string got = index.lines_for("node1", 2222);
  EXPECT_TRUE(has_line(got, "[node1]:2222 " + a));
  EXPECT_TRUE(has_line(got, "node1 " + a));  // kept: libssh decides which one counts
  EXPECT_FALSE(has_line(got, "[node1]:2223 " + a));
}

TEST(KnownHostsIndex, EmptyAndCommentOnlyFilesHandNothing) {
  EXPECT_EQ(KnownHostsIndex("").lines_for("h", 22), "");
  EXPECT_EQ(KnownHostsIndex("# nothing\n\n").lines_for("h", 22), "");
  EXPECT_EQ(KnownHostsIndex("h ssh-ed25519 AAAA").lines_for("h", 22), "h ssh-ed25519 AAAA\n");
}

}  // namespace
}  // namespace msrun_ssh
