// The job subcommands over SSH: `list`, `status --job`, `logs --job`, and what `stop --job` takes
// from a record.
#include "msrun_ssh/jobs.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <memory>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/ssh_settings.h"

namespace msrun_ssh {
bool Reached::all() const {
  for (const auto& why : unreachable)
    if (!why.empty()) return false;
  return true;
}

Reached reach(const JobRecord& record, const Options& options) {
  Options o = options_from_record(options, record);
  std::vector<SshEndpoint> endpoints;
  std::vector<int> connections;
  for (size_t h = 0; h < record.hosts.size(); ++h) {
    endpoints.push_back(record.hosts[h].endpoint);
    size_t procs = 0;
    for (const auto& p : record.processes) procs += p.host == h;
    connections.push_back(static_cast<int>(std::max<size_t>(1, (procs + 9) / 10)));
  }
  std::vector<std::string> addresses;
  addresses.reserve(endpoints.size());
  for (const auto& h : record.hosts) addresses.push_back(host_key(h));
  Reached r{host_transport(o, std::move(endpoints), ssh_settings(o)), {}};
  r.unreachable = connect_reaching(*r.pool, connections, addresses);
  return r;
}

namespace {

// Whether the record's launcher ran on another machine (a home shared between machines): its pid
// says nothing here.
bool launched_elsewhere(const JobRecord& record) {
  return !record.launcher_host.empty() && record.launcher_host != this_machine();
}

// Whether the record's launcher is a running msrun-ssh (an exited one not yet reaped by its
// parent, a zombie, has ended): its pid, started when the record says (a reused pid is another
// process, perhaps another job's launcher).
bool launcher_alive(const JobRecord& record) {
  const long pid = record.launcher_pid;
  if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM)) return false;
  std::optional<ProcessStat> st = process_stat(pid);
  return st && (record.launcher_start == 0 || st->start_ticks == record.launcher_start) &&
         st->comm == "msrun-ssh" && st->state != 'Z';
}

std::string records_dir() { return jobs_dir(std::getenv); }

JobRecord load_detached(const Options& options, const char* command) {
  JobRecord record = load_job_record(records_dir(), options.job);
  if (!record.detached)
    throw InputError(fmt::format(
        "{}: job {} ran attached: its processes ended with its launcher; its logs are on this "
        "machine ({})",
        command, record.id, record.processes.empty() ? record.cwd : record.processes.front().log));
  return record;
}

// The exit status of the first signal the signalfd `sfd` holds, else 0.
void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace

Cluster cluster_of(const JobRecord& record) {
  Cluster c;
  c.path = record.hostfile;
  std::vector<JobHost> all = record.hosts;
  all.insert(all.end(), record.spares.begin(), record.spares.end());
  for (const auto& h : all) {
    Host host;
    host.address = h.endpoint.address;
    host.user = h.endpoint.user;
    host.port = h.endpoint.port;
    host.identity_file = h.endpoint.identity_file;
    host.known_hosts = h.endpoint.known_hosts;
    host.workdir = h.workdir;
    host.shares_address = h.shares_address;
    c.hosts.push_back(std::move(host));
  }
  return c;
}

Options options_from_record(Options options, const JobRecord& record) {
  if (options.ssh_config.empty()) options.ssh_config = record.ssh.ssh_config;
  if (!options.strict_host_key_checking)
    options.strict_host_key_checking = record.ssh.strict_host_key_checking;
  if (!options.connect_timeout_given) options.connect_timeout = record.ssh.connect_timeout;
  if (!options.fanout_given) options.fanout = record.ssh.fanout;
  if (!options.jump_fanout_given) options.jump_fanout = record.ssh.jump_fanout;
  if (options.hostfile.empty()) options.hostfile = record.hostfile;
  return options;
}

bool stop_attached_launcher(const JobRecord& record, const Options& options, std::FILE* out) {
  if ((record.detached && !record.starting) || record.exit_status || launched_elsewhere(record) ||
      !launcher_alive(record))
    return false;
  auto pid = static_cast<pid_t>(record.launcher_pid);
  if (::kill(pid, SIGTERM) != 0) return false;
  ::kill(pid, SIGCONT);  // a launcher stopped by Ctrl-Z handles its SIGTERM only once continued
  std::fprintf(out, "job %s: SIGTERM sent to its launcher (process %d); waiting for it to end\n",
               record.id.c_str(), static_cast<int>(pid));
  std::fflush(out);
  const double limit_ms = (options.kill_grace + options.connect_timeout + 30) * 1e3;
  const double start = monotonic_ms();
  while (launcher_alive(record) && monotonic_ms() - start < limit_ms) ::usleep(50 * 1000);
  if (launcher_alive(record)) {
    std::fprintf(out, "job %s: its launcher (process %d) still runs after %.0f s\n",
                 record.id.c_str(), static_cast<int>(pid), limit_ms / 1e3);
    return true;
  }
  std::optional<int> status;
  try {
    status = load_job_record(records_dir(), record.id).exit_status;
  } catch (const InputError&) {
  }
  std::fprintf(out, "job %s: its launcher ended%s\n", record.id.c_str(),
               status ? fmt::format(" (exit {})", *status).c_str() : "");
  return true;
}

int logs_on_hosts(Transport& transport, const JobRecord& record,
                  const std::vector<std::string>& unreachable, std::optional<int> rank, bool follow,
                  Output& output, const std::function<int()>& interrupted, std::FILE* err) {
  std::vector<int> proc_of;  // batch index -> output process
  Batch batch(transport, [&](size_t i, const TransportEvent& e) {
    if (e.kind == TransportEvent::Kind::kData && !e.is_stderr)
      output.data(proc_of[i], false, e.data);
    else if (e.kind == TransportEvent::Kind::kData)
      std::fprintf(err, "msrun-ssh: %.*s", static_cast<int>(e.data.size()), e.data.data());
    else if (e.kind == TransportEvent::Kind::kClosed)
      output.finish(proc_of[i]);
  });
  int code = kExitOk;
  for (size_t i = 0; i < record.processes.size(); ++i) {
    const JobProcess& p = record.processes[i];
    if (rank && p.rank != *rank) continue;
    const std::string address = host_key(record.hosts[p.host]);
    if (!unreachable.at(p.host).empty()) {
      std::fprintf(err, "msrun-ssh: %s: unreachable (%s): no log of %s\n", address.c_str(),
                   unreachable[p.host].c_str(), process_prefix(p.rank, address).c_str());
      code = kExitHostFailure;
      continue;
    }
    proc_of.push_back(
        output.add_process(process_prefix(p.rank, address), "", true, p.rank, address));
    batch.start(p.host, job_logs_command(record, i, follow));
  }
  if (rank && proc_of.empty() && code == kExitOk)
    throw InputError(fmt::format("logs: job {} has no rank {}", record.id, *rank));
  int stopped = 0;
  batch.wait(std::numeric_limits<double>::infinity(), [&] {
    output.flush();
    stopped = interrupted();
    return stopped == 0;
  });
  output.drain();
  if (stopped != 0) return stopped;
  for (const auto& r : batch.results())
    if (r.status != 0) {
      std::fprintf(err, "msrun-ssh: %s: a log could not be read%s%s\n",
                   host_key(record.hosts[r.host]).c_str(), r.why.empty() ? "" : ": ",
                   r.why.c_str());
      code = kExitHostFailure;
    }
  return code;
}

int list_jobs(const Options& options) {
  std::string dir = records_dir();
  std::vector<JobListing> jobs;
  for (auto& record : load_job_records(dir, stderr)) {
    std::vector<ProcessStatus> rows;
    if (record.detached) {
      Reached r = reach(record, options);
      rows = query_processes(*r.pool, record, r.unreachable, record.ssh.connect_timeout + 5);
      r.pool->disconnect_all();
    }
    std::string state = !record.detached && !record.exit_status && launched_elsewhere(record)
                            ? fmt::format("launched on {} (ask there)", record.launcher_host)
                            : job_state(record, rows, launcher_alive(record));
    jobs.push_back({std::move(record), std::move(state)});
  }
  if (options.json)
    print_json(job_list_json(jobs));
  else
    std::fputs(format_job_list(jobs).c_str(), stdout);
  return kExitOk;
}

int show_job_status(const Options& options) {
  JobRecord record = load_detached(options, "status");
  Reached r = reach(record, options);
  auto rows = query_processes(*r.pool, record, r.unreachable, record.ssh.connect_timeout + 5);
  r.pool->disconnect_all();
  if (options.json)
    print_json(status_json(record, rows));
  else
    std::fputs(format_status(record, rows).c_str(), stdout);
  for (const auto& s : rows)
    if (s.state == "unreachable") return kExitHostFailure;
  return kExitOk;
}

int show_job_logs(const Options& options) {
  JobRecord record = load_detached(options, "logs");
  int sfd = signal_fd({SIGINT, SIGTERM, SIGHUP});
  Reached r = reach(record, options);
  r.pool->watch_fd(sfd);
  OutputConfig oc;
  oc.color = isatty(1) && isatty(2);
  Output out(oc);
  int code = logs_on_hosts(
      *r.pool, record, r.unreachable, options.log_rank, options.follow, out,
      [sfd] {
        int signalled = signal_status(sfd);
        // A reader of the output gone (| head) ends it, as it ends tail -f: SIGPIPE's status.
        return signalled != 0 ? signalled : reader_gone(1) ? 128 + SIGPIPE : 0;
      },
      stderr);
  r.pool->unwatch_fd(sfd);
  r.pool->disconnect_all();
  ::close(sfd);
  return code;
}

bool launcher_runs_here(const JobRecord& record) {
  return !launched_elsewhere(record) && launcher_alive(record);
}

}  // namespace msrun_ssh
