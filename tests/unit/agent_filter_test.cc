// The agent filter (src/ssh/agent_filter.cc): the answer to a request for keys put in ssh's order
// (the listed ones first, the others only without IdentitiesOnly); every other request and answer
// passed through as it is; against a stand-in agent on a Unix socket that answers the way
// ssh-agent frames its messages.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/ssh.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

std::string u32(uint32_t v) {
  std::string s;
  for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xff);
  return s;
}

std::string str(const std::string& s) { return u32(static_cast<uint32_t>(s.size())) + s; }

std::string frame(const std::string& body) { return str(body); }

// An identities answer's body listing `keys` (blob, comment).
std::string answer(const std::vector<std::pair<std::string, std::string>>& keys) {
  std::string body(1, '\x0c');
  body += u32(static_cast<uint32_t>(keys.size()));
  for (const auto& [blob, comment] : keys) body += str(blob) + str(comment);
  return body;
}

// One whole message from `fd` (its body), waiting at most 5 s; "" when it ended first.
std::string read_message(int fd) {
  std::string buf;
  auto need = [&]() -> size_t {
    if (buf.size() < 4) return 4;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<uint8_t>(buf[i]);
    return 4 + n;
  };
  while (buf.size() < need()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return "";
    char chunk[65536];
    ssize_t n = ::read(fd, chunk, std::min(sizeof chunk, need() - buf.size()));
    if (n <= 0) return "";
    buf.append(chunk, static_cast<size_t>(n));
  }
  return buf.substr(4);
}

// A stand-in agent listening at `path`: each connection is answered, in a thread of its own,
// until it ends (or 5 s pass without a request); a request for keys gets `keys`, any other
// request the answer 14 followed by the request's body.
class StandInAgent {
 public:
  StandInAgent(std::string path, std::vector<std::pair<std::string, std::string>> keys)
      : path_(std::move(path)), keys_(std::move(keys)) {
    listen_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_, 8), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~StandInAgent() {
    ::shutdown(listen_, SHUT_RDWR);
    thread_.join();
    ::close(listen_);
    ::unlink(path_.c_str());
  }
  int connections() const { return connections_; }

 private:
  void serve() {
    std::vector<std::thread> served;
    while (true) {
      int fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) break;
      ++connections_;
      served.emplace_back([this, fd] {
        while (true) {
          std::string request = read_message(fd);
          if (request.empty()) break;
          std::string reply =
              request[0] == '\x0b' ? answer(keys_) : std::string(1, '\x0e') + request;
          if (::write(fd, frame(reply).data(), frame(reply).size()) < 0) break;
        }
        ::close(fd);
      });
    }
    for (auto& t : served) t.join();
  }

  std::string path_;
  std::vector<std::pair<std::string, std::string>> keys_;
  int listen_ = -1;
  std::thread thread_;
  std::atomic<int> connections_ = 0;
};

// ssh's order (pubkey_prepare): the agent's keys of the listed files first, then the others
// unless IdentitiesOnly; each part in the agent's order.
TEST(AgentFilter, TheListedKeysComeFirstInTheAgentsOrderAndTheOthersOnlyWhenAsked) {
  std::string body = answer({{"key-a", "a@x"}, {"key-b", "b@x"}, {"key-c", "c@x"}});
  EXPECT_EQ(filter_agent_identities(body, {{"key-c", "key-a"}, false}),
            answer({{"key-a", "a@x"}, {"key-c", "c@x"}}));
  EXPECT_EQ(filter_agent_identities(body, {{"key-c", "key-a"}, true}),
            answer({{"key-a", "a@x"}, {"key-c", "c@x"}, {"key-b", "b@x"}}));
  EXPECT_EQ(filter_agent_identities(body, {{"key-c"}, true}),
            answer({{"key-c", "c@x"}, {"key-a", "a@x"}, {"key-b", "b@x"}}));
  EXPECT_EQ(filter_agent_identities(body, {{"key-z"}, false}), answer({}));
  EXPECT_EQ(filter_agent_identities(body, {{"key-z"}, true}), body);
  EXPECT_EQ(filter_agent_identities(body, {{}, false}), answer({}));
  // A blob listed twice (two IdentityFile lines of one key) is offered once.
  EXPECT_EQ(filter_agent_identities(body, {{"key-b", "key-a", "key-b"}, false}),
            answer({{"key-a", "a@x"}, {"key-b", "b@x"}}));
  // A key the agent lists twice: a listed one once, first; the others as the agent lists them.
  std::string twice = answer({{"key-a", "1"}, {"key-b", "2"}, {"key-a", "3"}, {"key-b", "4"}});
  EXPECT_EQ(filter_agent_identities(twice, {{"key-b"}, true}),
            answer({{"key-b", "2"}, {"key-a", "1"}, {"key-a", "3"}, {"key-b", "4"}}));
}

// The listed keys the agent holds, each once, as offered: ssh offers their files no more.
TEST(AgentFilter, TheListedKeysTheAgentHoldsAreToldEachOnce) {
  std::string body = answer({{"key-a", "1"}, {"key-b", "2"}, {"key-a", "3"}});
  std::vector<std::string> held = {"left from before"};
  ASSERT_TRUE(filter_agent_identities(body, {{"key-b", "key-z", "key-a", "key-b"}, false}, &held));
  EXPECT_EQ(held, (std::vector<std::string>{"key-a", "key-b"}));
  ASSERT_TRUE(filter_agent_identities(body, {{"key-z"}, true}, &held));
  EXPECT_TRUE(held.empty());
  AgentHeld h;
  EXPECT_FALSE(h.holds("key-a"));
  h.set({"key-a"});
  EXPECT_TRUE(h.holds("key-a"));
  EXPECT_FALSE(h.holds("key-b"));
}

// An ed25519 public key blob of the 32 bytes `pk`, and a certificate of it.
std::string ed25519(const std::string& pk) { return str("ssh-ed25519") + str(pk); }
std::string certificate_of(const std::string& pk, const std::string& nonce = "nonce") {
  return str("ssh-ed25519-cert-v01@openssh.com") + str(nonce) + str(pk) + u32(1) + str("rest");
}

// ssh 9.2's pubkey_prepare puts the CertificateFiles' certificates before every agent key, and
// signs each with the first key of its list that it certifies (sign_and_send_pubkey): under
// IdentitiesOnly an agent key no IdentityFile lists is not in that list, and signs nothing.
TEST(AgentFilter, ACertificateFileComesFirstWhereTheAgentHoldsItsKey) {
  std::string a = ed25519(std::string(32, 'a')), b = ed25519(std::string(32, 'b'));
  std::string cert_a = certificate_of(std::string(32, 'a')),
              cert_b = certificate_of(std::string(32, 'b')),
              cert_z = certificate_of(std::string(32, 'z'));
  std::string body = answer({{a, "a@x"}, {b, "b@x"}});
  std::vector<std::pair<std::string, std::string>> signers = {{"left", "from before"}};
  EXPECT_EQ(filter_agent_identities(body, {{b}, true, {cert_z, cert_a, cert_b}}, nullptr, &signers),
            answer({{cert_a, "a@x"}, {cert_b, "b@x"}, {b, "b@x"}, {a, "a@x"}}));
  EXPECT_EQ(signers, (std::vector<std::pair<std::string, std::string>>{{cert_a, a}, {cert_b, b}}));
  // IdentitiesOnly: `a` is not listed, so its certificate has no signer and is not shown.
  std::vector<std::string> held;
  EXPECT_EQ(filter_agent_identities(body, {{b}, false, {cert_a, cert_b}}, &held, &signers),
            answer({{cert_b, "b@x"}, {b, "b@x"}}));
  EXPECT_EQ(signers, (std::vector<std::pair<std::string, std::string>>{{cert_b, b}}));
  EXPECT_EQ(held, std::vector<std::string>{b}) << "a certificate shown is no listed key held";
  // A certificate the agent holds itself signs nothing: only its key does.
  std::string with_cert = answer({{cert_a, "cert"}});
  EXPECT_EQ(filter_agent_identities(
                with_cert, {{}, true, {certificate_of(std::string(32, 'a'), "another nonce")}}),
            with_cert);
}

TEST(AgentFilter, WhatIsNotAWellFormedAnswerIsLeftAsItCame) {
  std::string body = answer({{"key-a", "a@x"}});
  EXPECT_EQ(filter_agent_identities("", {{"key-a"}, true}), std::nullopt);
  EXPECT_EQ(filter_agent_identities("\x05", {{"key-a"}, true}), std::nullopt);  // SSH_AGENT_FAILURE
  EXPECT_EQ(filter_agent_identities(body.substr(0, body.size() - 1), {{"key-a"}, true}),
            std::nullopt);
  EXPECT_EQ(filter_agent_identities(body + "x", {{"key-a"}, true}), std::nullopt);
  // More keys announced than the answer holds.
  std::string lying = body;
  lying[4] = 9;
  EXPECT_EQ(filter_agent_identities(lying, {{"key-a"}, true}), std::nullopt);
}

TEST(AgentFilter, ASessionSeesTheKeysInSshsOrderAndSignsThroughTheAgent) {
  test::TempDir dir;
  std::string path = dir.path() + "/agent.sock";
  // A comment longer than one read, so that the answer comes in pieces.
  std::string long_comment(100000, 'c');
  StandInAgent agent(path, {{"key-a", "a@x"}, {"key-b", long_comment}, {"key-c", "c@x"}});
  AgentFilter filter;
  int fd = filter.open(path, {{"key-b", "key-a"}, false});
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string ask = frame("\x0b");
  ASSERT_EQ(::write(fd, ask.data(), ask.size()), static_cast<ssize_t>(ask.size()));
  EXPECT_EQ(read_message(fd), answer({{"key-a", "a@x"}, {"key-b", long_comment}}));
  // A signing request (13) and its answer pass unchanged, both ways.
  std::string sign(1, '\x0d');
  sign += str("key-b") + str("data to sign") + u32(0);
  std::string out = frame(sign);
  ASSERT_EQ(::write(fd, out.data(), out.size()), static_cast<ssize_t>(out.size()));
  EXPECT_EQ(read_message(fd), std::string(1, '\x0e') + sign);
  // Asked again, the keys are cut again; a second session has its own agent connection.
  ASSERT_EQ(::write(fd, ask.data(), ask.size()), static_cast<ssize_t>(ask.size()));
  EXPECT_EQ(read_message(fd), answer({{"key-a", "a@x"}, {"key-b", long_comment}}));
  // Which listed keys the agent holds is told before the session reads them.
  auto held = std::make_shared<AgentHeld>();
  int other = filter.open(path, {{"key-c", "key-z"}, true}, held);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::write(other, ask.data(), ask.size()), static_cast<ssize_t>(ask.size()));
  EXPECT_EQ(read_message(other),
            answer({{"key-c", "c@x"}, {"key-a", "a@x"}, {"key-b", long_comment}}));
  EXPECT_TRUE(held->holds("key-c"));
  EXPECT_FALSE(held->holds("key-z")) << "listed, not in the agent";
  EXPECT_FALSE(held->holds("key-a")) << "in the agent, not listed";
  EXPECT_EQ(agent.connections(), 2);
  ::close(other);
  // The filter's end closes with it: the session reads the end.
  {
    AgentFilter gone;
    int fd2 = gone.open(path, {{"key-a"}, false});
    ASSERT_GE(fd2, 0);
    ::close(fd);
    fd = fd2;
  }
  EXPECT_EQ(read_message(fd), "");
  ::close(fd);
}

// A signing request for a certificate the filter showed goes to the agent as one for the key it
// certifies, its data and flags as they came (the agent need not hold the certificate, as ssh
// signs it with the agent's copy of the key); any other passes as it came.
TEST(AgentFilter, ACertificateShownIsSignedByTheAgentsKey) {
  test::TempDir dir;
  std::string path = dir.path() + "/agent.sock";
  std::string a = ed25519(std::string(32, 'a')), cert_a = certificate_of(std::string(32, 'a'));
  StandInAgent agent(path, {{a, "a@x"}});
  AgentFilter filter;
  int fd = filter.open(path, {{}, true, {cert_a}});
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string ask = frame("\x0b");
  ASSERT_EQ(::write(fd, ask.data(), ask.size()), static_cast<ssize_t>(ask.size()));
  EXPECT_EQ(read_message(fd), answer({{cert_a, "a@x"}, {a, "a@x"}}));
  auto sign = [&](const std::string& key) {
    std::string request(1, '\x0d');
    request += str(key) + str("data to sign") + u32(2);
    std::string out = frame(request);
    EXPECT_EQ(::write(fd, out.data(), out.size()), static_cast<ssize_t>(out.size()));
    return read_message(fd);  // the stand-in answers 14 and the request it got
  };
  EXPECT_EQ(sign(cert_a), std::string("\x0e\x0d") + str(a) + str("data to sign") + u32(2));
  EXPECT_EQ(sign(a), std::string("\x0e\x0d") + str(a) + str("data to sign") + u32(2));
  std::string stranger = certificate_of(std::string(32, 'z'));
  EXPECT_EQ(sign(stranger), std::string("\x0e\x0d") + str(stranger) + str("data to sign") + u32(2));
  ::close(fd);
}

TEST(AgentFilter, AnAgentThatIsNotThereIsSaidAtOnce) {
  test::TempDir dir;
  AgentFilter filter;
  errno = 0;
  EXPECT_EQ(filter.open(dir.path() + "/no-agent.sock", {{"key-a"}, true}), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(filter.open("", {{"key-a"}, true}), -1);
  EXPECT_EQ(filter.open(std::string(200, 'x'), {{"key-a"}, true}), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
}

TEST(AgentFilter, AnOverlongRequestEndsTheSessionsSocket) {
  test::TempDir dir;
  std::string path = dir.path() + "/agent.sock";
  StandInAgent agent(path, {{"key-a", "a@x"}});
  AgentFilter filter;
  int fd = filter.open(path, {{"key-a"}, true});
  ASSERT_GE(fd, 0);
  std::string huge = u32(1u << 30) + "\x0b";
  ASSERT_EQ(::write(fd, huge.data(), huge.size()), static_cast<ssize_t>(huge.size()));
  EXPECT_EQ(read_message(fd), "");
  ::close(fd);
}

// The certified key's fields follow the certificate's type and nonce; the key's follow its type.
TEST(AgentFilter, ACertificateIsOfTheKeyWhoseFieldsItCarries) {
  std::string pk(32, 'k'), other(32, 'o');
  std::string key = str("ssh-ed25519") + str(pk);
  std::string cert = str("ssh-ed25519-cert-v01@openssh.com") + str("nonce") + str(pk) + u32(1) +
                     str("the certificate's other fields");
  EXPECT_TRUE(certificate_is_of(cert, key));
  EXPECT_FALSE(certificate_is_of(cert, str("ssh-ed25519") + str(other)));
  EXPECT_FALSE(certificate_is_of(key, key));  // not a certificate
  EXPECT_FALSE(certificate_is_of(cert.substr(0, 40), key));
  EXPECT_FALSE(certificate_is_of(cert, str("ssh-ed25519")));
}

// The key blob of a public key (or certificate) file ssh-keygen wrote: "TYPE BASE64 COMMENT".
std::string blob(const std::string& file) {
  std::string text = test::slurp(file);
  size_t a = text.find(' '), b = text.find(' ', a + 1);
  return decode_base64(text.substr(a + 1, b - a - 1)).value_or("");
}

// The same on the files ssh-keygen writes: a key, its certificate, and another key.
TEST(AgentFilter, ACertificateSshKeygenMadeIsOfItsKeyAndOfNoOther) {
  test::TempDir dir;
  const std::string& d = dir.path();
  for (const char* name : {"ca", "key", "other"})
    ASSERT_EQ(std::system(("ssh-keygen -q -t ed25519 -N '' -f " + d + "/" + name).c_str()), 0);
  ASSERT_EQ(
      std::system(("ssh-keygen -q -s " + d + "/ca -I test -n root " + d + "/key.pub").c_str()), 0);
  std::string cert = blob(d + "/key-cert.pub");
  ASSERT_FALSE(cert.empty());
  EXPECT_TRUE(certificate_is_of(cert, blob(d + "/key.pub")));
  EXPECT_FALSE(certificate_is_of(cert, blob(d + "/other.pub")));
  EXPECT_TRUE(user_certificate(cert));
  EXPECT_FALSE(user_certificate(blob(d + "/key.pub"))) << "a key, not a certificate";
  EXPECT_FALSE(user_certificate(cert.substr(0, 80))) << "cut in the certified key";
}

// ssh offers a user's certificate, never a host's (pubkey_prepare), of every key type: the
// certified key's fields, as many as its type has, come before the serial and the kind.
TEST(AgentFilter, AUsersCertificateIsToldFromAHostsOfEveryKeyType) {
  test::TempDir dir;
  const std::string& d = dir.path();
  ASSERT_EQ(std::system(("ssh-keygen -q -t ed25519 -N '' -f " + d + "/ca").c_str()), 0);
  for (const char* type : {"ed25519", "rsa -b 1024", "ecdsa -b 384", "ecdsa -b 521"}) {
    std::string key = d + "/key";
    std::remove(key.c_str());
    std::remove((key + ".pub").c_str());
    ASSERT_EQ(std::system(("ssh-keygen -q -t " + std::string(type) + " -N '' -f " + key).c_str()),
              0);
    for (bool host : {false, true}) {
      std::string sign =
          "ssh-keygen -q -s " + d + "/ca -I test -n root " + (host ? "-h " : "") + key + ".pub";
      ASSERT_EQ(std::system(sign.c_str()), 0) << type;
      std::string cert = blob(key + "-cert.pub");
      ASSERT_FALSE(cert.empty()) << type;
      EXPECT_EQ(user_certificate(cert), !host) << type << (host ? ", host" : ", user");
      EXPECT_TRUE(certificate_is_of(cert, blob(key + ".pub"))) << type;
    }
  }
}

}  // namespace
}  // namespace msrun_ssh
