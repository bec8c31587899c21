// OpenSSH's answer for a host's settings (ssh_config.h): `ssh -G`'s text parsed, the tokens of
// IdentityFile, ProxyJump as OpenSSH turns it into a command, and the real `ssh -G` asked through
// resolve_with_openssh (the ssh client is one of the build's packages).
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/ssh_config.h"

namespace msrun_ssh {
namespace {

TEST(OpensshConfig, ParsesWhatSshGPrints) {
  SshHostConfig c = parse_ssh_g(
      "user bob\nhostname 198.18.1.11\nport 2222\nidentityfile ~/.ssh/id_b\n"
      "identityfile /keys/%h-%r\nidentitiesonly yes\nproxyjump a@j1:2200,j2\n"
      "userknownhostsfile /root/.ssh/k1 /tmp/k2\nglobalknownhostsfile /etc/ssh/ssh_known_hosts\n"
      "hostkeyalias node-alias\nhashknownhosts yes\nstricthostkeychecking accept-new\n"
      "connecttimeout 2\nserveraliveinterval 15\nserveralivecountmax 4\nsendenv LANG\n");
  EXPECT_EQ(c.user, "bob");
  EXPECT_EQ(c.hostname, "198.18.1.11");
  EXPECT_EQ(c.port, 2222);
  EXPECT_EQ(c.identity_files, (std::vector<std::string>{"~/.ssh/id_b", "/keys/%h-%r"}));
  EXPECT_TRUE(c.identities_only);
  EXPECT_EQ(c.proxy_jump, "a@j1:2200,j2");
  EXPECT_EQ(c.user_known_hosts_files, (std::vector<std::string>{"/root/.ssh/k1", "/tmp/k2"}));
  EXPECT_EQ(c.global_known_hosts_files, (std::vector<std::string>{"/etc/ssh/ssh_known_hosts"}));
  EXPECT_EQ(c.host_key_alias, "node-alias");
  EXPECT_TRUE(c.hash_known_hosts);
  EXPECT_EQ(c.strict_host_key_checking, HostKeyPolicy::kAcceptNew);
  EXPECT_EQ(c.connect_timeout_s, 2);
  EXPECT_EQ(c.server_alive_interval_s, 15);
  EXPECT_EQ(c.server_alive_count_max, 4);
}

// The nodes under one Host block differ only in HostName: they share one copy of the rest.
TEST(OpensshConfig, HostsThatDifferOnlyInHostNameShareTheirSettings) {
  SshHostConfig a;
  a.hostname = "node1";
  a.user = "me";
  a.identity_files = {"~/.ssh/id_ed25519", "~/.ssh/id_rsa"};
  SshHostConfig b = a;
  b.hostname = "node2";
  SshHostConfig c = a;
  c.hostname = "node3";
  c.user = "other";
  HostConfigSharer sharer;
  SharedHostConfig sa = sharer.share(a), sb = sharer.share(b), sc = sharer.share(c);
  EXPECT_EQ(sa.shared, sb.shared);
  EXPECT_NE(sa.shared, sc.shared);
  EXPECT_EQ(sa.shared->hostname, "");
  EXPECT_EQ(sa.whole(), a);
  EXPECT_EQ(sb.whole(), b);
  EXPECT_EQ(sc.whole(), c);
  EXPECT_EQ(sharer.share(b).shared, sa.shared);  // an earlier one is still found
}

TEST(OpensshConfig, StrictnessNoneAndAsk) {
  auto strict = [](const char* v) {
    return parse_ssh_g(std::string("hostname h\nstricthostkeychecking ") + v + "\n")
        .strict_host_key_checking;
  };
  EXPECT_EQ(strict("true"), HostKeyPolicy::kYes);
  EXPECT_EQ(strict("false"), HostKeyPolicy::kNo);
  EXPECT_EQ(strict("ask"), HostKeyPolicy::kYes);  // nobody to ask: refused
  SshHostConfig none = parse_ssh_g(
      "hostname h\nproxyjump none\nproxycommand none\n"
      "hostkeyalias none\nconnecttimeout none\n");
  EXPECT_EQ(none.proxy_jump, "");
  EXPECT_EQ(none.proxy_command, "");
  EXPECT_EQ(none.host_key_alias, "");
  EXPECT_FALSE(none.connect_timeout_s);
}

TEST(OpensshConfig, RefusesWhatItCannotRead) {
  EXPECT_THROW(parse_ssh_g("port\n"), std::runtime_error);
  EXPECT_THROW(parse_ssh_g("hostname h\nport 0\n"), std::runtime_error);
  EXPECT_THROW(parse_ssh_g("hostname h\nport x\n"), std::runtime_error);
  EXPECT_THROW(parse_ssh_g("hostname h\nidentitiesonly maybe\n"), std::runtime_error);
  EXPECT_THROW(parse_ssh_g("user u\n"), std::runtime_error);  // no hostname
}

TEST(OpensshConfig, Tokens) {
  SshHostConfig h;
  h.hostname = "198.18.1.10";
  h.port = 2200;
  h.user = "bob";
  SshTokens t{"/home/me", "me", "1000", "launch.example.org", "node0", &h};
  EXPECT_EQ(expand_ssh_tokens("~/.ssh/id_%h_%p_%r", t), "/home/me/.ssh/id_198.18.1.10_2200_bob");
  // %k without a HostKeyAlias is the name as given (ssh's command line), not the HostName.
  EXPECT_EQ(expand_ssh_tokens("%d/%u/%i/%l/%L/%n/%k/100%%", t),
            "/home/me/me/1000/launch.example.org/launch/node0/node0/100%");
  h.host_key_alias = "alias";
  EXPECT_EQ(expand_ssh_tokens("%k", t), "alias");
  EXPECT_EQ(expand_ssh_tokens("/a~/b", t), "/a~/b");
  EXPECT_THROW(expand_ssh_tokens("%x", t), std::runtime_error);
  EXPECT_THROW(expand_ssh_tokens("id%", t), std::runtime_error);
  // Settings shared by several hosts (SharedHostConfig) carry no HostName: the host's own comes
  // beside them, for %h.
  std::string own = "198.18.1.11";
  SshHostConfig shared = h;
  shared.hostname.clear();
  shared.host_key_alias.clear();
  t.host = &shared;
  t.hostname = &own;
  EXPECT_EQ(expand_ssh_tokens("%h:%p/%k", t), "198.18.1.11:2200/node0");
  // ~user and ${NAME}, which ssh -G leaves in an IdentityFile for ssh to expand.
  const passwd* pw = ::getpwuid(::getuid());
  ASSERT_TRUE(pw);
  EXPECT_EQ(expand_ssh_tokens(std::string("~") + pw->pw_name + "/.ssh/id", t),
            std::string(pw->pw_dir) + "/.ssh/id");
  ::setenv("MSRUN_SSH_TEST_KEYS", "/keys", 1);
  EXPECT_EQ(expand_ssh_tokens("${MSRUN_SSH_TEST_KEYS}/id_%h", t), "/keys/id_198.18.1.11");
  ::unsetenv("MSRUN_SSH_TEST_KEYS");
  EXPECT_THROW(expand_ssh_tokens("${MSRUN_SSH_TEST_KEYS}/id", t), std::runtime_error);
  EXPECT_THROW(expand_ssh_tokens("${X/id", t), std::runtime_error);
  EXPECT_THROW(expand_ssh_tokens("~no-such-user-here/id", t), std::runtime_error);
}

TEST(OpensshConfig, ProxyJumpAsOpensshRunsIt) {
  // The last hop is the one ssh connects to, through the ones before it, in their order.
  EXPECT_EQ(proxy_jump_command("j1", ""), "ssh -o BatchMode=yes -W '[%h]:%p' 'j1'");
  EXPECT_EQ(proxy_jump_command("a@j1:2200,b@j2:2201", "/cfg"),
            "ssh -o BatchMode=yes -l 'b' -p 2201 -J 'a@j1:2200' -F '/cfg' -W '[%h]:%p' 'j2'");
  EXPECT_EQ(proxy_jump_command("j1,j2,j3", "/c f"),
            "ssh -o BatchMode=yes -J 'j1,j2' -F '/c f' -W '[%h]:%p' 'j3'");
  EXPECT_EQ(proxy_jump_command("j1", "/cfg", "/proc/7/fd/9"),
            "ssh -o BatchMode=yes -E '/proc/7/fd/9' -o LogLevel=INFO -F '/cfg' -W '[%h]:%p' 'j1'");
  EXPECT_THROW(proxy_jump_command("j1,", ""), std::runtime_error);
  EXPECT_THROW(proxy_jump_command("a b", ""), std::runtime_error);
  EXPECT_THROW(proxy_jump_command("j1:port", ""), std::runtime_error);
  // ssh -G brackets an address; ssh would keep the brackets in a host argument.
  EXPECT_EQ(proxy_jump_command("[127.0.0.3]", ""), "ssh -o BatchMode=yes -W '[%h]:%p' '127.0.0.3'");
  EXPECT_EQ(proxy_jump_command("bob@[198.18.7.3]:2222", ""),
            "ssh -o BatchMode=yes -l 'bob' -p 2222 -W '[%h]:%p' '198.18.7.3'");
  EXPECT_EQ(proxy_jump_command("j1,ops@[::1]:1", ""),
            "ssh -o BatchMode=yes -l 'ops' -p 1 -J 'j1' -W '[%h]:%p' '::1'");
  EXPECT_THROW(proxy_jump_command("[::1", ""), std::runtime_error);
  EXPECT_THROW(proxy_jump_command("[::1]x", ""), std::runtime_error);
}

// ProxyCommand's tokens as ssh expands them (libssh knows no %n), each '%' then doubled for libssh.
TEST(OpensshConfig, ProxyCommandTokensAsSshExpandsThem) {
  EXPECT_EQ(
      proxy_command_for_libssh("pc n=%n h=%h p=%p r=%r pct=%%", "10.0.0.1", 2200, "ops", "p1"),
      "pc n=p1 h=10.0.0.1 p=2200 r=ops pct=%%");
  EXPECT_EQ(proxy_command_for_libssh("nc %h %p", "fe80::1%eth0", 22, "u", "x"),
            "nc fe80::1%%eth0 22");
  EXPECT_EQ(proxy_command_for_libssh("", "h", 22, "u", "x"), "");
  EXPECT_THROW(proxy_command_for_libssh("pc %d", "h", 22, "u", "x"), std::runtime_error);
  // %k: the HostKeyAlias, else the name as given, as ssh 9.2 expands it (it was refused).
  EXPECT_EQ(proxy_command_for_libssh("pc %k", "10.0.0.1", 22, "u", "node1"), "pc node1");
  EXPECT_EQ(proxy_command_for_libssh("pc %k", "10.0.0.1", 22, "u", "node1", "a%b"), "pc a%%b");
  EXPECT_THROW(proxy_command_for_libssh("pc %", "h", 22, "u", "x"), std::runtime_error);
}

// "none" is no file: ssh neither reads nor writes one (never a file named "none").
TEST(OpensshConfig, KnownHostsFileNoneIsNoFile) {
  SshHostConfig c = parse_ssh_g("hostname h\nuserknownhostsfile none\nglobalknownhostsfile none\n");
  EXPECT_TRUE(c.user_known_hosts_files.empty());
  EXPECT_TRUE(c.global_known_hosts_files.empty());
}

// IdentityAgent as ssh uses it: ssh -G expands ${NAME} but leaves the older "$NAME" form, which ssh
// reads from its environment (no agent when it is unset), as it does SSH_AUTH_SOCK.
TEST(OpensshConfig, IdentityAgentAsSshFindsTheSocket) {
  std::map<std::string, std::string> env{{"SSH_AUTH_SOCK", "/run/a.sock"}, {"MYSOCK", "/m.sock"}};
  auto getenv_fn = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  using Socket = std::optional<std::string>;
  EXPECT_EQ(identity_agent_socket("", getenv_fn), Socket(""));  // libssh reads SSH_AUTH_SOCK
  EXPECT_EQ(identity_agent_socket("SSH_AUTH_SOCK", getenv_fn), Socket(""));
  EXPECT_EQ(identity_agent_socket("$SSH_AUTH_SOCK", getenv_fn), Socket(""));
  EXPECT_EQ(identity_agent_socket("$MYSOCK", getenv_fn), Socket("/m.sock"));
  EXPECT_EQ(identity_agent_socket("$UNSET_SOCK", getenv_fn), std::nullopt);
  EXPECT_EQ(identity_agent_socket("none", getenv_fn), std::nullopt);
  EXPECT_EQ(identity_agent_socket("/p/agent.sock", getenv_fn), Socket("/p/agent.sock"));
  env.erase("SSH_AUTH_SOCK");
  EXPECT_EQ(identity_agent_socket("", getenv_fn), std::nullopt);
}

// The command said to the user reaches what the launcher reaches: the host file's values as ssh's
// options, words the shell would split or expand quoted, the name after `--`.
TEST(OpensshConfig, TheCommandSaidToTheUserCarriesTheHostFilesValues) {
  EXPECT_EQ(ssh_command_line({"node0", "", {}, "", ""}, "", {}, "true"), "ssh -- node0 true");
  EXPECT_EQ(ssh_command_line({"node0", "u", 2200, "/k/id", "/my known"}, "/c/cfg",
                             {"-o", "BatchMode=no"}, "true"),
            "ssh -o BatchMode=no -F /c/cfg -l u -p 2200 -i /k/id -o "
            "'UserKnownHostsFile=/my known' -- node0 true");
  EXPECT_EQ(ssh_command_line({"n$x", "", {}, "", ""}, "it's", {}, "true"),
            "ssh -F 'it'\\''s' -- 'n$x' true");
}

TEST(OpensshConfig, TheQuestionGivesTheHostFilesValuesAsSshsOptions) {
  EXPECT_EQ(ssh_g_command({"node0", "", {}, "", ""}, ""),
            (std::vector<std::string>{"ssh", "-G", "-o", "BatchMode=no", "--", "node0"}));
  EXPECT_EQ(
      ssh_g_command({"node0", "u", 2200, "/k", "/kh"}, "/cfg"),
      (std::vector<std::string>{"ssh", "-G", "-o", "BatchMode=no", "-F", "/cfg", "-l", "u", "-p",
                                "2200", "-o", "UserKnownHostsFile=/kh", "--", "node0"}));
}

TEST(OpensshConfig, KnownHostsNamesAsSshWritesThem) {
  EXPECT_EQ(known_hosts_name("Node0", 22), "node0");
  EXPECT_EQ(known_hosts_name("Node0", 2200), "[node0]:2200");
  std::string hashed = hash_known_hosts_name("[node0]:2200");
  ASSERT_EQ(hashed.rfind("|1|", 0), 0u);
  // The index finds a hashed name under the name it hashes, and nothing else.
  KnownHostsIndex index(hashed + " ssh-ed25519 AAAAkey\n");
  EXPECT_EQ(index.lines_for("node0", 2200), hashed + " ssh-ed25519 AAAAkey\n");
  EXPECT_EQ(index.lines_for("node0", 22), "");
  EXPECT_EQ(renamed_known_hosts_lines("alias ssh-ed25519 K c\n@revoked alias ssh-rsa R\n", "h"),
            "h ssh-ed25519 K c\n@revoked h ssh-rsa R\n");
  // Under an alias: the lines naming it and the pattern lines matching it, as ssh matches them.
  KnownHostsIndex mixed(
      "* ssh-ed25519 W\nalias ssh-ed25519 K\nother ssh-ed25519 O\n!alias,a* x Y\n");
  EXPECT_EQ(mixed.lines_for("alias", 22, true), "* ssh-ed25519 W\nalias ssh-ed25519 K\n");
}

// The user's name and a path as seen from their home, for "Include ~user/PATH".
std::string user_name() {
  const passwd* pw = ::getpwuid(::getuid());
  return pw ? pw->pw_name : "";
}
std::string from_home(const std::filesystem::path& p) {
  const passwd* pw = ::getpwuid(::getuid());
  return std::filesystem::relative(p, pw ? pw->pw_dir : "/").string();
}

class RealSshG : public ::testing::Test {
 protected:
  RealSshG() {
    dir_ = std::filesystem::temp_directory_path() / ("msrun-ssh-sshg-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    config_ = (dir_ / "config").string();
    std::ofstream(config_) << "Host Upper\n  HostName 198.18.7.1\n  Port 2201\n"
                              "Match originalhost m1\n  HostName 198.18.7.2\n  User bob\n"
                              "Host j*\n  ProxyJump a@jump1:2200,jump2\n  IdentityFile /k/a\n"
                              "  IdentityFile /k/b\n  ConnectTimeout 3\n"
                              "Host *\n  StrictHostKeyChecking accept-new\n";
  }
  ~RealSshG() override {
    restore_path();
    std::filesystem::remove_all(dir_);
  }
  // Puts a stand-in `ssh` first on PATH that counts its runs, then runs the real one.
  void count_ssh_runs() {
    std::filesystem::create_directories(dir_ / "bin");
    std::ofstream(dir_ / "bin" / "ssh")
        << "#!/bin/sh\necho x >> " << (dir_ / "count").string() << "\nexec /usr/bin/ssh \"$@\"\n";
    std::filesystem::permissions(dir_ / "bin" / "ssh", std::filesystem::perms::owner_all);
    saved_path_ = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
    ::setenv("PATH", ((dir_ / "bin").string() + ":" + *saved_path_).c_str(), 1);
  }
  // How many times the stand-in `ssh` ran so far.
  long runs() const {
    return std::count(std::istreambuf_iterator<char>(std::ifstream(dir_ / "count").rdbuf()), {},
                      '\n');
  }
  void restore_path() {
    if (saved_path_) ::setenv("PATH", saved_path_->c_str(), 1);
    saved_path_.reset();
  }
  std::filesystem::path dir_;
  std::string config_;
  std::optional<std::string> saved_path_;
};

TEST_F(RealSshG, AsksSshOncePerNameAndKeepsItsAnswers) {
  std::vector<SshQuery> q{{"Upper", "", {}, "", ""},
                          {"upper", "", {}, "", ""},
                          {"m1", "", {}, "", ""},
                          {"jx", "carol", 2222, "/k/c", ""},
                          {"Upper", "", {}, "", ""}};
  auto answers = resolve_with_openssh(q, config_, 4, 10);
  ASSERT_TRUE(answers) << "no ssh client on PATH";
  ASSERT_EQ(answers->size(), q.size());
  for (const auto& a : *answers) ASSERT_TRUE(a.config) << a.error;
  EXPECT_EQ((*answers)[0].config->hostname, "198.18.7.1");  // Host patterns are case-sensitive
  EXPECT_EQ((*answers)[0].config->port, 2201);
  EXPECT_EQ((*answers)[1].config->hostname, "upper");
  EXPECT_EQ((*answers)[1].config->port, 22);
  EXPECT_EQ((*answers)[2].config->hostname, "198.18.7.2");  // Match originalhost
  EXPECT_EQ((*answers)[2].config->user, "bob");
  const SshHostConfig& j = *(*answers)[3].config;
  EXPECT_EQ(j.user, "carol");  // the host file's values win, as ssh's -l, -p and -i do
  EXPECT_EQ(j.port, 2222);
  EXPECT_EQ(j.identity_files, (std::vector<std::string>{"/k/c", "/k/a", "/k/b"}));
  EXPECT_EQ(j.proxy_jump, "a@jump1:2200,jump2");
  EXPECT_EQ(j.connect_timeout_s, 3);
  EXPECT_EQ(j.strict_host_key_checking, HostKeyPolicy::kAcceptNew);
  EXPECT_EQ((*answers)[4].config->hostname, "198.18.7.1");
}

// The plan and the pool ask the same questions: the second asking runs no `ssh -G`, and a config
// rewritten in between is asked anew. A stand-in `ssh` first on PATH counts the runs.
TEST_F(RealSshG, AnAnswerIsAskedOncePerRunAndAgainWhenTheConfigChanges) {
  count_ssh_runs();
  const std::string config = (dir_ / "cached").string();
  std::ofstream(config) << "Match host *\n  Port 2201\n";
  std::vector<SshQuery> q{{"c1", "", {}, "", ""}, {"c2", "", {}, "", ""}};
  auto first = resolve_with_openssh(q, config, 2, 10);
  long after_first = runs();
  auto second = resolve_with_openssh(q, config, 2, 10);
  long after_second = runs();
  std::ofstream(config) << "Match host *\n  Port 2202\n";  // the same length, another text
  auto third = resolve_with_openssh(q, config, 2, 10);
  long after_third = runs();
  restore_path();
  ASSERT_TRUE(first && second && third);
  // The first name of the group, and the second to check that the first's answer stands for it.
  EXPECT_EQ(after_first, 2) << "a Match host line of patterns: the names asked once";
  EXPECT_EQ(after_second, 2) << "asked again";
  EXPECT_EQ(after_third, 4) << "the rewritten config was not asked";
  ASSERT_TRUE((*second)[1].config && (*third)[1].config);
  EXPECT_EQ((*second)[1].config->port, 2201);
  EXPECT_EQ((*third)[1].config->port, 2202);
}

// Match user, localuser and an exec that does not name the host answer alike for every name of
// the same Host lines: of 3 names, 2 are asked (the second checks that the first's answer stands
// for the others); an exec naming the host (%h) asks each name.
TEST_F(RealSshG, UserAndExecMatchesAskOncePerHostLinesAndAnExecNamingTheHostEachName) {
  count_ssh_runs();
  const std::string config = (dir_ / "user-exec").string();
  std::ofstream(config) << "Match user root localuser * exec \"true %r\"\n  Port 2201\n";
  std::vector<SshQuery> q{{"u1", "", {}, "", ""}, {"u2", "", {}, "", ""}, {"u3", "", {}, "", ""}};
  auto grouped = resolve_with_openssh(q, config, 2, 10);
  long after_grouped = runs();
  const std::string per_name = (dir_ / "exec-h").string();
  std::ofstream(per_name) << "Match exec \"true %h\"\n  Port 2202\n";
  auto each = resolve_with_openssh(q, per_name, 2, 10);
  long after_each = runs();
  restore_path();
  ASSERT_TRUE(grouped && each);
  EXPECT_EQ(after_grouped, 2) << "Match user/localuser/exec without the host: asked once (and "
                                 "a second name, to check the first stands for it)";
  EXPECT_EQ(after_each - after_grouped, 3) << "an exec naming the host: asked per name";
  for (size_t i = 0; i < q.size(); ++i) {
    ASSERT_TRUE((*grouped)[i].config && (*each)[i].config);
    EXPECT_EQ((*grouped)[i].config->hostname, q[i].name);
    EXPECT_EQ((*grouped)[i].config->port, getuid() == 0 ? 2201 : 22);
    EXPECT_EQ((*each)[i].config->port, 2202);
  }
}

std::optional<SshHostConfig> ask_ssh_alone(const SshQuery& q, const std::string& config);

// %C as ssh itself expands it: ssh -G expands a UserKnownHostsFile's tokens (not an
// IdentityFile's, which msrun-ssh expands), so the two can be compared.
TEST_F(RealSshG, PercentCIsWhatSshMakesOfIt) {
  const std::string config = (dir_ / "percent-c").string();
  std::ofstream(config) << "Host *\n  UserKnownHostsFile /kh/%C\n";
  char local[256] = {};
  ASSERT_EQ(gethostname(local, sizeof local - 1), 0);
  for (const SshQuery& q :
       std::vector<SshQuery>{{"node1", "", {}, "", ""}, {"Upper.Example", "bob", 2222, "", ""}}) {
    std::optional<SshHostConfig> ssh = ask_ssh_alone(q, config);
    ASSERT_TRUE(ssh && ssh->user_known_hosts_files.size() == 1u) << q.name;
    SshTokens t{"/home/me", "me", "1000", local, q.name, &*ssh};
    EXPECT_EQ(expand_ssh_tokens("/kh/%C", t), ssh->user_known_hosts_files[0]) << q.name;
  }
}

// A config's BatchMode yes (scripts' configs say it) gives no ServerAlive limit of its own, though
// Debian's `ssh -G` then answers ServerAliveInterval 300 (3 x 300 s: a lost host found after a
// quarter of an hour); one the config sets is kept, with BatchMode yes or not.
TEST_F(RealSshG, ServerAliveIsWhatTheConfigSetsNotBatchModesDefault) {
  std::string config = (dir_ / "batch").string();
  std::ofstream(config) << "Host quiet\n  BatchMode yes\n"
                           "Host set\n  BatchMode yes\n  ServerAliveInterval 300\n"
                           "  ServerAliveCountMax 2\n"
                           "Host plain\n  ServerAliveInterval 7\n";
  auto answers = resolve_with_openssh(
      {{"quiet", "", {}, "", ""}, {"set", "", {}, "", ""}, {"plain", "", {}, "", ""}}, config, 2,
      10);
  ASSERT_TRUE(answers) << "no ssh client on PATH";
  for (const auto& a : *answers) ASSERT_TRUE(a.config) << a.error;
  EXPECT_EQ((*answers)[0].config->server_alive_interval_s, 0);
  EXPECT_EQ((*answers)[1].config->server_alive_interval_s, 300);
  EXPECT_EQ((*answers)[1].config->server_alive_count_max, 2);
  EXPECT_EQ((*answers)[2].config->server_alive_interval_s, 7);
}

TEST_F(RealSshG, AnUnreadableConfigIsAnErrorOfItsHost) {
  auto answers = resolve_with_openssh({{"node0", "", {}, "", ""}}, config_ + ".missing", 1, 10);
  ASSERT_TRUE(answers);
  EXPECT_FALSE(answers->front().config);
  EXPECT_NE(answers->front().error.find(".missing"), std::string::npos) << answers->front().error;
}

// ssh's own message, in its words and without the \r of its line ends (they showed as \x0d).
TEST_F(RealSshG, SshsMessageAboutABadConfigLineIsItsOwnWords) {
  const std::string config = (dir_ / "bogus").string();
  std::ofstream(config) << "BogusOption yes\n";
  auto answers = resolve_with_openssh({{"node0", "", {}, "", ""}}, config, 1, 10);
  ASSERT_TRUE(answers);
  EXPECT_FALSE(answers->front().config);
  EXPECT_EQ(answers->front().error, config + ": line 1: Bad configuration option: bogusoption\n" +
                                        config + ": terminating, 1 bad configuration options");
}

// ssh itself asked for one query, past resolve_with_openssh (and its answers kept for the run):
// a missing host file's identity first, as resolve_with_openssh puts it.
std::optional<SshHostConfig> ask_ssh_alone(const SshQuery& q, const std::string& config) {
  std::string command;
  for (const auto& word : ssh_g_command(q, config)) command += shell_quote(word) + " ";
  FILE* p = ::popen((command + "2>/dev/null").c_str(), "r");
  if (!p) return std::nullopt;
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  if (::pclose(p) != 0) return std::nullopt;
  SshHostConfig c = parse_ssh_g(text);
  if (!q.identity_file.empty() && !identity_file_exists(q.identity_file))
    c.identity_files.insert(c.identity_files.begin(), q.identity_file);
  return c;
}

// The shortcut (names of the same Host lines asked once) against ssh itself asked for every name:
// a corpus of configs and names, and not one field may differ.
// The host file's identity file is ssh's -i: with it, ssh's default files are not offered (ssh
// -G -i lists the file and the config's own, no default); a missing one leaves them, as ssh does.
TEST_F(RealSshG, TheHostFilesIdentityFileStandsInPlaceOfSshsDefaults) {
  const std::string config = (dir_ / "identity").string();
  std::ofstream(config) << "Host withfile\n  IdentityFile /k/cfg\n";
  const std::string key = (dir_ / "key").string();
  std::ofstream(key) << "not read\n";
  auto answers = resolve_with_openssh({{"plain", "", {}, key, ""},
                                       {"withfile", "", {}, key, ""},
                                       {"plain2", "", {}, "", ""},
                                       {"missing", "", {}, "/no/such/key", ""}},
                                      config, 2, 10);
  ASSERT_TRUE(answers) << "no ssh client on PATH";
  for (const auto& a : *answers) ASSERT_TRUE(a.config) << a.error;
  EXPECT_EQ((*answers)[0].config->identity_files, std::vector<std::string>{key});
  EXPECT_EQ((*answers)[1].config->identity_files, (std::vector<std::string>{key, "/k/cfg"}));
  const auto& defaults = (*answers)[2].config->identity_files;
  EXPECT_GT(defaults.size(), 1u) << "ssh's default files without an identity file";
  std::vector<std::string> missing{"/no/such/key"};
  missing.insert(missing.end(), defaults.begin(), defaults.end());
  EXPECT_EQ((*answers)[3].config->identity_files, missing);
}

TEST_F(RealSshG, NamesAskedOnceForTheirHostLinesGetWhatSshGivesEachOfThem) {
  std::ofstream(dir_ / "included") << "Host inc*\n  Port 2300\n  User inc\n";
  const std::vector<std::string> configs{
      "",
      "Host node*\n  User u\n  Port 2200\nHost node1\n  HostName 10.0.0.1\n"
      "Host *\n  IdentityFile ~/.ssh/id_%h\n  IdentityFile /k/fixed\n",
      "Host a b !c* x?y\n  User ab\nHost *\n  StrictHostKeyChecking accept-new\n",
      "Host node*\n  HostName %h.example.com\n",
      "Host node*\n  User m\nMatch originalhost node2\n  Port 2222\n",
      "Include " + (dir_ / "included").string() + "\nHost *\n  ConnectTimeout 4\n",
      "Host *\n  UserKnownHostsFile ~/.ssh/kh_%h /tmp/kh\n",
      "Host Node1\n  HostName 10.9.9.9\nHost node?\n  ProxyJump j1,j2\n",
      "Host node1 node2\n  HostName 10.1.1.1\n  HostKeyAlias shared\n",
      "Host *\n  CanonicalizeHostname yes\n",
      "Host = node2\n  Port=2400\n",
      "Host node* !node2\n  User neg\n",
      "Match host node1,!node2\n  Port 2300\nMatch all\n  User z\n",
      "Match originalhost node?,a host !node2\n  User mo\nHost *\n  Port 2301\n",
      "Host node1\n  HostName 10.2.2.2\nMatch host 10.*\n  Port 2302\n",
      "Match host Node1\n  Port 2303\nMatch OriginalHost n*\n  User cap\n",
      "Match exec true\n  Port 2304\n",
      "Host node1\n  User alice\nMatch user alice\n  Port 2305\n",
      "Match user root,alice\n  Port 2306\nMatch localuser root\n  User lu\n",
      "Match exec \"test %h = node1\"\n  Port 2307\n",
      "Match exec \"test %n = node2\"\n  Port 2308\n",
      "Match exec \"test %r = root\" host node*\n  Port 2309\n",
      "Match host node1 user other\n  Port 2310\n",
      "Match !user root\n  Port 2311\n",
      "Host node2\n  Port 2312\nMatch exec \"test %p = 2312\"\n  User p\n",
      // A HostName fixed to the first name asked, values hashed from the name (%C), a comment
      // on a Host line, an Include under ~user (review of 2026-12-05).
      "Host *\n  HostName node1\n  Port 2313\n",
      "Host node*\n  UserKnownHostsFile /tmp/kh_%C\n  IdentityAgent /tmp/ag_%C\n",
      "Host node1 # was node2 until the move\n  Port 2314\n",
      "Include ~" + user_name() + "/" + from_home(dir_ / "included") + "\nHost *\n  Port 2315\n",
      "Host *\n  UserKnownHostsFile none\n  GlobalKnownHostsFile none\n",
      "Host node1\n  UserKnownHostsFile /tmp/kh%%h\n",
      // Single quotes, which ssh strips as it strips double ones; numeric addresses that ssh
      // writes otherwise (review of 2026-12-07).
      "Host 'node*'\n  User q\nHost *\n  User alice\n",
      "Include '" + (dir_ / "included").string() + "'\nHost *\n  User w\n",
      "Host 198.18.*\n  User n\n",
  };
  const std::vector<std::string> names{
      "node1",        "node2",      "node10",     "Node1",   "a",           "b",    "c",
      "cx",           "xay",        "inc1",       "inc2",    "198.18.1.10", "10.1", "198.18.1.10",
      "198.18.1.010", "198.18.0.1", "FE80::0001", "fe80::1", "FE80::1"};
  for (size_t i = 0; i < configs.size(); ++i) {
    std::string config = (dir_ / ("corpus" + std::to_string(i))).string();
    std::ofstream(config) << configs[i];
    std::vector<SshQuery> queries;
    for (const auto& n : names) queries.push_back({n, "", {}, "", ""});
    queries.push_back({"node1", "other", 2500, "/k/id", "/kh"});
    auto together = resolve_with_openssh(queries, config, 4, 10);
    ASSERT_TRUE(together);
    for (size_t q = 0; q < queries.size(); ++q) {
      std::optional<SshHostConfig> alone = ask_ssh_alone(queries[q], config);
      const SshResolution& a = (*together)[q];
      std::string where = "config " + std::to_string(i) + ", " + queries[q].name;
      ASSERT_TRUE(a.config && alone) << where << ": " << a.error;
      const SshHostConfig &x = *a.config, &y = *alone;
      EXPECT_EQ(x.hostname, y.hostname) << where;
      EXPECT_EQ(x.port, y.port) << where;
      EXPECT_EQ(x.user, y.user) << where;
      EXPECT_EQ(x.identity_files, y.identity_files) << where;
      EXPECT_EQ(x.identities_only, y.identities_only) << where;
      EXPECT_EQ(x.identity_agent, y.identity_agent) << where;
      EXPECT_EQ(x.proxy_jump, y.proxy_jump) << where;
      EXPECT_EQ(x.proxy_command, y.proxy_command) << where;
      EXPECT_EQ(x.user_known_hosts_files, y.user_known_hosts_files) << where;
      EXPECT_EQ(x.global_known_hosts_files, y.global_known_hosts_files) << where;
      EXPECT_EQ(x.host_key_alias, y.host_key_alias) << where;
      EXPECT_EQ(x.hash_known_hosts, y.hash_known_hosts) << where;
      EXPECT_EQ(x.strict_host_key_checking, y.strict_host_key_checking) << where;
      EXPECT_EQ(x.connect_timeout_s, y.connect_timeout_s) << where;
      EXPECT_EQ(x.canonicalize_hostname, y.canonicalize_hostname) << where;
    }
  }
}

}  // namespace
}  // namespace msrun_ssh
