// `msrun-ssh check`: connect every host, run the probe everywhere and the master-port test at the
// same time, then print the report (see check.h for the checks and their rules).
#include "msrun_ssh/check.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "msrun_ssh/ssh.h"

namespace msrun_ssh {
namespace {

double wall_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n \t");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return text.substr(start, end + 1 - start);
}

// Phase one. SshPool::connect_all closes every session when any host fails, so the hosts that did
// connect are connected again in a fresh pool (rarely needed: only when some host failed).
struct Connected {
  std::unique_ptr<SshPool> pool;
  std::vector<size_t> plan_host;           // transport host index -> plan host index
  std::map<size_t, std::string> failures;  // plan host index -> reason
  std::vector<std::string> warnings;
};

Connected connect_hosts(const Options& options, const Plan& plan) {
  Connected c;
  std::vector<size_t> todo;
  todo.reserve(plan.hosts.size());
  for (size_t h = 0; h < plan.hosts.size(); ++h) todo.push_back(h);
  while (!todo.empty()) {
    std::vector<SshEndpoint> endpoints;
    endpoints.reserve(todo.size());
    for (size_t h : todo) endpoints.push_back(endpoint_of(plan.hosts[h].host));
    auto pool = std::make_unique<SshPool>(std::move(endpoints), ssh_settings(options));
    auto failures = pool->connect_all(std::vector<int>(todo.size(), 1));
    for (const auto& w : pool->warnings()) c.warnings.push_back(w);
    if (failures.empty()) {
      c.pool = std::move(pool);
      c.plan_host = todo;
      return c;
    }
    std::vector<bool> failed(todo.size(), false);
    for (const auto& f : failures) {
      failed[f.host] = true;
      c.failures[todo[f.host]] = f.reason;
    }
    std::vector<size_t> next;
    for (size_t i = 0; i < todo.size(); ++i)
      if (!failed[i]) next.push_back(todo[i]);
    todo = std::move(next);
  }
  return c;
}

// Phase two: the probes and the port test on one event loop.
class Session {
 public:
  struct Chan {
    enum class Kind { kProbe, kListener, kConnect } kind = Kind::kProbe;
    size_t host = 0;  // plan index
    std::string out, err;
    std::optional<int> status;
    bool closed = false;
    std::string failure;
  };

  Session(Transport& t, const std::vector<size_t>& plan_host,
          const std::vector<HostExpectation>& es, const Options& options, size_t master)
      : t_(t), plan_host_(plan_host), es_(es), options_(options), master_(master) {}

  void run() {
    double limit_s = 150 + 60.0 * static_cast<double>(options_.imports.size());
    double deadline = t_.now_ms() + limit_s * 1000;
    for (size_t ti = 0; ti < plan_host_.size(); ++ti) {
      size_t h = plan_host_[ti];
      probe_[h] = start(ti, Chan::Kind::kProbe, probe_command(es_[h]));
      if (h == master_)
        listener_ = start(ti, Chan::Kind::kListener,
                          listener_command(es_[h].python, es_[h].master_port, listener_limit()));
    }
    EventHandler handler = [this](const TransportEvent& e) { on_event(e); };
    while (open_ > 0 && t_.now_ms() < deadline) {
      // Only the listener left, told to stop long ago: it ends by itself (timeout), stop waiting.
      if (open_ == 1 && eof_sent_ && !chans_.at(listener_).closed &&
          t_.now_ms() > eof_ms_ + kListenerGraceMs)
        break;
      t_.poll(static_cast<int>(std::min(1000.0, std::max(1.0, deadline - t_.now_ms()))), handler);
      advance();
    }
    for (auto& [id, c] : chans_)
      if (!c.closed && c.failure.empty())
        c.failure = fmt::format("no answer within {:g} s", limit_s);
  }

  const Chan* probe(size_t h) const { return find(probe_, h); }
  const Chan* listener() const { return listener_ < 0 ? nullptr : &chans_.at(listener_); }
  const Chan* connect(size_t h) const { return find(connect_, h); }
  const ClockSample& clock(size_t h) { return clock_[h]; }
  bool listening() const { return listening_; }

 private:
  double listener_limit() const { return 2 * options_.connect_timeout + 30; }

  ChannelId start(size_t ti, Chan::Kind kind, const std::string& command) {
    ChannelId id = t_.exec(ti, command);
    chans_[id] = Chan{kind, plan_host_[ti]};
    ++open_;
    return id;
  }

  const Chan* find(const std::map<size_t, ChannelId>& m, size_t h) const {
    auto it = m.find(h);
    return it == m.end() ? nullptr : &chans_.at(it->second);
  }

  void on_event(const TransportEvent& e) {
    if (e.kind == TransportEvent::Kind::kHostLost) {
      for (auto& [id, c] : chans_)
        if (plan_host_.at(e.host) == c.host && c.failure.empty())
          c.failure = fmt::format("connection lost: {}", e.data);
      return;
    }
    auto it = chans_.find(e.channel);
    if (it == chans_.end()) return;
    Chan& c = it->second;
    switch (e.kind) {
      case TransportEvent::Kind::kData:
        (e.is_stderr ? c.err : c.out).append(e.data);
        if (c.kind == Chan::Kind::kProbe && !synced_.count(e.channel) &&
            c.out.find("sync=1\n") != std::string::npos)
          synced_[e.channel] = false;
        if (c.kind == Chan::Kind::kProbe && clock_[c.host].received == 0 && has_clock(c.out))
          clock_[c.host].received = wall_now();
        if (c.kind == Chan::Kind::kListener && c.out.find("listening\n") != std::string::npos)
          listening_ = true;
        break;
      case TransportEvent::Kind::kExit:
        c.status = e.status;
        break;
      case TransportEvent::Kind::kOpenFailed:
        c.failure = std::string(e.data);
        [[fallthrough]];
      case TransportEvent::Kind::kClosed:
        if (!c.closed) {
          c.closed = true;
          --open_;
          if (c.kind == Chan::Kind::kConnect) --connects_open_;
        }
        break;
      default:
        break;
    }
  }

  // The probe's clock line is complete (a login script's output may come before "sync=1", even
  // without a newline: search anywhere).
  static bool has_clock(const std::string& out) {
    size_t pos = out.find("sync=1\nclock=");
    return pos != std::string::npos && out.find('\n', pos + 7) != std::string::npos;
  }

  // Answers every probe that asked for its clock reading: the time of this write is the start of
  // the bracket around the remote reading.
  void answer_syncs() {
    for (auto& [id, answered] : synced_)
      if (!answered) {
        answered = true;
        clock_[chans_.at(id).host].sent = wall_now();
        t_.write(id, "\n");
        t_.send_eof(id);
      }
  }

  // Outside the transport's callbacks: answer the probes' clock syncs, start the connection tests
  // once the listener listens, end the listener (EOF on its stdin) once every test is done.
  void advance() {
    answer_syncs();
    if (listening_ && !connects_started_) {
      connects_started_ = true;
      std::string ip = es_[master_].master_ip;
      for (size_t ti = 0; ti < plan_host_.size(); ++ti) {
        size_t h = plan_host_[ti];
        connect_[h] =
            start(ti, Chan::Kind::kConnect,
                  connect_command(es_[h].python, ip, es_[h].master_port, options_.connect_timeout));
        ++connects_open_;
      }
    }
    if (connects_started_ && connects_open_ == 0 && !eof_sent_ && listener_ >= 0) {
      eof_sent_ = true;
      eof_ms_ = t_.now_ms();
      t_.send_eof(listener_);
    }
  }

  Transport& t_;
  const std::vector<size_t>& plan_host_;
  const std::vector<HostExpectation>& es_;
  const Options& options_;
  size_t master_;
  std::map<ChannelId, Chan> chans_;
  std::map<size_t, ChannelId> probe_, connect_;
  std::map<size_t, ClockSample> clock_;
  std::map<ChannelId, bool> synced_;  // probes that printed "sync=1" -> answered yet
  ChannelId listener_ = -1;
  int open_ = 0;
  int connects_open_ = 0;
  bool listening_ = false;
  bool connects_started_ = false;
  bool eof_sent_ = false;
  double eof_ms_ = 0;
  static constexpr double kListenerGraceMs = 5000;
};

// Why a channel gave no complete answer, for the checks that depend on it.
std::string channel_trouble(const Session::Chan& c) {
  if (!c.failure.empty()) return c.failure;
  std::string err = last_line(c.err);
  if (c.status)
    return fmt::format("exited with status {}{}", *c.status, err.empty() ? "" : ": " + err);
  return err.empty() ? "closed without an answer" : err;
}

void fill_probe(HostReport& h, const HostExpectation& e, const Session::Chan* c,
                const ClockSample& clock, ProbeFacts& facts) {
  facts = parse_probe(c ? c->out : "");
  if (!facts.has("end"))
    facts.values.emplace_back("probe_error", fmt::format("the probe ended early: {}",
                                                         c ? channel_trouble(*c) : "not started"));
  for (auto& r : evaluate_probe(e, facts, clock)) h.set(r.name, r.status, r.detail, r.value);
}

void fill_port(CheckReport& report, Session& s, const std::vector<size_t>& connected, size_t master,
               int port) {
  HostReport& m = report.hosts[master];
  std::string others;
  const Session::Chan* l = s.listener();
  if (!l) {
    others = fmt::format("not tested: the master {} is not connected", m.address);
  } else if (!s.listening()) {
    std::string out = l->out;
    if (out.rfind("in_use", 0) == 0) {
      m.set("master_port", CheckStatus::kFail,
            fmt::format("port {} in use on the master:{}", port, last_line(out).substr(6)));
    } else if (out.rfind("bind_error", 0) == 0) {
      m.set("master_port", CheckStatus::kFail,
            fmt::format("cannot listen on 0.0.0.0:{} on the master:{}", port,
                        last_line(out).substr(10)));
    } else if (out.rfind("no_python", 0) == 0) {
      m.set("master_port", CheckStatus::kWarn,
            "cannot test the port: no python on the master to listen with");
    } else {
      m.set("master_port", CheckStatus::kFail,
            fmt::format("the port test did not start on the master: {}", channel_trouble(*l)));
    }
    others = "not tested: the master could not listen on the port";
  }
  for (size_t h : connected) {
    if (!others.empty()) {
      if (h != master) report.hosts[h].set("master_port", CheckStatus::kSkip, others);
      continue;
    }
    const Session::Chan* c = s.connect(h);
    std::optional<std::string> out;
    if (c && c->out.find("reach=") != std::string::npos) out = c->out;
    CheckResult r = port_result(report.master, out, h == master);
    if (!out && c) r.detail += ": " + channel_trouble(*c);
    report.hosts[h].set("master_port", r.status, r.detail, r.value);
  }
  if (l && s.listening() && !l->closed) {
    CheckResult* r = m.find("master_port");
    if (r->status == CheckStatus::kPass) r->status = CheckStatus::kWarn;
    r->detail += "; the listener did not confirm its end (it ends by itself at its deadline)";
  }
}

size_t master_index(const Plan& plan) {
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    if (plan.hosts[h].is_master) return h;
  return 0;
}

}  // namespace

int check_cluster(const Options& options, const Cluster&, Plan& plan) {
  validate_imports(options.imports);
  std::vector<HostExpectation> es;
  for (size_t h = 0; h < plan.hosts.size(); ++h) es.push_back(expectation_for(plan, h, options));
  size_t master = master_index(plan);
  CheckReport report =
      empty_report(plan, options.imports, "not checked: the host is not connected");

  Connected c = connect_hosts(options, plan);
  for (const auto& [h, reason] : c.failures)
    for (auto& r : classify_connect_failure(reason))
      report.hosts[h].set(r.name, r.status, r.detail, r.value);
  std::vector<const ProbeFacts*> facts_of(plan.hosts.size(), nullptr);
  std::vector<ProbeFacts> facts(plan.hosts.size());
  if (c.pool) {
    Session s(*c.pool, c.plan_host, es, options, master);
    s.run();
    for (size_t h : c.plan_host) {
      for (auto& r : connected_checks(plan.hosts[h].host.address, c.warnings))
        report.hosts[h].set(r.name, r.status, r.detail, r.value);
      fill_probe(report.hosts[h], es[h], s.probe(h), s.clock(h), facts[h]);
      facts_of[h] = &facts[h];
    }
    fill_port(report, s, c.plan_host, master, plan.master_port);
    c.pool->disconnect_all();
  }
  std::optional<std::string> local_sha;
  std::string local_error;
  if (!es.empty() && !es[0].script.empty()) {
    std::string path =
        es[0].script[0] == '/' ? es[0].script : options.launcher_cwd + "/" + es[0].script;
    local_sha = sha256_file(path, local_error);
  }
  auto scripts = script_checks(es, facts_of, local_sha, local_error);
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    if (facts_of[h])
      report.hosts[h].set("script", scripts[h].status, scripts[h].detail, scripts[h].value);
  compare_hosts(report);

  std::string text = options.json ? format_json(report)
                                  : format_table(report, isatty(1) && !std::getenv("NO_COLOR"));
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  return check_exit_code(report);
}

}  // namespace msrun_ssh
