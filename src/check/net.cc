// `msrun-ssh check --net`: host-to-host bandwidth and round-trip time, in rounds of pairs (see
// check.h for the schedule and the verdict rules).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "msrun_ssh/base.h"
#include "msrun_ssh/batch.h"
#include "msrun_ssh/check.h"
#include "python_command.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

using Round = std::vector<std::pair<size_t, size_t>>;

// The circle method: host n-1 (or a bye for odd n) stays, the others turn.
std::vector<Round> all_pairs(size_t n) {
  size_t m = n % 2 ? n + 1 : n;
  std::vector<Round> rounds;
  for (size_t r = 0; r + 1 < m; ++r) {
    Round round;
    auto add = [&round, n](size_t a, size_t b) {
      if (a < n && b < n) round.emplace_back(std::min(a, b), std::max(a, b));
    };
    add(m - 1, r);
    for (size_t k = 1; k < m / 2; ++k) add((r + k) % (m - 1), (r + m - 1 - k) % (m - 1));
    if (!round.empty()) rounds.push_back(std::move(round));
  }
  return rounds;
}

// Each edge (i, i+1 mod n) goes to the first round where neither end is busy yet.
std::vector<Round> ring(size_t n) {
  std::vector<Round> rounds;
  std::vector<std::vector<bool>> busy;
  for (size_t i = 0; i < n && n >= 2; ++i) {
    size_t a = i, b = (i + 1) % n;
    if (n == 2 && i == 1) break;  // two hosts: one edge
    size_t r = 0;
    while (r < rounds.size() && (busy[r][a] || busy[r][b])) ++r;
    if (r == rounds.size()) {
      rounds.emplace_back();
      busy.emplace_back(n, false);
    }
    rounds[r].emplace_back(std::min(a, b), std::max(a, b));
    busy[r][a] = busy[r][b] = true;
  }
  return rounds;
}

std::string value_of(const std::string& out, std::string_view key) {
  std::string needle = fmt::format("{}=", key);
  size_t pos = 0;
  while ((pos = out.find(needle, pos)) != std::string::npos) {
    if (pos == 0 || out[pos - 1] == ' ' || out[pos - 1] == '\n') {
      size_t start = pos + needle.size();
      size_t end = key == "error" ? out.find('\n', start) : out.find_first_of(" \n", start);
      return out.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
    pos += needle.size();
  }
  return "";
}

std::optional<double> number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

std::string route_src(const std::string& route) {
  size_t pos = route.find(" src ");
  if (pos == std::string::npos) return "";
  size_t start = pos + 5;
  size_t end = route.find(' ', start);
  return route.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::string rate(double gbps) { return fmt::format("{:.2f} Gb/s", gbps); }

struct HostRates {
  std::vector<double> out, in, rtt;
  std::string error;  // of a pair that failed
};

std::map<size_t, HostRates> rates_of(const NetReport& net) {
  std::map<size_t, HostRates> by;
  for (size_t h : net.tested) by[h];
  for (const auto& l : net.links) {
    if (!l.gbps) {
      for (size_t h : {l.from, l.to})
        if (by[h].error.empty()) by[h].error = l.error;
      continue;
    }
    by[l.from].out.push_back(*l.gbps);
    by[l.to].in.push_back(*l.gbps);
    by[l.from].rtt.push_back(l.rtt_ms);
  }
  return by;
}

// The reason a host fails on its own medians, or "".
std::string host_fault(const HostRates& r, const NetReport& net) {
  double floor = net.min_ratio * net.median_gbps;
  double out = upper_median(r.out), in = upper_median(r.in);
  std::string why;
  if (!r.out.empty() && out < floor) why = fmt::format("sends at {}", rate(out));
  if (!r.in.empty() && in < floor)
    why += fmt::format("{}receives at {}", why.empty() ? "" : ", ", rate(in));
  if (why.empty()) return "";
  return fmt::format("{}: below {:g} x the median {}", why, net.min_ratio, rate(net.median_gbps));
}

// A side's own "error=WHY" line first (it says more than its exit status).
std::string trouble_of(const BatchResult& r) {
  std::string why = r.failure == BatchFailure::kNone ? value_of(r.out, "error") : "";
  return why.empty() ? batch_trouble(r, "no answer in time") : why;
}

// One pair of a round: its server's command, then its client's once the server listens.
struct PairRun {
  size_t server = 0, client = 0;
  size_t server_cmd = 0;
  std::optional<size_t> client_cmd;
  bool eof_sent = false;
};

// "port=P addr=A" once the server printed its whole line.
std::optional<std::pair<std::string, int>> listening_at(const std::string& out) {
  size_t pos = out.find("port=");
  if (pos == std::string::npos || out.find('\n', pos) == std::string::npos) return std::nullopt;
  auto port = number(value_of(out, "port"));
  std::string addr = value_of(out, "addr");
  if (!port || addr.empty()) return std::nullopt;
  return std::make_pair(addr, static_cast<int>(*port));
}

class RoundRun {
 public:
  RoundRun(Transport& t, const std::vector<std::string>& binds,
           const std::vector<HostExpectation>& es, const Options& o)
      : t_(t), batch_(t), binds_(binds), es_(es), o_(o) {}

  // Starts every server, then every client at once when all servers listen (or have ended),
  // closes each server's stdin when its client is done; bounded by 3 x --net_seconds + 45 s.
  std::vector<NetLink> run(const Round& pairs) {
    for (auto [s, c] : pairs)
      runs_.push_back(
          {s, c, batch_.start(s, net_server_command(es_[s].python, binds_[s], o_.net_seconds))});
    double deadline = t_.now_ms() + (3 * o_.net_seconds + 45) * 1000;
    batch_.wait(deadline, [this] {
      advance();
      return true;
    });
    std::vector<NetLink> links;
    for (const auto& r : runs_) {
      const BatchResult& server = batch_.result(r.server_cmd);
      std::string out = r.client_cmd ? batch_.result(*r.client_cmd).out : "";
      std::string why = r.client_cmd
                            ? trouble_of(batch_.result(*r.client_cmd))
                            : fmt::format("the server side did not listen: {}", trouble_of(server));
      for (auto& l : parse_net_client(r.server, r.client, out, why)) links.push_back(l);
    }
    return links;
  }

 private:
  void advance() {
    if (!clients_started_) {
      for (const auto& r : runs_) {
        const BatchResult& s = batch_.result(r.server_cmd);
        if (!s.closed && !listening_at(s.out)) return;
      }
      clients_started_ = true;
      for (auto& r : runs_)
        if (auto at = listening_at(batch_.result(r.server_cmd).out))
          r.client_cmd = batch_.start(r.client, net_client_command(es_[r.client].python, at->first,
                                                                   at->second, o_.net_seconds));
    }
    for (auto& r : runs_) {
      bool client_done = !r.client_cmd || batch_.result(*r.client_cmd).closed;
      if (client_done && !r.eof_sent && !batch_.result(r.server_cmd).closed) {
        r.eof_sent = true;
        batch_.send_eof(r.server_cmd);
      }
    }
  }

  Transport& t_;
  Batch batch_;
  const std::vector<std::string>& binds_;
  const std::vector<HostExpectation>& es_;
  const Options& o_;
  std::vector<PairRun> runs_;
  bool clients_started_ = false;
};

}  // namespace

namespace {

// Pairs (plan indexes) into rounds: each pair goes to the first round where neither host is busy.
std::vector<Round> matchings(const Round& pairs) {
  std::vector<Round> rounds;
  std::vector<std::set<size_t>> busy;
  for (auto [a, b] : pairs) {
    size_t r = 0;
    while (r < rounds.size() && (busy[r].count(a) || busy[r].count(b))) ++r;
    if (r == rounds.size()) {
      rounds.emplace_back();
      busy.emplace_back();
    }
    rounds[r].emplace_back(a, b);
    busy[r].insert({a, b});
  }
  return rounds;
}

std::vector<NetLink> run_rounds(Transport& t, const std::vector<Round>& rounds,
                                const std::vector<std::string>& binds,
                                const std::vector<HostExpectation>& es, const Options& o) {
  std::vector<NetLink> links;
  for (const auto& round : rounds)
    for (auto& l : RoundRun(t, binds, es, o).run(round)) links.push_back(l);
  return links;
}

}  // namespace

NetReport run_net_test(Transport& transport, const std::vector<size_t>& hosts,
                       const std::vector<std::string>& binds,
                       const std::vector<HostExpectation>& expectations, const Options& options) {
  NetReport net;
  net.tested = hosts;
  net.min_ratio = options.net_min_ratio;
  double start = transport.now_ms();
  std::vector<Round> rounds;
  for (const auto& round : net_rounds(hosts.size(), options.net_pairs)) {
    Round pairs;
    for (auto [a, b] : round) pairs.emplace_back(hosts[a], hosts[b]);
    rounds.push_back(std::move(pairs));
  }
  net.rounds = rounds.size();
  net.links = run_rounds(transport, rounds, binds, expectations, options);
  // A slow pair is measured once more and keeps its better figures: a moment of load on a host
  // does not fail it, a slow link stays slow.
  std::vector<double> rates;
  for (const auto& l : net.links)
    if (l.gbps) rates.push_back(*l.gbps);
  double floor = options.net_min_ratio * upper_median(rates);
  Round slow;
  for (size_t i = 0; i + 1 < net.links.size(); i += 2)
    if (net.links[i].gbps && net.links[i + 1].gbps &&
        std::min(*net.links[i].gbps, *net.links[i + 1].gbps) < floor)
      slow.emplace_back(net.links[i].to, net.links[i].from);  // (server, client)
  auto again = run_rounds(transport, matchings(slow), binds, expectations, options);
  for (const auto& l : again)
    for (auto& old : net.links)
      if (old.from == l.from && old.to == l.to && l.gbps && *l.gbps > *old.gbps) old = l;
  net.retested = slow.size();
  net.seconds = (transport.now_ms() - start) / 1000;
  return net;
}

std::vector<std::vector<std::pair<size_t, size_t>>> net_rounds(size_t n, NetPairs pairs) {
  bool use_ring = pairs == NetPairs::kRing || (pairs == NetPairs::kAuto && n > 8);
  return use_ring ? ring(n) : all_pairs(n);
}

std::string net_interface(const EnvList& env) {
  for (const char* name : {"GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
    auto it =
        std::find_if(env.begin(), env.end(), [name](const auto& e) { return e.first == name; });
    if (it == env.end()) continue;
    std::string v = it->second.substr(0, it->second.find(','));
    // Gloo takes an interface's name; NCCL and HCCL a prefix of names ("ib": ib0, ib1, ...), or
    // one name after '='.
    bool prefix = std::string_view(name) != "GLOO_SOCKET_IFNAME";
    if (!v.empty() && v[0] == '=') {
      v.erase(0, 1);
      prefix = false;
    }
    bool plain = !v.empty() && v.size() < 16 &&
                 v.find_first_not_of(
                     "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789._-@") == std::string::npos;
    return plain ? v + (prefix ? "*" : "") : "";
  }
  return "";
}

std::string net_bind(const HostExpectation& e, const ProbeFacts& facts) {
  std::string ifname = net_interface(e.env);
  if (!ifname.empty()) return "if:" + ifname;
  std::string src = route_src(facts.get("route"));
  return src.empty() ? "" : "addr:" + src;
}

std::string net_server_command(const std::string& python, const std::string& bind, double seconds) {
  return python_command(remote::kNetSh, "msrun-ssh-net", 3 * seconds + 30, remote::kNetPy,
                        {"serve", bind, fmt::format("{:g}", seconds)}, python);
}

std::string net_client_command(const std::string& python, const std::string& ip, int port,
                               double seconds) {
  return python_command(remote::kNetSh, "msrun-ssh-net", 3 * seconds + 30, remote::kNetPy,
                        {"send", fmt::format("{}:{}", ip, port), fmt::format("{:g}", seconds)},
                        python);
}

std::vector<NetLink> parse_net_client(size_t server, size_t client, const std::string& output,
                                      const std::string& trouble) {
  NetLink fwd{client, server, number(value_of(output, "fwd_gbps")), 0, ""};
  NetLink rev{server, client, number(value_of(output, "rev_gbps")), 0, ""};
  auto rtt = number(value_of(output, "rtt_ms"));
  if (!fwd.gbps || !rev.gbps || !rtt) {
    std::string why = value_of(output, "error");
    if (why.empty()) why = trouble.empty() ? "no measurement" : trouble;
    fwd.gbps = rev.gbps = std::nullopt;
    fwd.error = rev.error = why;
    return {fwd, rev};
  }
  fwd.rtt_ms = rev.rtt_ms = *rtt;
  return {fwd, rev};
}

void evaluate_net(NetReport& net, CheckReport& report, const std::vector<std::string>& untested) {
  std::vector<double> all, rtts;
  for (const auto& l : net.links)
    if (l.gbps) {
      all.push_back(*l.gbps);
      rtts.push_back(l.rtt_ms);
    }
  net.median_gbps = upper_median(all);
  net.median_rtt_ms = upper_median(rtts);
  auto by = rates_of(net);
  std::map<size_t, std::string> fault;
  for (const auto& [h, r] : by) fault[h] = r.error.empty() ? host_fault(r, net) : r.error;
  // A slow link that neither end explains names both ends.
  for (const auto& l : net.links) {
    if (!l.gbps || *l.gbps >= net.min_ratio * net.median_gbps) continue;
    if (!fault[l.from].empty() || !fault[l.to].empty()) continue;
    std::string why = fmt::format("link {} -> {} at {}: below {:g} x the median {}",
                                  report.hosts[l.from].address, report.hosts[l.to].address,
                                  rate(*l.gbps), net.min_ratio, rate(net.median_gbps));
    for (size_t h : {l.from, l.to}) fault[h] = why;
  }
  for (const auto& [h, r] : by) {
    HostReport& host = report.hosts[h];
    if (!fault[h].empty()) {
      host.set("net", CheckStatus::kFail, fault[h]);
      continue;
    }
    double mine = upper_median(r.rtt.empty() ? std::vector<double>{0} : r.rtt);
    std::string detail = fmt::format(
        "sends {}, receives {} (median of all links {}); RTT {:.3f} ms", rate(upper_median(r.out)),
        rate(upper_median(r.in)), rate(net.median_gbps), mine);
    bool slow_rtt = mine > 2 * net.median_rtt_ms + 1;
    host.set("net", slow_rtt ? CheckStatus::kWarn : CheckStatus::kPass,
             slow_rtt ? fmt::format("RTT {:.3f} ms, above 2 x the median {:.3f} ms + 1 ms", mine,
                                    net.median_rtt_ms)
                      : detail,
             rate(std::min(upper_median(r.out), upper_median(r.in))));
  }
  for (size_t h = 0; h < untested.size() && h < report.hosts.size(); ++h)
    if (!untested[h].empty()) report.hosts[h].set("net", CheckStatus::kSkip, untested[h]);
}

std::string format_net(const NetReport& net, const CheckReport& report) {
  std::string out = fmt::format(
      "\nnet: {} hosts, {} rounds, {} slow pairs measured again, {:.1f} s; median {}, RTT {:.3f} "
      "ms\n",
      net.tested.size(), net.rounds, net.retested, net.seconds, rate(net.median_gbps),
      net.median_rtt_ms);
  for (const auto& l : net.links)
    out += l.gbps ? fmt::format("  {} -> {}: {:8.2f} Gb/s  RTT {:.3f} ms{}\n",
                                report.hosts[l.from].address, report.hosts[l.to].address, *l.gbps,
                                l.rtt_ms, *l.gbps < net.min_ratio * net.median_gbps ? "  SLOW" : "")
                  : fmt::format("  {} -> {}: failed: {}\n", report.hosts[l.from].address,
                                report.hosts[l.to].address, l.error);
  if (const auto& c = report.collective; c && c->ran)
    out += fmt::format("allreduce: {} ranks, exit status {}, {:.1f} s{}\n", c->rank_seconds.size(),
                       c->status, c->seconds,
                       c->log_dir.empty() ? "" : fmt::format("; logs in {}", c->log_dir));
  return out;
}

}  // namespace msrun_ssh
