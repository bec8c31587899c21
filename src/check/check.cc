// `msrun-ssh check`: connect every host, run the probe everywhere and the master-port test at the
// same time, then print the report (see check.h for the checks and their rules).
#include "msrun_ssh/check.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>

#include "msrun_ssh/base.h"
#include "msrun_ssh/batch.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/ssh_settings.h"
#include "msrun_ssh/sync.h"

namespace msrun_ssh {
namespace {

double wall_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// What a host's port test said last: the last line (base's last_line) once trailing blanks are
// gone too.
std::string last_said(const std::string& text) {
  return last_line(std::string_view(text).substr(0, text.find_last_not_of("\r\n \t") + 1));
}

// Phase two, on the hosts that connected: the probes and the port test in one batch.
class Session {
 public:
  enum class Kind { kProbe, kListener, kConnect };

  Session(Transport& t, const std::vector<size_t>& hosts, const std::vector<HostExpectation>& es,
          const Options& options, size_t master)
      : t_(t),
        batch_(t, [this](size_t i, const TransportEvent& e) { on_event(i, e); }),
        hosts_(hosts),
        es_(es),
        options_(options),
        master_(master),
        limit_s_(150 + 60.0 * static_cast<double>(options.imports.size())) {}

  void run() {
    double deadline = t_.now_ms() + limit_s_ * 1000;
    for (size_t h : hosts_) {
      probe_[h] = start(h, Kind::kProbe, probe_command(es_[h]));
      if (h == master_)
        listener_ = start(h, Kind::kListener,
                          listener_command(es_[h].python, es_[h].master_port, listener_limit()));
    }
    batch_.wait(deadline, [this] {
      advance();
      return !listener_lingers();
    });
  }

  const BatchResult* probe(size_t h) const { return find(probe_, h); }
  const BatchResult* listener() const { return listener_ ? &batch_.result(*listener_) : nullptr; }
  const BatchResult* connect(size_t h) const { return find(connect_, h); }
  ClockSample clock(size_t h) const {
    auto it = clock_.find(h);
    return it == clock_.end() ? ClockSample{} : it->second;
  }
  bool listening() const { return listening_; }

  // Why a command gave no complete answer, for the checks that depend on it.
  std::string trouble(const BatchResult& c) const {
    return batch_trouble(c, fmt::format("no answer within {:g} s", limit_s_));
  }

 private:
  double listener_limit() const { return 2 * options_.connect_timeout + 30; }

  size_t start(size_t h, Kind kind, const std::string& command) {
    size_t index = batch_.start(h, command);
    kinds_.push_back(kind);
    return index;
  }

  const BatchResult* find(const std::map<size_t, size_t>& m, size_t h) const {
    auto it = m.find(h);
    return it == m.end() ? nullptr : &batch_.result(it->second);
  }

  // Only the listener left, told to stop long ago: it ends by itself (timeout), stop waiting.
  bool listener_lingers() const {
    return batch_.open() == 1 && eof_sent_ && !batch_.result(*listener_).closed &&
           t_.now_ms() > eof_ms_ + kListenerGraceMs;
  }

  void on_event(size_t i, const TransportEvent& e) {
    if (e.kind != TransportEvent::Kind::kData) return;
    const BatchResult& c = batch_.result(i);
    size_t h = c.host;
    if (kinds_[i] == Kind::kProbe && !synced_.count(i) &&
        c.out.find("sync=1\n") != std::string::npos)
      synced_[i] = false;
    if (kinds_[i] == Kind::kProbe && clock_[h].received == 0 && has_clock(c.out))
      clock_[h].received = wall_now();
    if (kinds_[i] == Kind::kListener && c.out.find("listening\n") != std::string::npos)
      listening_ = true;
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
    for (auto& [i, answered] : synced_)
      if (!answered) {
        answered = true;
        clock_[batch_.result(i).host].sent = wall_now();
        batch_.write(i, "\n");
        batch_.send_eof(i);
      }
  }

  bool connects_done() const {
    return std::all_of(connect_.begin(), connect_.end(),
                       [this](const auto& hc) { return batch_.result(hc.second).closed; });
  }

  // Outside the transport's callbacks: answer the probes' clock syncs, start the connection tests
  // once the listener listens, end the listener (EOF on its stdin) once every test is done.
  void advance() {
    answer_syncs();
    if (listening_ && !connects_started_) {
      connects_started_ = true;
      std::string ip = es_[master_].master_ip;
      for (size_t h : hosts_)
        connect_[h] =
            start(h, Kind::kConnect,
                  connect_command(es_[h].python, ip, es_[h].master_port, options_.connect_timeout));
    }
    if (connects_started_ && connects_done() && !eof_sent_ && listener_) {
      eof_sent_ = true;
      eof_ms_ = t_.now_ms();
      batch_.send_eof(*listener_);
    }
  }

  Transport& t_;
  Batch batch_;
  const std::vector<size_t>& hosts_;  // the connected ones
  const std::vector<HostExpectation>& es_;
  const Options& options_;
  size_t master_;
  double limit_s_;                            // the time the whole session may take
  std::vector<Kind> kinds_;                   // batch index -> what it runs
  std::map<size_t, size_t> probe_, connect_;  // plan host -> batch index
  std::map<size_t, ClockSample> clock_;
  std::map<size_t, bool> synced_;  // probes that printed "sync=1" -> answered yet
  std::optional<size_t> listener_;
  bool listening_ = false;
  bool connects_started_ = false;
  bool eof_sent_ = false;
  double eof_ms_ = 0;
  static constexpr double kListenerGraceMs = 5000;
};

void fill_probe(HostReport& h, const HostExpectation& e, const Session& s, size_t host,
                ProbeFacts& facts) {
  const BatchResult* c = s.probe(host);
  facts = parse_probe(c ? c->out : "");
  if (!facts.has("end"))
    facts.values.emplace_back(
        "probe_error", fmt::format("the probe ended early: {}", c ? s.trouble(*c) : "not started"));
  for (auto& r : evaluate_probe(e, facts, s.clock(host)))
    h.set(r.name, r.status, r.detail, r.value);
}

void fill_port(CheckReport& report, const Session& s, const std::vector<size_t>& connected,
               size_t master, int port) {
  HostReport& m = report.hosts[master];
  std::string others;
  const BatchResult* l = s.listener();
  if (!l) {
    others = fmt::format("not tested: the master {} is not connected", m.address);
  } else if (!s.listening()) {
    std::string out = l->out;
    if (out.rfind("in_use", 0) == 0) {
      m.set("master_port", CheckStatus::kFail,
            fmt::format("port {} in use on the master:{}", port, last_said(out).substr(6)));
    } else if (out.rfind("bind_error", 0) == 0) {
      m.set("master_port", CheckStatus::kFail,
            fmt::format("cannot listen on 0.0.0.0:{} on the master:{}", port,
                        last_said(out).substr(10)));
    } else if (out.rfind("no_python", 0) == 0) {
      m.set("master_port", CheckStatus::kWarn,
            "cannot test the port: no python on the master to listen with");
    } else {
      m.set("master_port", CheckStatus::kFail,
            fmt::format("the port test did not start on the master: {}", s.trouble(*l)));
    }
    others = "not tested: the master could not listen on the port";
  }
  for (size_t h : connected) {
    if (!others.empty()) {
      if (h != master) report.hosts[h].set("master_port", CheckStatus::kSkip, others);
      continue;
    }
    const BatchResult* c = s.connect(h);
    std::optional<std::string> out;
    if (c && c->out.find("reach=") != std::string::npos) out = c->out;
    CheckResult r = port_result(report.master, out, h == master);
    if (!out && c) r.detail += ": " + s.trouble(*c);
    report.hosts[h].set("master_port", r.status, r.detail, r.value);
  }
  if (l && s.listening() && !l->closed) {
    CheckResult* r = m.find("master_port");
    if (r->status == CheckStatus::kPass) r->status = CheckStatus::kWarn;
    r->detail += "; the listener did not confirm its end (it ends by itself at its deadline)";
  }
}

// --net on the connected hosts that have an address to test on (at least two).
NetReport net_check(Transport& t, const std::vector<size_t>& connected,
                    const std::vector<HostExpectation>& es, const std::vector<ProbeFacts>& facts,
                    const Options& options, CheckReport& report) {
  std::vector<std::string> binds(es.size());
  std::vector<std::string> untested(es.size(), "not tested: the host is not connected");
  std::vector<size_t> tested;
  for (size_t h : connected) {
    binds[h] = net_bind(es[h], facts[h]);
    untested[h] = binds[h].empty() ? "not tested: no address to test on (no route to the master "
                                     "and no *_SOCKET_IFNAME in the host's env)"
                                   : "";
    if (!binds[h].empty()) tested.push_back(h);
  }
  if (tested.size() < 2) {
    for (size_t h : tested) untested[h] = "not tested: no other host to pair with";
    tested.clear();
  }
  NetReport net = run_net_test(t, tested, binds, es, options);
  for (size_t h = 0; h < binds.size(); ++h)
    net.where.push_back(binds[h].substr(binds[h].find(':') + 1));
  evaluate_net(net, report, untested);
  return net;
}

size_t master_index(const Plan& plan) {
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    if (plan.hosts[h].is_master) return h;
  return 0;
}

// The "sync" check of every host: whether its copy of the synced directory is the launcher's.
void fill_sync(CheckReport& report, Transport& t, const SyncSource& source,
               const std::vector<size_t>& connected) {
  SyncSettings settings;
  settings.apply = false;
  auto results = sync_hosts(t, source, settings);
  for (size_t h = 0; h < report.hosts.size(); ++h) {
    const SyncHostResult& r = results[h];
    if (std::find(connected.begin(), connected.end(), h) == connected.end())
      report.hosts[h].set("sync", CheckStatus::kSkip, "not checked: the host is not connected");
    else if (!r.error.empty())
      report.hosts[h].set("sync", CheckStatus::kFail,
                          fmt::format("cannot compare {}: {}", source.dests[h], r.error));
    else if (r.differ == 0)
      report.hosts[h].set("sync", CheckStatus::kPass, fmt::format("{} in sync", source.dir),
                          "in sync");
    else
      report.hosts[h].set("sync", CheckStatus::kWarn,
                          fmt::format("{} paths of {} differ in {} (a run with --sync sends them)",
                                      r.differ, source.dir, source.dests[h]));
  }
}

}  // namespace

void check_connected_hosts(Transport& transport, const std::vector<size_t>& connected,
                           const std::vector<HostExpectation>& expectations, const Options& options,
                           size_t master, CheckReport& report, std::vector<ProbeFacts>& facts) {
  Session s(transport, connected, expectations, options, master);
  s.run();
  for (size_t h : connected) fill_probe(report.hosts[h], expectations[h], s, h, facts[h]);
  fill_port(report, s, connected, master, expectations[master].master_port);
}

int check_cluster(const Options& options, const Cluster&, Plan& plan, const JobLauncher& launch) {
  validate_imports(options.imports);
  std::vector<HostExpectation> es;
  for (size_t h = 0; h < plan.hosts.size(); ++h) es.push_back(expectation_for(plan, h, options));
  size_t master = master_index(plan);
  CheckReport report =
      empty_report(plan, options.imports, "not checked: the host is not connected");

  std::optional<SyncSource> sync;
  if (options.sync) {
    std::vector<std::string> workdirs;
    for (const auto& h : plan.hosts) workdirs.push_back(h.host.workdir);
    sync = make_sync_source(options, workdirs);
  }

  std::vector<SshEndpoint> endpoints;
  for (const auto& h : plan.hosts) endpoints.push_back(endpoint_of(h.host));
  auto transport = host_transport(options, std::move(endpoints), ssh_settings(options));
  HostTransport& pool = *transport;
  auto failures = pool.connect_all(std::vector<int>(plan.hosts.size(), 1));
  std::vector<size_t> connected;
  std::vector<const ProbeFacts*> facts_of(plan.hosts.size(), nullptr);
  std::vector<ProbeFacts> facts(plan.hosts.size());
  for (size_t h = 0; h < plan.hosts.size(); ++h) {
    auto verdicts = failures[h] ? classify_connect_failure(*failures[h], h, pool.warnings())
                                : connected_checks(h, pool.warnings());
    for (auto& r : verdicts) report.hosts[h].set(r.name, r.status, r.detail, r.value);
    if (failures[h]) continue;
    connected.push_back(h);
    facts_of[h] = &facts[h];
  }
  check_connected_hosts(pool, connected, es, options, master, report, facts);
  if (sync) fill_sync(report, pool, *sync, connected);
  if (options.perf) {
    report.perf = run_perf_test(pool, connected, es, options, report);
    for (size_t h = 0; h < plan.hosts.size(); ++h)
      if (!report.perf->hosts[h])
        report.hosts[h].set("perf", CheckStatus::kSkip, "not tested: the host is not connected");
  }
  if (options.net) report.net = net_check(pool, connected, es, facts, options, report);
  pool.disconnect_all();
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
  if (options.net_collective)
    check_collective(options, plan, es, connected.size() == plan.hosts.size(), launch, report);

  std::string text = options.json ? format_json(report)
                                  : format_table(report, isatty(1) && !std::getenv("NO_COLOR"));
  if (report.perf && !options.json) text += format_perf(*report.perf, report);
  if (report.net && !options.json) text += format_net(*report.net, report);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  return check_exit_code(report);
}

}  // namespace msrun_ssh
