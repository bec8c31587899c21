// Job records: what a run writes about itself, and reading it back.
#include <errno.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <tuple>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/events.h"
#include "msrun_ssh/host_source.h"
#include "msrun_ssh/jobs.h"

namespace msrun_ssh {
namespace {

const char* policy_word(const std::optional<HostKeyPolicy>& p) {
  if (!p) return "";
  return *p == HostKeyPolicy::kYes ? "yes" : *p == HostKeyPolicy::kAcceptNew ? "accept-new" : "no";
}

std::optional<HostKeyPolicy> policy_of(const std::string& word) {
  if (word == "yes") return HostKeyPolicy::kYes;
  if (word == "accept-new") return HostKeyPolicy::kAcceptNew;
  if (word == "no") return HostKeyPolicy::kNo;
  return std::nullopt;
}

// A record's whole number in lo..hi, else the record is refused: a record may be edited by hand,
// and a fraction or 1e300 converted unchecked would be undefined.
long long whole(const nlohmann::json& v, std::string_view what, long long lo, long long hi) {
  bool in = false;
  if (v.is_number_unsigned()) {
    auto u = v.get<unsigned long long>();
    in = hi >= 0 && u <= static_cast<unsigned long long>(hi) &&
         (lo <= 0 || u >= static_cast<unsigned long long>(lo));
  } else if (v.is_number_integer()) {
    auto n = v.get<long long>();
    in = n >= lo && n <= hi;
  }
  if (!in)
    throw InputError(fmt::format("{} {} is not a whole number in {}..{}", what, v.dump(), lo, hi));
  return v.get<long long>();
}

constexpr long long kIntMax = std::numeric_limits<int>::max();

nlohmann::json host_json(const JobHost& h) {
  const SshEndpoint& e = h.endpoint;
  return {{"address", e.address},
          {"user", e.user},
          {"port", e.port ? nlohmann::json(*e.port) : nlohmann::json(nullptr)},
          {"identity_file", e.identity_file},
          {"known_hosts", e.known_hosts},
          {"node_rank", h.node_rank},
          {"workdir", h.workdir},
          {"shares_address", h.shares_address}};
}

JobHost host_of(const nlohmann::json& j) {
  JobHost h;
  h.endpoint.address = j.at("address").get<std::string>();
  h.endpoint.user = j.value("user", "");
  if (j.contains("port") && !j["port"].is_null())
    h.endpoint.port = static_cast<int>(whole(j["port"], "port", 1, 65535));
  h.endpoint.identity_file = j.value("identity_file", "");
  h.endpoint.known_hosts = j.value("known_hosts", "");
  h.node_rank = static_cast<int>(whole(j.at("node_rank"), "node_rank", 0, kIntMax));
  h.workdir = j.value("workdir", "");
  h.shares_address = j.value("shares_address", false);  // since it was recorded
  return h;
}

// mkdir -p with mode 0700 for every directory made.
bool make_dirs(const std::string& dir) {
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
    if (pos == std::string::npos) return true;
  }
}

JobRecord read_record_file(const std::string& path) {
  std::string why;
  std::optional<std::string> text = read_whole_file(path, 64 << 20, why);
  if (!text) throw InputError(fmt::format("cannot read {}: {}", path, why));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's text without its "[json.exception.parse_error.101] " tag.
    std::string_view what = e.what();
    if (size_t tag = what.find("] "); tag != std::string_view::npos) what.remove_prefix(tag + 2);
    throw InputError(fmt::format("{}: not a job record: invalid JSON: {}", path, what));
  }
  return record_from_json(j, path);
}

}  // namespace

std::string this_machine() {
  utsname u{};
  return ::uname(&u) == 0 ? std::string(u.nodename) : std::string();
}

std::optional<ProcessStat> process_stat(long pid) {
  std::optional<std::string> text = read_whole_file(fmt::format("/proc/{}/stat", pid));
  if (!text) return std::nullopt;
  // "PID (COMM) STATE ...": the command name may hold ")" and blanks, so it ends at the last ")".
  size_t open = text->find('('), close = text->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcessStat st;
  st.comm = text->substr(open + 1, close - open - 1);
  // The fields after it: state (3rd) ... starttime (22nd).
  std::istringstream fields(text->substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3) st.state = field[0];
    if (i == 22) st.start_ticks = std::strtoll(field.c_str(), nullptr, 10);
  }
  return st;
}

long long process_start_ticks(long pid) {
  std::optional<ProcessStat> st = process_stat(pid);
  return st ? st->start_ticks : 0;
}

std::string jobs_dir(const EnvLookup& getenv) {
  const char* state = getenv("XDG_STATE_HOME");
  if (state && state[0] == '/') return fmt::format("{}/msrun-ssh/jobs", state);
  const char* home = getenv("HOME");
  if (home && home[0] != '\0') return fmt::format("{}/.local/state/msrun-ssh/jobs", home);
  return "";
}

JobRecord make_job_record(const Options& options, const Plan& plan,
                          const std::vector<std::string>& logs, bool detached) {
  JobRecord r;
  r.id = plan.job_id;
  r.hostfile = is_host_source(options.hostfile)
                   ? options.hostfile
                   : absolute_path(options.hostfile, options.launcher_cwd);
  r.argv = options.command_line;
  r.cwd = options.launcher_cwd;
  r.started = format_timestamp(std::chrono::system_clock::now());
  r.detached = detached;
  r.launcher_pid = static_cast<long>(::getpid());
  r.launcher_start = process_start_ticks(r.launcher_pid);
  r.launcher_host = this_machine();
  r.ssh = {options.ssh_config, options.strict_host_key_checking, options.connect_timeout,
           options.fanout, options.jump_fanout};
  for (size_t h = 0; h < plan.hosts.size(); ++h) {
    const HostPlan& hp = plan.hosts[h];
    const Host& host = hp.host;
    r.hosts.push_back(job_host(host, hp.node_rank,
                               hp.processes.empty() ? host.workdir : hp.processes[0].workdir));
    for (const auto& p : hp.processes) {
      size_t i = r.processes.size();
      r.processes.push_back({p.role == Role::kScheduler ? -1 : p.rank, hp.node_rank, h,
                             i < logs.size() ? logs[i] : std::string()});
    }
  }
  return r;
}

JobHost job_host(const Host& host, int node_rank, const std::string& workdir) {
  return {{host.address, host.user, host.port, host.identity_file, host.known_hosts},
          node_rank,
          workdir,
          host.shares_address};
}

std::string host_key(const JobHost& host) {
  return host_key(host.endpoint.address, host.endpoint.port, host.shares_address);
}

nlohmann::json record_json(const JobRecord& r) {
  nlohmann::json hosts = nlohmann::json::array(), spares = nlohmann::json::array(),
                 procs = nlohmann::json::array();
  for (const auto& h : r.hosts) hosts.push_back(host_json(h));
  for (const auto& h : r.spares) spares.push_back(host_json(h));
  for (const auto& p : r.processes)
    procs.push_back({{"rank", rank_json(p.rank)},
                     {"node_rank", p.node_rank},
                     {"host", r.hosts.at(p.host).endpoint.address},
                     {"host_index", p.host},
                     {"log", p.log}});
  return {{"version", 1},
          {"id", r.id},
          {"hostfile", r.hostfile},
          {"argv", r.argv},
          {"cwd", r.cwd},
          {"started", r.started},
          {"detached", r.detached},
          {"starting", r.starting},
          {"launcher_pid", r.launcher_pid},
          {"launcher_start", r.launcher_start},
          {"launcher_host", r.launcher_host},
          {"ssh",
           {{"ssh_config", r.ssh.ssh_config},
            {"strict_host_key_checking", policy_word(r.ssh.strict_host_key_checking)},
            {"connect_timeout", r.ssh.connect_timeout},
            {"fanout", r.ssh.fanout},
            {"jump_fanout", r.ssh.jump_fanout}}},
          {"hosts", hosts},
          {"spares", spares},
          {"processes", procs},
          {"exit_status", r.exit_status ? nlohmann::json(*r.exit_status) : nlohmann::json(nullptr)},
          {"ended", r.ended}};
}

JobRecord record_from_json(const nlohmann::json& j, const std::string& origin) {
  try {
    JobRecord r;
    r.id = j.at("id").get<std::string>();
    r.hostfile = j.value("hostfile", "");
    r.argv = j.value("argv", std::vector<std::string>{});
    r.cwd = j.value("cwd", "");
    r.started = j.value("started", "");
    r.detached = j.at("detached").get<bool>();
    r.starting = j.value("starting", false);
    if (j.contains("launcher_pid"))
      r.launcher_pid = static_cast<long>(whole(j["launcher_pid"], "launcher_pid", 0, kIntMax));
    if (j.contains("launcher_start"))
      r.launcher_start =
          whole(j["launcher_start"], "launcher_start", 0, std::numeric_limits<long long>::max());
    r.launcher_host = j.value("launcher_host", "");
    const nlohmann::json& ssh = j.at("ssh");
    r.ssh = {ssh.value("ssh_config", ""), policy_of(ssh.value("strict_host_key_checking", "")),
             ssh.value("connect_timeout", 10.0), 64, 8};
    // As the command line takes them (a fanout of 0 would never start a connection).
    if (ssh.contains("fanout"))
      r.ssh.fanout = static_cast<int>(whole(ssh["fanout"], "ssh.fanout", 1, 4096));
    if (ssh.contains("jump_fanout"))  // since it was recorded
      r.ssh.jump_fanout = static_cast<int>(whole(ssh["jump_fanout"], "ssh.jump_fanout", 1, 4096));
    if (!(r.ssh.connect_timeout >= 0.1 && r.ssh.connect_timeout <= 3600))
      throw InputError(
          fmt::format("ssh.connect_timeout {} is not 0.1..3600 s", ssh["connect_timeout"].dump()));
    for (const auto& h : j.at("hosts")) r.hosts.push_back(host_of(h));
    if (j.contains("spares"))  // since spares were recorded
      for (const auto& h : j.at("spares")) r.spares.push_back(host_of(h));
    // A record written before the mark was: entries of one address among those it holds.
    mark_shared_addresses({&r.hosts, &r.spares}, [](const JobHost& h) -> const std::string& {
      return h.endpoint.address;
    });
    for (const auto& p : j.at("processes")) {
      std::string host = p.at("host").get<std::string>();
      // By its index: one address may be two hosts on two ports. A record written before the
      // index was has only the address.
      auto it = std::find_if(r.hosts.begin(), r.hosts.end(),
                             [&](const JobHost& h) { return h.endpoint.address == host; });
      if (p.contains("host_index"))
        it = r.hosts.begin() +
             whole(p["host_index"], "host_index", 0, static_cast<long long>(r.hosts.size()) - 1);
      if (it == r.hosts.end() || it->endpoint.address != host)
        throw InputError(fmt::format("process on unknown host {}", host));
      r.processes.push_back(
          {p.at("rank").is_null() ? -1 : static_cast<int>(whole(p["rank"], "rank", 0, kIntMax)),
           static_cast<int>(whole(p.at("node_rank"), "node_rank", 0, kIntMax)),
           static_cast<size_t>(it - r.hosts.begin()), p.value("log", "")});
    }
    if (j.contains("exit_status") && !j["exit_status"].is_null())
      r.exit_status = static_cast<int>(whole(j["exit_status"], "exit_status", 0, 255));
    r.ended = j.value("ended", "");
    return r;
  } catch (const std::exception& e) {
    throw InputError(fmt::format("{}: not a job record: {}", origin, e.what()));
  }
}

bool write_job_record(const std::string& dir, const JobRecord& record, std::FILE* err) {
  std::string path = fmt::format("{}/{}.json", dir, record.id);
  std::string text =
      record_json(record).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::string why = dir.empty()       ? "no place for it"
                    : !make_dirs(dir) ? std::strerror(errno)
                                      : replace_file(path, text, true);
  if (!why.empty())
    std::fprintf(err, "msrun-ssh: warning: cannot write the job record %s: %s\n",
                 dir.empty() ? "(neither XDG_STATE_HOME nor HOME is set)" : path.c_str(),
                 why.c_str());
  return why.empty();
}

JobRecord load_job_record(const std::string& dir, const std::string& id) {
  std::string path = fmt::format("{}/{}.json", dir, id);
  if (::access(path.c_str(), F_OK) != 0)
    throw InputError(fmt::format("no job {} in {}", id, dir.empty() ? "(no jobs directory)" : dir));
  return read_record_file(path);
}

std::vector<JobRecord> load_job_records(const std::string& dir, std::FILE* err) {
  std::vector<JobRecord> records;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string path = entry.path().string();
    if (!path.ends_with(".json")) continue;
    try {
      records.push_back(read_record_file(path));
    } catch (const InputError& e) {
      std::fprintf(err, "msrun-ssh: warning: %s\n", e.what());
    }
  }
  std::sort(records.begin(), records.end(), [](const JobRecord& a, const JobRecord& b) {
    return std::tie(a.started, a.id) > std::tie(b.started, b.id);
  });
  return records;
}

}  // namespace msrun_ssh
