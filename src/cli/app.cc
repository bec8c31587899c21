#include "msrun_ssh/app.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string_view>

#include "msrun_ssh/check.h"
#include "msrun_ssh/cli.h"
#include "msrun_ssh/dry_run.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/help.h"
#include "msrun_ssh/host_source.h"
#include "msrun_ssh/jobs.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/runner.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/ssh_config.h"
#include "msrun_ssh/stacks.h"
#include "msrun_ssh/sync.h"
#include "msrun_ssh/watch.h"

namespace msrun_ssh {

std::string new_job_id() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::random_device rd;
  return fmt::format("{:04}{:02}{:02}-{:02}{:02}{:02}-{:06x}", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, rd() & 0xffffff);
}

std::string resolve_ipv4(const std::string& name) {
  in_addr a{};
  if (inet_pton(AF_INET, name.c_str(), &a) == 1) return name;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0 || !res) return "";
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  freeaddrinfo(res);
  return buf;
}

namespace {

// ---- services the drivers share ----------------------------------------------------------------

// What OpenSSH is asked about host `h`: as the pool asks (its answers are kept for the run), so
// that no name is asked twice.
SshQuery ssh_query(const Host& h) {
  return {h.address, h.user, h.port, h.identity_file, h.known_hosts};
}

// The host file's cluster. Without an ssh client libssh reads the ssh config: what it would read
// otherwise than ssh does is refused before anything connects (docs/ssh.md).
Cluster load_cluster(const Options& options) {
  GetEnv getenv = [](const char* n) { return std::getenv(n); };
  Cluster cluster = load_hosts(
      options.hostfile, getenv,
      options.local_worker_num_given ? std::optional(options.local_worker_num) : std::nullopt);
  mark_shared_addresses(cluster);
  // As a host file's keys always do, its counts win over --local_worker_num: said, not silent.
  if (options.local_worker_num_given) {
    size_t counted = 0;
    for (const auto& h : cluster.hosts)
      if (h.local_worker_num && *h.local_worker_num != options.local_worker_num) ++counted;
    if (counted > 0)
      std::fprintf(stderr,
                   "msrun-ssh: warning: --local_worker_num=%d is not used for the %zu of %zu "
                   "hosts whose count %s gives (local_worker_num, slots=N)\n",
                   options.local_worker_num, counted, cluster.hosts.size(), cluster.path.c_str());
  }
  if (options.transport == TransportKind::kSsh && !ssh_client_installed()) {
    std::vector<std::string> names;
    for (const auto* hosts : {&cluster.hosts, &cluster.spares})
      for (const auto& h : *hosts) names.push_back(h.address);
    refuse_what_libssh_misreads(options.ssh_config, names);
  }
  // As ssh warns of an -i file it cannot read, and goes on with the other keys.
  std::set<std::string> said;
  for (const auto* hosts : {&cluster.hosts, &cluster.spares})
    for (const auto& h : *hosts)
      if (!h.identity_file.empty() && ::access(h.identity_file.c_str(), R_OK) != 0) {
        const int why = errno;
        std::string where = h.identity_file_line > 0
                                ? fmt::format("{}:{}", cluster.path, h.identity_file_line)
                                : h.origin;
        if (said.insert(h.identity_file).second)
          std::fprintf(stderr,
                       "msrun-ssh: warning: %s: identity_file %s cannot be read (%s): passed "
                       "over, as ssh passes over an -i file it cannot read\n",
                       where.c_str(), h.identity_file.c_str(), std::strerror(why));
      }
  return cluster;
}

// The plan of a run (or of check's): spares taken, every address resolved. Host file addresses
// may be ssh config aliases: what the alias names (its HostName) is resolved, so that an alias
// never turns into a DNS query for a name that exists only in the config. Every host's HostName is
// asked of OpenSSH at once (names of the same Host lines share one ssh -G): one by one would cost
// one ssh -G per name.
Plan plan_of(const Options& options, Cluster& cluster) {
  take_spares(cluster, options.spares);
  std::map<std::string, std::string> hostnames;
  if (options.transport == TransportKind::kSsh) {
    std::vector<SshQuery> queries;
    for (const auto* hosts : {&cluster.hosts, &cluster.spares})
      for (const auto& h : *hosts) queries.push_back(ssh_query(h));
    if (auto answers = resolve_with_openssh(queries, options.ssh_config, 4, 10)) {
      check_ssh_answers(cluster, *answers);
      for (size_t i = 0; i < queries.size(); ++i)
        if ((*answers)[i].config) hostnames[queries[i].name] = (*answers)[i].config->hostname;
    }
  }
  Resolver resolve = [&options, &hostnames](const std::string& name) {
    auto known = hostnames.find(name);
    return resolve_ipv4(known != hostnames.end() ? known->second
                                                 : ssh_config_hostname(name, options.ssh_config));
  };
  return make_plan(options, cluster, resolve);
}

// --sync in a dry run: where the directory would go on each host, refused as a run refuses it
// (sync_where, a directory that is not there, its excludes); the tree itself is not read (a
// symlink in it that leaves it is refused only by the run). "" without --sync.
std::string dry_run_sync(const Options& options, const Plan& plan) {
  if (!options.sync) return "";
  std::vector<std::string> workdirs;
  for (const auto& h : plan.hosts) workdirs.push_back(h.host.workdir);
  SyncWhere w = sync_where(options.launcher_cwd, options.sync_dir, options.sync_dest,
                           options.task_script, workdirs);
  std::error_code ec;
  if (!std::filesystem::is_directory(w.dir, ec))
    throw InputError(fmt::format("sync: {} is not a directory", w.dir));
  // DIR/.msrunignore and --sync_exclude, read as a run reads them.
  sync_rules(w.dir, options.sync_excludes);
  std::string out = fmt::format("\nsync: {} to each host before anything starts there:\n", w.dir);
  for (size_t i = 0; i < plan.hosts.size(); ++i)
    out += fmt::format("  host {}: {}\n", plan.hosts[i].host.address, w.dests[i]);
  return out;
}

// --dry_run: the plan, and where and how ssh would connect to each host (and spare), from
// OpenSSH's own answer.
int print_dry_run(const Options& options, const Plan& plan, const Cluster& cluster) {
  std::string sync = dry_run_sync(options, plan);
  std::optional<std::vector<SshResolution>> ssh;
  if (options.transport == TransportKind::kSsh) {
    std::vector<SshQuery> queries;
    for (const auto* hosts : {&plan.hosts, &plan.spares})
      for (const auto& h : *hosts) queries.push_back(ssh_query(h.host));
    ssh = resolve_with_openssh(queries, options.ssh_config, 4, 10);
  }
  std::fputs(describe_plan(plan, options, cluster.hosts_from, ssh ? &*ssh : nullptr).c_str(),
             stdout);
  std::fputs(sync.c_str(), stdout);
  return kExitOk;
}

// ---- one driver per command
// ----------------------------------------------------------------------

int drive_run(const Options& options) {
  Plan plan;
  {
    // The host file's hosts are in the plan: not held as well while the job runs (#35).
    Cluster cluster = load_cluster(options);
    plan = plan_of(options, cluster);
    if (options.dry_run) return print_dry_run(options, plan, cluster);
  }
  return run_job(options, plan);
}

// check --dry_run: each host, where ssh would connect (OpenSSH's answer) and what the check
// would look at; nothing connects. (A run's dry run shows processes that check never starts.)
int print_check_dry_run(const Options& options, const Plan& plan) {
  std::string sync = dry_run_sync(options, plan);
  std::optional<std::vector<SshResolution>> ssh;
  if (options.transport == TransportKind::kSsh) {
    std::vector<SshQuery> queries;
    for (const auto& h : plan.hosts) queries.push_back(ssh_query(h.host));
    ssh = resolve_with_openssh(queries, options.ssh_config, 4, 10);
  }
  for (size_t i = 0; i < plan.hosts.size(); ++i) {
    const HostPlan& hp = plan.hosts[i];
    std::string where = hp.host.address;
    if (ssh && (*ssh)[i].config) {
      const SshHostConfig& c = *(*ssh)[i].config;
      where = fmt::format("{}@{}:{}", c.user, c.hostname, c.port);
    }
    size_t workers = 0;
    for (const auto& p : hp.processes) workers += p.role == Role::kWorker ? 1 : 0;
    fmt::print("host {} (node rank {}): {}, workdir {}, {} workers planned\n", host_key(hp.host), i,
               where, hp.processes.empty() ? hp.host.workdir : hp.processes.front().workdir,
               workers);
  }
  std::string extra;
  for (const auto& m : options.imports) extra += ", --import " + m;
  if (options.sync) extra += ", --sync";
  if (options.perf) extra += ", --perf";
  if (options.net) extra += options.net_collective ? ", --net (collective)" : ", --net";
  fmt::print(
      "check: would log in to each of the {} host(s) and check it (docs/check.md){}; "
      "nothing was connected (--dry_run)\n{}",
      plan.hosts.size(), extra, sync);
  return kExitOk;
}

int drive_check(const Options& options) {
  Cluster cluster = load_cluster(options);
  Plan plan = plan_of(options, cluster);
  validate_imports(options.imports);  // the dry run refuses what the check refuses
  if (options.dry_run) return print_check_dry_run(options, plan);
  return check_cluster(options, cluster, plan, run_job_quietly);
}

// How many attempts the recorded job may have run (--max_restarts + 1 for whole-job restarts),
// read from its command line. Parsed without this shell's environment (a variable the job's
// --env forwarded may be unset here); when even so it cannot be parsed, its --max_restarts and
// --restart_policy words are read alone.
int attempts_of(const JobRecord& record) {
  if (record.argv.size() < 2) return 1;
  const std::vector<std::string> args(record.argv.begin() + 1, record.argv.end());
  try {
    CliResult r = parse_args(args, [](const char*) { return ""; });
    return job_restarts(r.options) + 1;
  } catch (const std::exception&) {
  }
  int restarts = 0;
  bool whole_job = true;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    auto value = [&](std::string_view name) -> std::optional<std::string_view> {
      if (a.starts_with(name) && a.size() > name.size() && a[name.size()] == '=')
        return a.substr(name.size() + 1);
      if (a == name && i + 1 < args.size()) return std::string_view(args[i + 1]);
      return std::nullopt;
    };
    if (auto v = value("--max_restarts"))
      restarts = static_cast<int>(std::clamp(std::atol(std::string(*v).c_str()), 0L, 1000L));
    if (auto v = value("--restart_policy")) whole_job = *v != "process";
  }
  return whole_job ? restarts + 1 : 1;
}

// `stop` and `stack` name a job: its hosts come from its record (docs/jobs.md), or from
// --hostfile. Stopping a job whose attached launcher still runs on this machine ends that first.
int drive_stop(Options options) {
  if (options.hostfile.empty()) {
    JobRecord record = load_job_record(jobs_dir(std::getenv), options.job);
    Options from_record = options_from_record(options, record);
    from_record.attempts = attempts_of(record);
    stop_attached_launcher(record, from_record, stdout);
    return stop_job(from_record, cluster_of(record));
  }
  try {
    JobRecord record = load_job_record(jobs_dir(std::getenv), options.job);
    options.attempts = attempts_of(record);
    stop_attached_launcher(record, options, stdout);
  } catch (const InputError&) {  // no record here: the host file is all there is
  }
  return stop_job(options, load_cluster(options));
}

int drive_stack(const Options& options) {
  if (!options.hostfile.empty()) return stack_job(options, load_cluster(options));
  JobRecord record = load_job_record(jobs_dir(std::getenv), options.job);
  return stack_job(options_from_record(options, record), cluster_of(record));
}

int drive_sync(const Options& options) { return sync_job(options, load_cluster(options)); }

int drive(const Options& options) {
  switch (options.command) {
    case Command::kRun:
      return drive_run(options);
    case Command::kCheck:
      return drive_check(options);
    case Command::kStop:
      return drive_stop(options);
    case Command::kStack:
      return drive_stack(options);
    case Command::kSync:
      return drive_sync(options);
    case Command::kList:
      return list_jobs(options);
    case Command::kStatus:
      return show_job_status(options);
    case Command::kLogs:
      return show_job_logs(options);
    case Command::kTop:
      return top_command(options);
  }
  return kExitUsage;
}

}  // namespace

int run_app(const std::vector<std::string>& args) {
  Options options;
  try {
    if (auto text = hidden_output(args)) {
      std::fputs(text->c_str(), stdout);
      return kExitOk;
    }
    GetEnv getenv = [](const char* n) { return std::getenv(n); };
    CliResult cli = parse_args(args, getenv);
    options = std::move(cli.options);
    if (cli.action == CliAction::kHelp) {
      std::fputs(help_text(options.command).c_str(), stdout);
      return kExitOk;
    }
    if (cli.action == CliAction::kVersion) {
      std::printf("msrun-ssh %s\n", MSRUN_SSH_VERSION);
      return kExitOk;
    }
    // libssh's own messages never reach the console: an attached run puts them in msrun-ssh.log
    // once it exists (run_job); check, stop and detached runs show them on stderr only when
    // --ssh_debug asks.
    bool attached = options.command == Command::kRun && options.join && !options.dry_run;
    if (options.ssh_debug >= 0 && !attached)
      set_ssh_log(options.ssh_debug, [](std::string_view m) {
        std::fprintf(stderr, "msrun-ssh: libssh: %.*s\n", static_cast<int>(m.size()), m.data());
      });
    else
      set_ssh_log(kSshLogOff, nullptr);
    char cwd[4096];
    options.launcher_cwd = getcwd(cwd, sizeof cwd) ? cwd : "/";
    options.command_line = {"msrun-ssh"};
    options.command_line.insert(options.command_line.end(), args.begin(), args.end());
    options.job_id = options.command == Command::kStop || options.command == Command::kStack
                         ? options.job
                         : new_job_id();
    return drive(options);
  } catch (const InputError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "msrun-ssh: error: %s\n", printable(e.what()).c_str());
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    // Never an abort with a core dump: what was started ends by its watchdogs (3x --heartbeat).
    std::fflush(stdout);
    std::fprintf(stderr, "msrun-ssh: error: out of memory\n");
    return kExitInternal;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "msrun-ssh: internal error: %s\n", printable(e.what()).c_str());
    return kExitInternal;
  }
}

}  // namespace msrun_ssh
