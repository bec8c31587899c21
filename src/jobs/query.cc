// What the hosts say about a detached job's processes (src/remote/job_state.sh), and how `status`
// and `list` show it.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <string.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/events.h"
#include "msrun_ssh/jobs.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

// The longest last line `status` prints in its table.
constexpr size_t kTableLastLine = 60;

template <typename T>
std::optional<T> number(std::string_view word) {
  T v{};
  auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (word.empty() || ec != std::errc() || p != word.data() + word.size()) return std::nullopt;
  return v;
}

// Splits off the first space-separated word of `line`.
std::string_view next_word(std::string_view& line) {
  size_t sp = line.find(' ');
  std::string_view w = line.substr(0, sp);
  line = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
  return w;
}

std::optional<RemoteProcess> parse_proc(std::string_view line) {
  RemoteProcess p;
  p.rank_word = next_word(line);
  std::string_view pid = next_word(line);
  p.state = next_word(line);
  std::string_view status = next_word(line), ticks = next_word(line);
  p.last_line = line;
  if (p.rank_word.empty() || p.state.empty() || ticks.empty()) return std::nullopt;
  p.pid = number<long>(pid);
  p.status = number<int>(status);
  p.ticks = number<long>(ticks);
  return p;
}

std::string stem_of(const JobRecord& r, const JobProcess& p) {
  return detached_state_stem(p.log, r.id, rank_word(p.rank));
}

ProcessStatus status_of(const JobProcess& p, const std::string& host, const RemoteProcess* rp,
                        long hz) {
  ProcessStatus s;
  s.rank = p.rank;
  s.host = host;
  if (!rp) {
    s.state = "unknown";
    return s;
  }
  s.pid = rp->pid;
  s.status = rp->status;
  s.last_line = rp->last_line;
  if (rp->state == "alive") {
    s.state = "alive";
    if (rp->ticks && hz > 0) s.cpu_s = static_cast<double>(*rp->ticks) / static_cast<double>(hz);
  } else if (rp->status && *rp->status > 128 && *rp->status < 128 + 65) {
    s.state = "killed";
    const char* name = sigabbrev_np(*rp->status - 128);
    s.signal = name ? name : std::to_string(*rp->status - 128);
  } else {
    s.state = rp->status ? "exited" : "unknown";
  }
  return s;
}

// The statuses of the processes of host `h` from its answer (nullopt: no usable answer, `why`).
void host_statuses(const JobRecord& r, size_t h, const std::optional<RemoteState>& state,
                   const std::string& why, std::vector<ProcessStatus>& rows) {
  for (size_t i = 0; i < r.processes.size(); ++i) {
    const JobProcess& p = r.processes[i];
    if (p.host != h) continue;
    const std::string address = host_key(r.hosts[h]);
    if (!state) {
      rows[i] = {p.rank,       address, std::nullopt, "unreachable", std::nullopt, "",
                 std::nullopt, "",      why};
      continue;
    }
    const RemoteProcess* rp = nullptr;
    for (const auto& x : state->processes)
      if (x.rank_word == rank_word(p.rank)) rp = &x;
    rows[i] = status_of(p, address, rp, state->hz);
  }
}

std::string state_text(const ProcessStatus& s) {
  if (s.state == "killed") return fmt::format("killed (SIG{}, status {})", s.signal, *s.status);
  if (s.state == "exited") return fmt::format("exited ({})", *s.status);
  if (s.state == "unreachable") return fmt::format("unreachable: {}", s.why);
  return s.state;
}

std::string cut(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  return fmt::format("{}...", text.substr(0, max - 3));
}

std::string process_label(int rank) { return rank < 0 ? "sched" : std::to_string(rank); }

}  // namespace

std::string job_state_command(const JobRecord& record, size_t host) {
  std::vector<std::string> words{"msrun-ssh-state", record.id};
  for (const auto& p : record.processes)
    if (p.host == host) words.insert(words.end(), {rank_word(p.rank), stem_of(record, p), p.log});
  std::string script = fmt::format("{}{}", remote::kSweepSh, remote::kJobStateSh);
  return fmt::format("exec sh -c {} {}", shell_quote(script), shell_join(words));
}

std::optional<RemoteState> parse_job_state(std::string_view text) {
  RemoteState s;
  bool hz = false, alive = false;
  for (std::string_view line : split_lines(text)) {
    std::string_view kind = next_word(line);
    if (kind == "hz") {
      auto v = number<long>(line);
      hz = v.has_value();
      s.hz = v.value_or(100);
    } else if (kind == "alive") {
      auto v = number<long>(line);
      alive = v.has_value();
      s.alive = v.value_or(0);
    } else if (kind == "proc") {
      auto p = parse_proc(line);
      if (!p) return std::nullopt;
      s.processes.push_back(std::move(*p));
    }
  }
  if (!hz || !alive) return std::nullopt;
  return s;
}

std::string job_logs_command(const JobRecord& record, size_t process, bool follow) {
  std::string script = fmt::format("{}{}", remote::kSweepSh, remote::kJobLogsSh);
  return fmt::format("exec sh -c {} {}", shell_quote(script),
                     shell_join({"msrun-ssh-logs", record.id, record.processes.at(process).log,
                                 follow ? "follow" : "once"}));
}

std::vector<ProcessStatus> query_processes(Transport& transport, const JobRecord& record,
                                           const std::vector<std::string>& unreachable,
                                           double timeout_s) {
  std::vector<BatchCommand> commands;
  for (size_t h = 0; h < record.hosts.size(); ++h)
    if (unreachable.at(h).empty()) commands.push_back({h, job_state_command(record, h)});
  auto results = run_batch(transport, commands, timeout_s);
  std::vector<ProcessStatus> rows(record.processes.size());
  size_t next = 0;
  for (size_t h = 0; h < record.hosts.size(); ++h) {
    if (!unreachable[h].empty()) {
      host_statuses(record, h, std::nullopt, unreachable[h], rows);
      continue;
    }
    const BatchResult& r = results[next++];
    auto state = r.status == 0 ? parse_job_state(r.out) : std::nullopt;
    std::string why = r.why.empty() ? "no answer" : r.why;
    host_statuses(record, h, state, why, rows);
  }
  return rows;
}

std::string format_status(const JobRecord& record, const std::vector<ProcessStatus>& rows) {
  size_t host_w = 4;
  for (const auto& s : rows) host_w = std::max(host_w, s.host.size());
  std::string text = fmt::format("job {} ({}, started {})\n", record.id,
                                 record.detached ? "detached" : "attached", record.started);
  text += fmt::format("{:<{}}  {:>5}  {:>8}  {:<28}  {:>8}  {}\n", "host", host_w, "rank", "pid",
                      "state", "cpu", "last line");
  for (const auto& s : rows)
    text += fmt::format("{:<{}}  {:>5}  {:>8}  {:<28}  {:>8}  {}\n", s.host, host_w,
                        process_label(s.rank), s.pid ? std::to_string(*s.pid) : "-", state_text(s),
                        s.cpu_s ? fmt::format("{:.1f}s", *s.cpu_s) : "-",
                        cut(s.last_line, kTableLastLine));
  return text;
}

nlohmann::json status_json(const JobRecord& record, const std::vector<ProcessStatus>& rows) {
  nlohmann::json procs = nlohmann::json::array();
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  for (const auto& s : rows)
    procs.push_back(
        {{"host", s.host},
         {"rank", rank_json(s.rank)},
         {"pid", opt(s.pid)},
         {"state", s.state},
         {"exit_status", opt(s.status)},
         {"signal", s.signal.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.signal)},
         {"cpu_seconds", opt(s.cpu_s)},
         {"last_line", s.last_line},
         {"why", s.why}});
  return {{"id", record.id},
          {"detached", record.detached},
          {"started", record.started},
          {"processes", procs}};
}

std::string job_state(const JobRecord& record, const std::vector<ProcessStatus>& rows,
                      bool launcher_alive) {
  if (!record.detached) {
    if (record.exit_status) return fmt::format("ended (exit {})", *record.exit_status);
    return launcher_alive ? "running" : "ended (launcher gone)";
  }
  if (record.starting && launcher_alive) return "starting";
  std::set<std::string> lost;
  size_t alive = 0, failed = 0, unknown = 0;
  for (const auto& s : rows) {
    if (s.state == "unreachable") lost.insert(s.host);
    alive += s.state == "alive";
    failed += s.state == "killed" || (s.state == "exited" && s.status != 0);
    // Gone without its exit status written (its host rebooted, its keeper was SIGKILLed): not a
    // success.
    unknown += s.state == "unknown";
  }
  if (!lost.empty()) return fmt::format("unknown (host {} unreachable)", fmt::join(lost, ", "));
  if (alive > 0) return fmt::format("running ({}/{} alive)", alive, rows.size());
  if (failed > 0 && unknown > 0)
    return fmt::format("ended ({} failed, {} without an exit status)", failed, unknown);
  if (unknown > 0) return fmt::format("ended ({} without an exit status)", unknown);
  return failed > 0 ? fmt::format("ended ({} failed)", failed) : std::string("ended (all exit 0)");
}

std::string format_job_list(const std::vector<JobListing>& jobs) {
  std::string text = fmt::format("{:<24}  {:<24}  {:>5}  {:>9}  {}\n", "id", "started", "hosts",
                                 "processes", "state");
  for (const auto& j : jobs)
    text += fmt::format("{:<24}  {:<24}  {:>5}  {:>9}  {}{}\n", j.record.id, j.record.started,
                        j.record.hosts.size(), j.record.processes.size(), j.state,
                        j.record.detached ? "" : " [attached]");
  return text;
}

nlohmann::json job_list_json(const std::vector<JobListing>& jobs) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& j : jobs)
    list.push_back({{"id", j.record.id},
                    {"started", j.record.started},
                    {"detached", j.record.detached},
                    {"hosts", j.record.hosts.size()},
                    {"processes", j.record.processes.size()},
                    {"state", j.state}});
  return list;
}

}  // namespace msrun_ssh
