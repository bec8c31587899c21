// How the SSH pool names what kept a host from connecting (src/ssh/): the kind of a failure
// libssh describes in words.
#include <gtest/gtest.h>

#include "msrun_ssh/ssh.h"

namespace msrun_ssh {
namespace {

TEST(Connect, LibsshErrorsHaveTheirKind) {
  using E = ConnectError;
  EXPECT_EQ(classify_libssh_error("Connection refused"), E::kRefused);
  EXPECT_EQ(classify_libssh_error("Failed to resolve hostname nosuch (Name or service not known)"),
            E::kUnreachable);
  EXPECT_EQ(classify_libssh_error("No route to host"), E::kUnreachable);
  EXPECT_EQ(classify_libssh_error("Network is unreachable"), E::kUnreachable);
  EXPECT_EQ(classify_libssh_error("Connection timed out"), E::kTimedOut);
  EXPECT_EQ(classify_libssh_error("kex error : no match for method server host key algo: server "
                                  "[ssh-rsa], client [ssh-ed25519]"),
            E::kHostKeyUnverifiable);
  EXPECT_EQ(classify_libssh_error("Socket error: Connection reset by peer"), E::kOther);
  EXPECT_EQ(classify_libssh_error("connection failed"), E::kOther);
  EXPECT_EQ(classify_libssh_error(""), E::kOther);
}

TEST(Connect, LibsshWordsForADamagedPacketSaySo) {
  const std::string damaged =
      " (a packet arrived damaged: a faulty link, NIC or middlebox on the way changed its bytes)";
  EXPECT_EQ(name_damage("Decryption error"), "Decryption error" + damaged);
  EXPECT_EQ(name_damage("HMAC error"), "HMAC error" + damaged);
  EXPECT_EQ(name_damage("read_packet(): Packet len too high(1234567 0012d687)"),
            "read_packet(): Packet len too high(1234567 0012d687)" + damaged);
  EXPECT_EQ(name_damage("Invalid padding: 300 (12 left)"),
            "Invalid padding: 300 (12 left)" + damaged);
  EXPECT_EQ(name_damage("Socket error: disconnected"), "Socket error: disconnected");
  EXPECT_EQ(name_damage("Connection refused"), "Connection refused");
  EXPECT_EQ(name_damage("connection failed"), "connection failed");
}

}  // namespace
}  // namespace msrun_ssh
