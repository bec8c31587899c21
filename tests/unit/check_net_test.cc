// `check --net` (src/check/net.cc): the pairing schedule, the verdicts, the address each host
// tests on, and the rounds run against ReplyTransport (scripted servers and clients).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/check.h"
#include "msrun_ssh/cli.h"
#include "msrun_ssh/error.h"
#include "remote/programs.h"
#include "reply_transport.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using fake::Reply;
using fake::ReplyTransport;
using test::error_of;
using Rounds = std::vector<std::vector<std::pair<size_t, size_t>>>;

// Every round is a matching; returns every pair the rounds hold (each once, or the test fails).
std::set<std::pair<size_t, size_t>> pairs_of(const Rounds& rounds, size_t n) {
  std::set<std::pair<size_t, size_t>> all;
  for (const auto& round : rounds) {
    std::set<size_t> busy;
    for (auto [a, b] : round) {
      EXPECT_LT(a, n);
      EXPECT_LT(b, n);
      EXPECT_NE(a, b);
      EXPECT_TRUE(busy.insert(a).second) << "host " << a << " twice in a round";
      EXPECT_TRUE(busy.insert(b).second) << "host " << b << " twice in a round";
      EXPECT_TRUE(all.insert({std::min(a, b), std::max(a, b)}).second) << a << "-" << b;
    }
  }
  return all;
}

TEST(CheckNet, AllPairsEveryPairOnceInAtMostNRounds) {
  for (size_t n = 0; n <= 17; ++n) {
    Rounds r = net_rounds(n, NetPairs::kAll);
    auto all = pairs_of(r, n);
    EXPECT_EQ(all.size(), n * (n > 0 ? n - 1 : 0) / 2) << n;
    size_t most = n < 2 ? 0 : n % 2 ? n : n - 1;
    EXPECT_EQ(r.size(), most) << n;
  }
}

TEST(CheckNet, RingEveryEdgeOnceInTwoOrThreeRounds) {
  for (size_t n = 2; n <= 33; ++n) {
    Rounds r = net_rounds(n, NetPairs::kRing);
    auto all = pairs_of(r, n);
    std::set<std::pair<size_t, size_t>> ring;
    for (size_t i = 0; i < n; ++i)
      ring.insert({std::min(i, (i + 1) % n), std::max(i, (i + 1) % n)});
    EXPECT_EQ(all, ring) << n;
    EXPECT_LE(r.size(), n == 2 ? 1u : n % 2 ? 3u : 2u) << n;
  }
  EXPECT_TRUE(net_rounds(1, NetPairs::kRing).empty());
}

TEST(CheckNet, AutoIsAllUpToEightHostsThenARing) {
  EXPECT_EQ(pairs_of(net_rounds(8, NetPairs::kAuto), 8).size(), 28u);
  EXPECT_EQ(pairs_of(net_rounds(9, NetPairs::kAuto), 9).size(), 9u);
}

CheckReport report_of(size_t n) {
  CheckReport r;
  for (size_t h = 0; h < n; ++h) {
    HostReport host;
    host.address = fmt::format("node{}", h);
    r.hosts.push_back(host);
  }
  return r;
}

// Every ordered pair of `n` hosts at `rate(from, to)` Gb/s, RTT 0.1 ms.
NetReport measured(size_t n, const std::function<double(size_t, size_t)>& rate) {
  NetReport net;
  for (size_t h = 0; h < n; ++h) net.tested.push_back(h);
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      if (a != b) net.links.push_back({a, b, rate(a, b), 0.1, ""});
  return net;
}

CheckStatus net_status(const CheckReport& r, size_t h) { return r.hosts[h].find("net")->status; }

TEST(CheckNet, AHostThatReceivesSlowlyFailsAloneAndIsNamed) {
  CheckReport r = report_of(3);
  NetReport net = measured(3, [](size_t, size_t to) { return to == 2 ? 0.05 : 9.0; });
  evaluate_net(net, r, {});
  EXPECT_EQ(net_status(r, 0), CheckStatus::kPass);
  EXPECT_EQ(net_status(r, 1), CheckStatus::kPass);
  EXPECT_EQ(net_status(r, 2), CheckStatus::kFail);
  EXPECT_NE(r.hosts[2].find("net")->detail.find("receives at 0.05 Gb/s"), std::string::npos)
      << r.hosts[2].find("net")->detail;
  EXPECT_DOUBLE_EQ(net.median_gbps, 9.0);
  EXPECT_EQ(check_exit_code(r), 1);
}

TEST(CheckNet, AHostThatSendsSlowlyFails) {
  CheckReport r = report_of(4);
  NetReport net = measured(4, [](size_t from, size_t) { return from == 1 ? 1.0 : 10.0; });
  evaluate_net(net, r, {});
  for (size_t h : {0, 2, 3}) EXPECT_EQ(net_status(r, h), CheckStatus::kPass) << h;
  EXPECT_EQ(net_status(r, 1), CheckStatus::kFail);
  EXPECT_NE(r.hosts[1].find("net")->detail.find("sends at 1.00 Gb/s"), std::string::npos);
}

TEST(CheckNet, EvenRatesPassWithTheirRateAsValue) {
  CheckReport r = report_of(3);
  NetReport net = measured(3, [](size_t a, size_t b) { return 8.0 + 0.1 * double(a + b); });
  evaluate_net(net, r, {"", "", "", "not connected"});
  for (size_t h = 0; h < 3; ++h) EXPECT_EQ(net_status(r, h), CheckStatus::kPass) << h;
  EXPECT_EQ(r.hosts[0].find("net")->value, "8.20 Gb/s");  // upper medians of 8.1 and 8.2
  EXPECT_EQ(check_exit_code(r), 0);
}

TEST(CheckNet, OneSlowLinkBetweenHealthyHostsFailsBothEnds) {
  CheckReport r = report_of(4);
  NetReport net = measured(4, [](size_t a, size_t b) { return a == 0 && b == 3 ? 0.5 : 10.0; });
  evaluate_net(net, r, {});
  EXPECT_EQ(net_status(r, 0), CheckStatus::kFail);
  EXPECT_EQ(net_status(r, 3), CheckStatus::kFail);
  EXPECT_EQ(net_status(r, 1), CheckStatus::kPass);
  EXPECT_EQ(net_status(r, 2), CheckStatus::kPass);
  EXPECT_NE(r.hosts[0].find("net")->detail.find("link node0 -> node3"), std::string::npos);
}

TEST(CheckNet, AFailedPairFailsBothEndsWithTheReasonAndUntestedHostsSkip) {
  CheckReport r = report_of(4);
  NetReport net = measured(3, [](size_t, size_t) { return 5.0; });
  for (auto& l : net.links)
    if ((l.from == 1 && l.to == 2) || (l.from == 2 && l.to == 1)) {
      l.gbps.reset();
      l.error = "Connection refused";
    }
  evaluate_net(net, r, {"", "", "", "not tested: the host is not connected"});
  EXPECT_EQ(net_status(r, 0), CheckStatus::kPass);
  EXPECT_EQ(net_status(r, 1), CheckStatus::kFail);
  EXPECT_EQ(r.hosts[2].find("net")->detail, "Connection refused");
  EXPECT_EQ(net_status(r, 3), CheckStatus::kSkip);
}

TEST(CheckNet, ASlowRoundTripWarns) {
  CheckReport r = report_of(3);
  NetReport net = measured(3, [](size_t, size_t) { return 5.0; });
  for (auto& l : net.links)
    if (l.from == 2) l.rtt_ms = 9;
  evaluate_net(net, r, {});
  EXPECT_EQ(net_status(r, 2), CheckStatus::kWarn);
  EXPECT_EQ(net_status(r, 0), CheckStatus::kPass);
  EXPECT_EQ(check_exit_code(r), 0);
}

TEST(CheckNet, InterfaceFromTheSocketIfnameVariables) {
  EXPECT_EQ(net_interface({{"NCCL_SOCKET_IFNAME", "=eth1,eth2"}}), "eth1");
  // NCCL and HCCL take a prefix of names without '=' (every host failed as "No such device").
  EXPECT_EQ(net_interface({{"NCCL_SOCKET_IFNAME", "ib,eth"}}), "ib*");
  EXPECT_EQ(net_interface({{"HCCL_SOCKET_IFNAME", "enp"}}), "enp*");
  EXPECT_EQ(net_interface({{"NCCL_SOCKET_IFNAME", "^docker,lo"}}), "");
  EXPECT_EQ(net_interface({{"HCCL_SOCKET_IFNAME", "ib0"}, {"GLOO_SOCKET_IFNAME", "eth3"}}), "eth3");
  EXPECT_EQ(net_interface({{"GLOO_SOCKET_IFNAME", "a;rm -rf"}}), "");
  EXPECT_EQ(net_interface({{"PATH", "/bin"}}), "");
}

// net.py's server binds to the first interface whose name begins with a prefix: here "l", lo.
TEST(CheckNet, TheServerTakesTheFirstInterfaceOfAPrefix) {
  if (!test::have_python3()) GTEST_SKIP() << "no python3";
  for (const auto& [bind, expected] : std::vector<std::pair<std::string, std::string>>{
           {"if:l*", "addr=127.0.0.1"},
           {"if:lo", "addr=127.0.0.1"},
           {"if:nosuchif*", "error=no interface whose name begins with nosuchif has an IPv4"}}) {
    std::string out = test::shell_output(
        fmt::format("python3 -I -S -c {} serve {} 0.01 < /dev/null",
                    shell_quote(std::string(remote::kNetPy)), shell_quote(bind)));
    EXPECT_NE(out.find(expected), std::string::npos) << bind << ": " << out;
  }
}

TEST(CheckNet, BindFromTheEnvElseTheRouteToTheMaster) {
  HostExpectation e;
  ProbeFacts f = parse_probe("route=198.18.1.10 dev eth0 src 198.18.1.11 uid 0\n");
  EXPECT_EQ(net_bind(e, f), "addr:198.18.1.11");
  ProbeFacts local = parse_probe("route=local 198.18.1.10 dev lo table local src 198.18.1.10\n");
  EXPECT_EQ(net_bind(e, local), "addr:198.18.1.10");
  EXPECT_EQ(net_bind(e, parse_probe("route_error=no ip command\n")), "");
  e.env = {{"GLOO_SOCKET_IFNAME", "eth7"}};
  EXPECT_EQ(net_bind(e, f), "if:eth7");
}

TEST(CheckNet, ClientOutputBecomesTwoLinks) {
  auto links = parse_net_client(
      0, 1, "rtt_ms=0.0500 fwd_gbps=6.5 rev_gbps=4.25 fwd_bytes=1 rev_bytes=2\n", "");
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[0].from, 1u);
  EXPECT_EQ(links[0].to, 0u);
  EXPECT_DOUBLE_EQ(*links[0].gbps, 6.5);
  EXPECT_DOUBLE_EQ(*links[1].gbps, 4.25);
  EXPECT_DOUBLE_EQ(links[1].rtt_ms, 0.05);
  auto bad = parse_net_client(0, 1, "error=Connection refused\n", "exited with status 1");
  EXPECT_FALSE(bad[0].gbps);
  EXPECT_EQ(bad[0].error, "Connection refused");
  EXPECT_EQ(parse_net_client(0, 1, "", "connection lost: x")[1].error, "connection lost: x");
  EXPECT_FALSE(parse_net_client(0, 1, "rtt_ms=x fwd_gbps=1 rev_gbps=1\n", "")[0].gbps);
}

// Three hosts 10.0.0.{1,2,3}: servers listen on port 400H, clients print `rate` for the server.
void script_pairs(ReplyTransport& t, size_t n, const std::function<std::string(size_t)>& client) {
  for (size_t h = 0; h < n; ++h) {
    t.on(fmt::format("addr:10.0.0.{}", h + 1),
         Reply{.output = {{0.05, fmt::format("port=400{} addr=10.0.0.{}\n", h, h + 1)}},
               .exit_at = 0.01,
               .until_eof = true,
               .after_eof = {{0.001, "ended=eof\n"}}});
    t.on(fmt::format("10.0.0.{}:400{}", h + 1, h),
         Reply{.output = {{0.5, client(h)}}, .exit_at = 0.6});
  }
}

std::vector<HostExpectation> expectations(size_t n) {
  std::vector<HostExpectation> es(n);
  for (auto& e : es) e.python = "python3";
  return es;
}

TEST(CheckNet, RoundsStartClientsOnTheServersPortsAndEndEveryServer) {
  ReplyTransport t;
  script_pairs(t, 3, [](size_t) { return "rtt_ms=0.1 fwd_gbps=5 rev_gbps=4\n"; });
  Options o;
  auto es = expectations(3);
  std::vector<std::string> binds{"addr:10.0.0.1", "addr:10.0.0.2", "addr:10.0.0.3"};
  NetReport net = run_net_test(t, {0, 1, 2}, binds, es, o);
  EXPECT_EQ(net.rounds, 3u);
  ASSERT_EQ(net.links.size(), 6u);
  for (const auto& l : net.links) EXPECT_TRUE(l.gbps) << l.from << "->" << l.to << l.error;
  EXPECT_EQ(t.execs.size(), 6u);
  for (size_t i = 0; i < t.execs.size(); ++i) {
    if (t.execs[i].command.find("'serve'") == std::string::npos) continue;
    EXPECT_GE(t.channel(static_cast<ChannelId>(i)).eof_ms, 0) << "server " << i << " not ended";
  }
  EXPECT_TRUE(t.kills.empty());
}

TEST(CheckNet, SlowPairsAreMeasuredOnceMore) {
  ReplyTransport t;
  script_pairs(t, 4, [](size_t server) {
    return server == 0 ? "rtt_ms=0.1 fwd_gbps=0.1 rev_gbps=4\n"
                       : "rtt_ms=0.1 fwd_gbps=5 rev_gbps=4\n";
  });
  Options o;
  auto es = expectations(4);
  NetReport net = run_net_test(
      t, {0, 1, 2, 3}, {"addr:10.0.0.1", "addr:10.0.0.2", "addr:10.0.0.3", "addr:10.0.0.4"}, es, o);
  EXPECT_EQ(net.rounds, 3u);
  EXPECT_EQ(net.retested, 3u);  // host 0 serves all three of its pairs
  EXPECT_EQ(t.execs.size(), 2u * (6 + 3));
  EXPECT_EQ(net.links.size(), 12u);
  EXPECT_TRUE(t.kills.empty());
}

TEST(CheckNet, AServerThatCannotListenFailsItsPairOnly) {
  ReplyTransport t;
  t.on("addr:10.0.0.1", Reply{.output = {{0.01, "error=Cannot assign requested address\n"}},
                              .exit_at = 0.02,
                              .status = 1});
  script_pairs(t, 3, [](size_t) { return "rtt_ms=0.1 fwd_gbps=5 rev_gbps=4\n"; });
  Options o;
  o.net_pairs = NetPairs::kAll;
  auto es = expectations(3);
  NetReport net =
      run_net_test(t, {0, 1, 2}, {"addr:10.0.0.1", "addr:10.0.0.2", "addr:10.0.0.3"}, es, o);
  size_t failed = 0;
  for (const auto& l : net.links)
    if (!l.gbps) {
      ++failed;
      EXPECT_NE(l.error.find("Cannot assign requested address"), std::string::npos) << l.error;
    }
  // Host 0 serves both of its pairs (the lower index serves): (0,1) and (0,2) fail both ways.
  EXPECT_EQ(failed, 4u);
  EXPECT_EQ(net.links.size(), 6u);
  EXPECT_TRUE(t.kills.empty());
}

TEST(CheckNet, CommandsCarryTheirBoundsAndArguments) {
  std::string s = net_server_command("python3", "if:eth0", 2);
  EXPECT_NE(s.find("'if:eth0'"), std::string::npos) << s;
  EXPECT_NE(s.find("'serve'"), std::string::npos);
  EXPECT_NE(s.find("'41'"), std::string::npos) << "3 x 2 + 30 + 5 s limit: " << s;
  std::string c = net_client_command("python3", "10.0.0.1", 4000, 2);
  EXPECT_NE(c.find("10.0.0.1:4000"), std::string::npos);
  EXPECT_NE(c.find("'send'"), std::string::npos);
}

TEST(CheckNet, CommandLine) {
  auto env = [](const char*) -> const char* { return nullptr; };
  Options o = parse_args({"check", "--hostfile", "h", "--net", "--net_pairs", "ring",
                          "--net_seconds", "0.5", "--net_min_ratio", "0.3", "train.py"},
                         env)
                  .options;
  EXPECT_TRUE(o.net);
  EXPECT_EQ(o.net_pairs, NetPairs::kRing);
  EXPECT_DOUBLE_EQ(o.net_seconds, 0.5);
  EXPECT_DOUBLE_EQ(o.net_min_ratio, 0.3);
  EXPECT_EQ(o.task_script, "train.py");
  EXPECT_NE(error_of([&] {
              parse_args({"check", "--hostfile", "h", "--net_min_ratio", "2"}, env);
            }).find("--net_min_ratio=2: must be 0..1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_args({"check", "--hostfile", "h", "--net_pairs", "star"}, env);
            }).find("expects ring or all"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_args({"--hostfile", "h", "--net", "x.py"}, env);
            }).find("unknown option \"--net\" for run"),
            std::string::npos);
}

}  // namespace
}  // namespace msrun_ssh
