// The SSH edge of a run: prepare every host (prepare.cc), then hand over to the Runner (attached)
// or start everything detached (`stop` and `sync` are in commands.cc).
#include <fcntl.h>
#include <fmt/format.h>
#include <libssh/libssh.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "internal.h"
#include "msrun_ssh/agent.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/batch.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/console_sink.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/events.h"
#include "msrun_ssh/jobs.h"
#include "msrun_ssh/keeper.h"
#include "msrun_ssh/mux.h"
#include "msrun_ssh/runner.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/ssh_settings.h"
#include "msrun_ssh/stacks.h"
#include "msrun_ssh/status_line.h"
#include "msrun_ssh/sync.h"
#include "msrun_ssh/topology.h"

namespace msrun_ssh {

using runner_detail::EarlierAttempts;
using runner_detail::host_names;
using runner_detail::job_hosts;
using runner_detail::JobHosts;
using runner_detail::prepare_hosts;
using runner_detail::wait_for_signal;

namespace {

// The launcher log's first write error (a full --log_dir), or "". spdlog's own handler would print
// each to stderr from the event loop, past the console thread: lines torn into the console's,
// and a stopped console would stall the heartbeats. The job's end says it once (run_job).
std::string& launcher_log_error() {
  static std::string first;
  return first;
}

std::shared_ptr<spdlog::logger> launcher_log(const std::string& log_dir) {
  try {
    auto log = spdlog::basic_logger_st("msrun-ssh", log_dir + "/msrun-ssh.log", true);
    log->set_pattern("%Y-%m-%d %H:%M:%S.%e %v");
    log->flush_on(spdlog::level::info);
    launcher_log_error().clear();
    log->set_error_handler([](const std::string& why) {
      if (launcher_log_error().empty()) launcher_log_error() = why.empty() ? "write error" : why;
    });
    return log;
  } catch (const spdlog::spdlog_ex& e) {
    throw InputError(
        fmt::format("--log_dir={}: cannot write the launcher log: {}", log_dir, e.what()));
  }
}

// Whether a process of a detached start did not start: its starter failed, did not end in time,
// or ended with no exit status (its host lost: whether it started there is not known).
bool start_failed(const BatchResult& r) { return !r.status || *r.status != 0; }

// Each process's log as `log_dir` + its log name ({hostname} resolved from `names`, per host).
std::vector<std::string> log_paths(const Plan& plan, const std::string& log_dir,
                                   const std::vector<std::string>& names) {
  std::vector<std::string> logs;
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    for (const auto& p : plan.hosts[h].processes)
      logs.push_back(log_dir + "/" + with_hostname(p.log_name, names[h]));
  return logs;
}

// The record of a detached job (jobs.h): each log path as its host sees it (workdir resolved).
JobRecord detached_record(const Options& options, const Plan& plan,
                          const std::vector<std::string>& logs) {
  std::vector<std::string> absolute;
  size_t i = 0;
  for (const auto& h : plan.hosts)
    for (const auto& p : h.processes) absolute.push_back(absolute_path(logs[i++], p.workdir));
  return make_job_record(options, plan, absolute, true);
}

}  // namespace

int start_detached(const Options& options, const Plan& plan, Transport& t, int sfd) {
  std::vector<std::string> names = host_names(t, plan, options.connect_timeout);
  std::vector<std::string> logs = log_paths(plan, options.log_dir, names);
  JobRecord record = detached_record(options, plan, logs);
  record.starting = true;
  const std::string dir = jobs_dir(std::getenv);
  write_job_record(dir, record, stderr);
  record.starting = false;
  Batch start(t, [&plan](size_t, const TransportEvent& e) {
    if (e.kind == TransportEvent::Kind::kData && e.is_stderr && e.host < plan.hosts.size())
      std::fprintf(stderr, "msrun-ssh: %s: %.*s", host_key(plan.hosts[e.host].host).c_str(),
                   static_cast<int>(e.data.size()), e.data.data());
  });
  size_t i = 0;
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    for (const auto& p : plan.hosts[h].processes)
      start.start(h, detached_command(p, plan.job_id, logs[i++]));
  int interrupted = 0;
  t.watch_fd(sfd);
  start.wait(t.now_ms() + options.connect_timeout * 1000, [&] {
    interrupted = signal_status(sfd);
    return interrupted == 0;
  });
  t.unwatch_fd(sfd);
  if (interrupted == 0) interrupted = signal_status(sfd);  // one that came as the last one ended
  const auto& results = start.results();
  auto failures = std::count_if(results.begin(), results.end(), start_failed);
  if (failures > 0 || interrupted != 0) {
    if (interrupted != 0)
      std::fprintf(stderr, "msrun-ssh: interrupted while starting job %s; stopping it\n",
                   plan.job_id.c_str());
    else
      std::fprintf(stderr, "msrun-ssh: %d processes failed to start; stopping job %s\n",
                   static_cast<int>(failures), plan.job_id.c_str());
    std::vector<size_t> all;
    for (size_t h = 0; h < plan.hosts.size(); ++h) all.push_back(h);
    // A signal during the stop ends its grace at once (SIGKILL), as a second Ctrl-C does.
    t.watch_fd(sfd);
    auto ended = runner_detail::stop_processes(
        t, all, plan.job_id, options.kill_grace, 1,
        options.kill_grace + options.connect_timeout + 5,
        // A signal after a failure keeps the failure's status; it only cuts the grace short.
        [sfd] { return signal_status(sfd) == 0; });
    t.unwatch_fd(sfd);
    write_job_record(dir, record, stderr);
    // A host whose stop did not finish is named (its processes may still run: `stop --job` ends
    // them later); the start failed all the same (255), or was interrupted.
    for (size_t h = 0; h < ended.size(); ++h)
      if (!ended[h])
        std::fprintf(stderr,
                     "msrun-ssh: %s: the stop of job %s did not finish there; its processes may "
                     "still run (msrun-ssh stop --job %s)\n",
                     host_key(plan.hosts[h].host).c_str(), plan.job_id.c_str(),
                     plan.job_id.c_str());
    return interrupted != 0 ? interrupted : kExitHostFailure;
  }
  write_job_record(dir, record, stderr);
  std::fprintf(stderr,
               "msrun-ssh: job %s started detached: %zu processes on %zu hosts, logs in %s on "
               "each host (relative to its workdir)\nmsrun-ssh: stop it with: msrun-ssh stop "
               "--hostfile %s --job %s\nmsrun-ssh: see it with: msrun-ssh status --job %s, "
               "msrun-ssh logs --job %s\n",
               plan.job_id.c_str(), results.size(), plan.hosts.size(), options.log_dir.c_str(),
               options.hostfile.c_str(), plan.job_id.c_str(), plan.job_id.c_str(),
               plan.job_id.c_str());
  std::printf("%s\n", plan.job_id.c_str());
  return kExitOk;
}

namespace {

// Before attempt k+1 starts, attempt k's per-rank logs move aside ("worker_3.log" ->
// "worker_3.attempt1.log"), so that the last attempt's keep msrun's names and none is truncated.
// Returns the logs' names now (the job's record names them when attempt k+1 writes none).
std::vector<std::string> keep_attempt_logs(const std::string& log_dir,
                                           const std::vector<std::string>& names, int attempt) {
  std::vector<std::string> now;
  for (const auto& name : names) {
    std::string stem =
        name.size() > 4 && name.ends_with(".log") ? name.substr(0, name.size() - 4) : name;
    std::string kept = fmt::format("{}.attempt{}.log", stem, attempt);
    std::string from = fmt::format("{}/{}", log_dir, name);
    std::string to = fmt::format("{}/{}", log_dir, kept);
    bool moved = std::rename(from.c_str(), to.c_str()) == 0;
    if (!moved && errno != ENOENT)
      std::fprintf(stderr, "msrun-ssh: warning: cannot keep %s as %s: %s\n", from.c_str(),
                   to.c_str(), std::strerror(errno));
    now.push_back(moved ? kept : name);
  }
  return now;
}

double monotonic_seconds() { return monotonic_ms() / 1000; }

// The job id of attempt `attempt`: its own from the second on (the watchdogs of an earlier attempt
// never sweep a later one's processes).
std::string attempt_job_id(const std::string& job_id, int attempt) {
  return attempt > 1 ? fmt::format("{}-{}", job_id, attempt) : job_id;
}

// The plan of attempt `attempt`: its job id, and MSRUN_SSH_ATTEMPT.
Plan attempt_plan(Plan p, const Options& options, int attempt) {
  p.job_id = attempt_job_id(p.job_id, attempt);
  if (options.max_restarts > 0)
    for (auto& h : p.hosts)
      for (auto& proc : h.processes) {
        set_env(proc.env, kAttemptVariable, std::to_string(attempt));
        if (p.contract == Contract::kTorch)
          set_env(proc.env, "TORCHELASTIC_RESTART_COUNT", std::to_string(attempt - 1));
      }
  return p;
}

// The attempt's summary as data: the "summary" event and <log_dir>/summary.json (the last
// attempt's, written 0600 through a temporary name; an attempt that started nothing has no
// processes there and no event, `events` null).
void write_summary(const std::string& log_dir, const std::vector<SummaryRow>& rows,
                   const AttemptResult& result, int attempt, EventLog* events) {
  nlohmann::json summary = summary_json(rows);
  summary["attempt"] = attempt;
  summary["exit_status"] = result.status;
  summary["cause"] = result.cause;
  summary["interrupted"] = result.interrupted;
  if (!result.process_restarts.empty()) {
    nlohmann::json restarts = nlohmann::json::array();
    for (const ProcessRestart& r : result.process_restarts)
      restarts.push_back({{"restart", r.number},
                          {"host", r.host},
                          {"process", r.process},
                          {"rank", rank_json(r.rank)},
                          {"cause", r.cause}});
    summary["process_restarts"] = restarts;
  }
  nlohmann::json stragglers = nlohmann::json::array();
  for (const StragglerRecord& r : result.stragglers)
    stragglers.push_back(
        {{"host", r.host},
         {"ranks", r.ranks},
         {"since_s", r.since},
         {"until_s", r.until < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.until)},
         {"demand", r.demand},
         {"median", r.median}});
  summary["stragglers"] = stragglers;
  emit_event(events, "summary", summary);
  summary["version"] = EventLog::kVersion;
  std::string path = log_dir + "/summary.json";
  std::string text = summary.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::string why = replace_file(path, text); !why.empty())
    std::fprintf(stderr, "msrun-ssh: warning: cannot write %s: %s\n", path.c_str(), why.c_str());
}

// The start-up progress on the terminal's status row: every host, every process of the plan.
StartView start_view(StatusLine& row, const Plan& plan) {
  std::vector<std::string> hosts;
  size_t processes = 0;
  for (const auto& h : plan.hosts) {
    hosts.push_back(host_key(h.host));
    processes += h.processes.size();
  }
  return StartView(row, std::move(hosts), processes, monotonic_seconds);
}

// The launch agents of an attempt's hosts (agent.h), over `pool`: a host with an agent pays its
// login rc once for every command of the attempt (the sync, the topology probe, the port check,
// the watchdog, the processes), not once per command. An agent whose launcher is silent as long as
// a watchdog tolerates, with nothing running, ends itself; the launcher's no-op frames every half
// heartbeat keep an agent whose host waits for the others.
std::unique_ptr<AgentTransport> launch_agents(Transport& pool, const Plan& plan,
                                              const Options& options) {
  auto agents = std::make_unique<AgentTransport>(
      pool, plan.hosts.size(), agent_command(2 * options.heartbeat), options.heartbeat / 2);
  if (!use_agent(options.agent))
    for (size_t h = 0; h < plan.hosts.size(); ++h) agents->run_directly(h);
  return agents;
}

// An attempt's hosts, connected and ready to run `plan` (agents goes before pool, which it uses).
struct ReadyHosts {
  Plan plan;
  std::optional<StartView> view;
  std::unique_ptr<HostTransport> pool;
  std::unique_ptr<AgentTransport> agents;
};

// Connects and prepares the hosts of attempt `attempt` (prepare_hosts). At a restart with spares,
// the hosts that cannot be reached are replaced (HostRoster) and everything connects again, until
// every host is ready or no spare is left. Returns nothing when ready, else the attempt's result:
// final (nothing started; a later attempt would meet the same hosts).
std::optional<AttemptResult> connect_attempt(HostRoster& roster, const Options& options,
                                             int attempt, StatusLine& row, ReadyHosts& ready) {
  for (;;) {
    ready.agents.reset();
    ready.pool.reset();
    bool only_use = job_restarts(options) == 0 && !roster.has_spares();
    ready.plan = attempt_plan(only_use ? roster.take_plan() : roster.plan(), options, attempt);
    ready.view.emplace(start_view(row, ready.plan));
    SshSettings settings = ssh_settings(options);
    settings.on_connect_progress = [view = &*ready.view](size_t h, bool ok) {
      if (h == std::string::npos)
        view->tick();
      else
        view->host_done(h, ok);
    };
    JobHosts jh = job_hosts(ready.plan);
    ready.pool = host_transport(options, jh.endpoints, settings);
    ready.agents = launch_agents(*ready.pool, ready.plan, options);
    std::map<std::string, std::string> unreachable;
    EarlierAttempts earlier{roster.plan().job_id, attempt - 1, {}};
    for (size_t h = 0; h < ready.plan.hosts.size(); ++h)
      if (roster.lost_before().count(host_key(ready.plan.hosts[h].host)) != 0)
        earlier.hosts.push_back(h);
    std::optional<runner_detail::PrepareFailure> failed;
    try {
      failed = prepare_hosts(*ready.pool, *ready.agents, ready.plan, jh, options,
                             options.report_bindings && attempt == 1, &row, &unreachable, true,
                             &earlier);
    } catch (const InputError& e) {
      // What a host's probe shows does not fit the job (a manual bind_core's CPU it lacks, no
      // numactl): before anything ran, a usage error (2); at a restart (a spare taken in), the
      // restart cannot happen (255), said as the attempt's end.
      if (attempt == 1) throw;
      return AttemptResult{kExitHostFailure, false, true,
                           fmt::format("cannot restart: {}", e.what())};
    }
    if (!failed) return std::nullopt;
    std::string why = failed->why;
    if (!failed->interrupted && attempt > 1 && roster.has_spares() && !unreachable.empty()) {
      why = roster.replace_unreachable(unreachable);
      if (why.empty()) continue;
    }
    return AttemptResult{failed->status, failed->interrupted, true, why};
  }
}

// An attempt that started nothing (a host unreachable, no spare left): its start_failed event and
// its summary; returns `failed`.
AttemptResult start_failed(const Options& options, EventLog* events, const AttemptResult& failed,
                           int attempt) {
  emit_event(events, "start_failed", {{"exit_status", failed.status}, {"reason", failed.cause}});
  write_summary(options.log_dir, {}, failed, attempt, nullptr);
  return failed;
}

// One attached attempt (its "attempt" event is the caller's): connect, bind, run, summary. `logs`
// gets the log names it wrote.
AttemptResult run_attempt(const Options& options, HostRoster& roster, int attempt, int sfd,
                          const std::shared_ptr<spdlog::logger>& log,
                          std::vector<std::string>& logs, EventLog* events) {
  std::string job_id = attempt_job_id(roster.plan().job_id, attempt);
  log->info("attempt {}: job id {}", attempt, job_id);
  StatusLine row(2, terminal_status_enabled(2, options.quiet));
  row.set_sink(&console_sink());
  ReadyHosts ready;
  if (auto failed = connect_attempt(roster, options, attempt, row, ready))
    return start_failed(options, events, *failed, attempt);
  const Plan& plan = ready.plan;
  HostTransport& pool = *ready.pool;
  StartView& view = *ready.view;
  for (const auto& h : plan.hosts)
    emit_event(events, "host_connected", {{"host", host_key(h.host)}});
  OutputConfig oc;
  oc.log_dir = options.log_dir;
  oc.color = isatty(1) && isatty(2);
  oc.launcher_log = log;
  oc.timestamps = options.timestamps;
  oc.log_timestamps = options.log_timestamps;
  oc.gather = options.output_gather;
  oc.status = &row;
  oc.sink = &console_sink();
  Runner* running = nullptr;  // set while the runner runs: --on_log_error=stop ends its job
  auto stop_cause = [](const LogGap& gap) {
    return fmt::format(
        "cannot write {}: {} (--on_log_error=stop)", gap.path,
        gap.close_error.empty() ? gap.error : "closing it failed: " + gap.close_error);
  };
  oc.on_log_error = [events, &running, &stop_cause,
                     stop = options.log_error_stops](const LogGap& gap) {
    emit_event(events, "log_write_error", log_gap_json(gap));
    if (stop && running) running->fail_soon(kExitFailure, stop_cause(gap));
  };
  Output out(oc);
  AttemptResult result;
  std::vector<SummaryRow> rows;
  try {
    // Over the launch agents the hosts' preparation used (launch_agents).
    Runner runner(plan, options, *ready.agents, out, sfd, options.tail_worker_log.empty() ? -1 : 0);
    running = &runner;
    struct Unset {
      Runner*& r;
      ~Unset() { r = nullptr; }
    } unset{running};
    runner.set_attempt(attempt);
    runner.set_events(events);
    if (std::string dir = jobs_dir(std::getenv); !dir.empty() && options.watch)
      runner.set_top_file(top_file(dir, roster.plan().job_id));
    runner.set_status(&view, options.status_line && row.enabled() ? &row : nullptr);
    result.status = runner.run();
    result.interrupted = runner.interrupted();
    result.cause = runner.cause();
    result.lost_hosts = runner.lost_hosts();
    // Processes that may still run (their ends not confirmed) must not meet a new attempt's; a
    // log that cannot be made or a workdir a host lacks would fail the next attempt alike.
    result.final = runner.logs_failed() || runner.workdir_missing() || runner.unconfirmed();
    result.root_cause_host = runner.root_cause_host();
    result.process_restarts = runner.process_restarts();
    result.stragglers = runner.stragglers();
    if (std::string dir = jobs_dir(std::getenv); !dir.empty())
      std::remove(top_file(dir, roster.plan().job_id).c_str());
    out.flush();       // the logs' last bytes, so that the summary says what they miss
    out.close_logs();  // and what their file system lost (NFS says so at close)
    rows = runner.summary();
    logs = runner.log_names();
    if (plan.contract == Contract::kTorch && result.status != kExitOk)
      result.torch_error = torchelastic_error(rows, static_cast<long long>(std::time(nullptr)));
    // A log that failed only now, as the job ended well: --on_log_error=stop still fails it.
    if (const LogGap* gap = first_incomplete_log(rows);
        gap && options.log_error_stops && result.status == kExitOk) {
      result.status = kExitFailure;
      result.cause = stop_cause(*gap);
      out.message(result.cause);
    }
  } catch (const std::runtime_error& e) {
    out.message(e.what());
    result = {kExitHostFailure, false, true, e.what()};
  }
  out.flush();
  console_sink().drain();  // the job is over: the summary follows every line the sink holds
  std::string summary =
      format_summary(rows) + format_process_restarts(result.process_restarts, options.max_restarts);
  if (job_restarts(options) > 0) summary = fmt::format("attempt {}:\n{}", attempt, summary);
  std::fputs(summary.c_str(), stderr);
  log->info("summary:\n{}exit status {}", summary, result.status);
  if (std::string path = write_stacks_file(options.log_dir, format_stacks(rows), attempt);
      !path.empty())
    std::fprintf(stderr, "msrun-ssh: the stacks are also in %s\n", path.c_str());
  write_summary(options.log_dir, rows, result, attempt, events);
  pool.disconnect_all();
  return result;
}

// The record of an attached job (jobs.h) as it starts: logs on this machine, as the plan names
// them ({hostname} unresolved until the end).
JobRecord record_attached_start(const Options& options, const Plan& plan) {
  std::vector<std::string> names(plan.hosts.size(), std::string(kHostnameToken));
  std::string log_dir = absolute_path(options.log_dir, options.launcher_cwd);
  JobRecord record = make_job_record(options, plan, log_paths(plan, log_dir, names), false);
  write_job_record(jobs_dir(std::getenv), record, stderr);
  return record;
}

// The record at the end: the exit status, the end time and the logs the last attempt wrote.
void record_attached_end(JobRecord& record, const Options& options, int status,
                         const std::vector<std::string>& logs) {
  record.exit_status = status;
  record.ended = format_timestamp(std::chrono::system_clock::now());
  std::string log_dir = absolute_path(options.log_dir, options.launcher_cwd);
  if (logs.size() == record.processes.size())
    for (size_t i = 0; i < logs.size(); ++i) record.processes[i].log = log_dir + "/" + logs[i];
  write_job_record(jobs_dir(std::getenv), record, stderr);
}

}  // namespace

int run_job(const Options& options, Plan& plan) {
  umask(077);
  if (!options.join) {
    JobHosts jh = job_hosts(plan);
    auto pool = host_transport(options, jh.endpoints, ssh_settings(options));
    // The agents carry the start too: a host pays its login rc once, not once per process.
    // From here on a signal waits on `sfd`: the start ends cleanly, stopping what it started.
    int sfd = signal_fd({SIGINT, SIGTERM, SIGHUP});
    auto agents = launch_agents(*pool, plan, options);
    int status = 0;
    if (auto failed = prepare_hosts(*pool, *agents, plan, jh, options, options.report_bindings,
                                    nullptr, nullptr, true))
      status = failed->status;
    else if ((status = signal_status(sfd)) != 0)
      std::fprintf(stderr, "msrun-ssh: interrupted before job %s started: nothing was started\n",
                   plan.job_id.c_str());
    else
      status = start_detached(options, plan, *agents, sfd);
    ::close(sfd);
    return status;
  }
  Output::make_log_dir(options.log_dir);
  std::shared_ptr<spdlog::logger> log = launcher_log(options.log_dir);
  log->info("job {}: {} hosts, {} workers, scheduler {}:{}", plan.job_id, plan.hosts.size(),
            plan.worker_num, plan.master_ip, plan.master_port);
  if (options.watch && (!use_agent(options.agent) || options.transport != TransportKind::kSsh))
    log->info(
        "the straggler watch is off: its sampler runs inside the launch agent, which {} "
        "leaves out",
        options.transport != TransportKind::kSsh ? "--transport srun" : "--agent=False");
  // libssh's messages (SSH_LOG_WARN unless --ssh_debug says otherwise) go to the log only.
  set_ssh_log(options.ssh_debug < 0 ? SSH_LOG_WARN : options.ssh_debug,
              [log](std::string_view m) { log->info("libssh: {}", m); });
  std::unique_ptr<EventLog> events;
  if (!options.events.empty()) events = std::make_unique<EventLog>(options.events);
  std::vector<std::string> hosts;
  for (const auto& h : plan.hosts) hosts.push_back(host_key(h.host));
  emit_event(events.get(), "job",
             {{"job_id", plan.job_id},
              {"hosts", hosts},
              {"workers", plan.worker_num},
              {"master", fmt::format("{}:{}", plan.master_ip, plan.master_port)},
              {"log_dir", options.log_dir},
              {"max_restarts", options.max_restarts}});
  // Ctrl-\ dumps the stacks; Ctrl-Z suspends the job (Runner::on_signal).
  int sfd = signal_fd({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGCONT});
  // The terminal never stops the launcher, which would end the job as a launcher gone: from the
  // background, a write to it goes out whatever `stty tostop` says, and a read of it fails with
  // EIO (Runner::read_stdin waits for the foreground). spawn_program and the local transport give
  // their children an empty mask; libssh's ProxyCommand child keeps this one (and the signalfd's
  // above), as it did.
  sigset_t tty_stops;
  sigemptyset(&tty_stops);
  sigaddset(&tty_stops, SIGTTOU);
  sigaddset(&tty_stops, SIGTTIN);
  pthread_sigmask(SIG_BLOCK, &tty_stops, nullptr);
  JobRecord record = record_attached_start(options, plan);
  std::vector<std::string> logs;
  auto say = [&](const std::string& m) {
    std::fprintf(stderr, "msrun-ssh: %s\n", m.c_str());
    log->info("{}", m);
  };
  HostRoster roster(std::move(plan), options, say);  // `plan` is not used after this
  roster.on_spare_taken([&](const HostPlan& h) {
    record.spares.push_back(job_host(
        h.host, h.node_rank, h.processes.empty() ? h.host.workdir : h.processes[0].workdir));
    write_job_record(jobs_dir(std::getenv), record, stderr);
  });
  AttemptResult last;
  auto attempt = [&](int k) {
    if (k > 1) logs = keep_attempt_logs(options.log_dir, logs, k - 1);
    std::string cannot = k > 1 ? roster.after_attempt(last) : "";
    // Every attempt is named in the events, one that cannot restart too.
    emit_event(events.get(), "attempt",
               {{"attempt", k}, {"job_id", attempt_job_id(roster.plan().job_id, k)}});
    if (!cannot.empty()) {
      say(cannot);
      return last = start_failed(options, events.get(),
                                 AttemptResult{kExitHostFailure, false, true, cannot}, k);
    }
    return last = run_attempt(options, roster, k, sfd, log, logs, events.get());
  };
  RestartHistory history = run_with_restarts(
      job_restarts(options), options.restart_backoff, attempt,
      [sfd](double s) { return wait_for_signal(sfd, s); }, say);
  emit_event(events.get(), "end",
             {{"exit_status", history.status}, {"attempts", history.attempts.size()}});
  // As torchrun's @record: the failed job's root cause, for the scheduler that started it.
  const char* error_file = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (history.status != kExitOk && !last.torch_error.empty() && error_file && *error_file)
    if (std::string why = replace_file(error_file, last.torch_error + "\n"); !why.empty())
      std::fprintf(stderr, "msrun-ssh: warning: cannot write %s: %s\n", error_file, why.c_str());
  record_attached_end(record, options, history.status, logs);
  if (history.attempts.size() > 1) {
    std::string text = format_attempts(history);
    std::fputs(text.c_str(), stderr);
    log->info("{}", text);
  }
  close(sfd);
  set_ssh_log(SSH_LOG_NOLOG, nullptr);  // the sink holds the log file
  log->flush();
  if (!launcher_log_error().empty())
    std::fprintf(stderr, "msrun-ssh: warning: %s/msrun-ssh.log misses messages: %s\n",
                 options.log_dir.c_str(), launcher_log_error().c_str());
  return history.status;
}

}  // namespace msrun_ssh
