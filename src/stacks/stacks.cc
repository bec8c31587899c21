// Stacks on demand: stack.sh's command and answer, and the report (stacks.h).
#include "msrun_ssh/stacks.h"

#include <fmt/format.h>

#include <charconv>
#include <sstream>

#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/output.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

// "proc PID RANK STATE WCHAN COMMAND" without its "proc ".
std::optional<StackProcess> parse_proc(std::string_view rest) {
  StackProcess p;
  std::string rank;
  std::istringstream in{std::string(rest)};
  if (!(in >> p.pid >> rank >> p.state >> p.wchan) || p.pid <= 0) return std::nullopt;
  std::getline(in >> std::ws, p.command);
  int r = 0;
  auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), r);
  if (rank == "sched")
    p.rank = -1;
  else if (ec == std::errc() && end == rank.data() + rank.size())
    p.rank = r;
  return p;
}

// "S (sleeping)": the letter of /proc/PID/stat with what it means.
std::string describe_state(const std::string& letter) {
  static const std::pair<const char*, const char*> kStates[] = {
      {"R", "running"}, {"S", "sleeping"}, {"D", "uninterruptible"},
      {"T", "stopped"}, {"t", "traced"},   {"Z", "zombie"},
      {"X", "dead"},    {"I", "idle"},     {"P", "parked"},
      {"W", "waking"},  {"K", "wakekill"},
  };
  for (const auto& [l, word] : kStates)
    if (letter == l) return fmt::format("{} ({})", letter, word);
  return letter;
}

std::string process_label(const StackProcess& p) {
  if (!p.rank) return fmt::format("pid {}", p.pid);
  return fmt::format("{} (pid {})", *p.rank < 0 ? "scheduler" : fmt::format("rank {}", *p.rank),
                     p.pid);
}

// "  rank 3 (pid 77) S (sleeping) wchan do_epoll_wait python3: Python stack"
std::string process_line(const StackProcess& p) {
  const char* what = !p.python.empty()   ? "Python stack"
                     : !p.native.empty() ? "native stack"
                                         : "no stack";
  std::string line = fmt::format("  {} {} wchan {} {}: {}", process_label(p),
                                 describe_state(p.state), p.wchan, p.command, what);
  if (!p.notes.empty()) line += fmt::format(" ({})", fmt::join(p.notes, "; "));
  return line + "\n";
}

std::string host_lines(const HostStacks& h) {
  std::string out = "host " + h.address;
  if (!h.name.empty() && h.name != h.address) out += " (" + h.name + ")";
  size_t n = h.processes.size();
  if (!h.trouble.empty())
    out += ": " + h.trouble;
  else if (n == 0)
    out += ": no process of the job";
  else
    out += fmt::format(": {} process{}{}", n, n == 1 ? "" : "es",
                       h.gdb ? "" : ", no native stack tool");
  out += "\n";
  for (const auto& p : h.processes) out += process_line(p);
  return out;
}

// The stacks of every process, grouped: those with a rank by their stack, each one without a
// rank alone (its label is no rank set).
std::string grouped(const std::vector<HostStacks>& hosts, bool python, std::string_view title) {
  std::vector<SummaryRow> ranked, alone;
  for (const auto& h : hosts)
    for (const auto& p : h.processes) {
      SummaryRow row;
      row.host = h.address;
      row.process = process_label(p);
      row.rank = p.rank.value_or(-1);
      row.stacks = python ? p.python : p.native;
      (p.rank ? ranked : alone).push_back(std::move(row));
    }
  std::string out = format_stack_groups(ranked, title);
  for (const auto& row : alone) out += format_stack_groups({row}, title);
  return out;
}

}  // namespace

std::string stack_command(const std::string& job_id, double wait_s, double gdb_s) {
  return fmt::format("exec sh -c {} msrun-ssh-stack {} {} {}", shell_quote(remote::kStackSh),
                     shell_quote(job_id), static_cast<int>(wait_s), static_cast<int>(gdb_s));
}

HostStacks parse_stacks(std::string_view output) {
  HostStacks h;
  StackProcess* p = nullptr;
  for (std::string_view line : split_lines(output)) {
    size_t sp = line.find(' ');
    std::string_view kind = line.substr(0, sp);
    std::string_view rest = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    if (kind == "host") {
      h.name = rest;
    } else if (kind == "gdb") {
      h.gdb = rest == "yes";
    } else if (kind == "proc") {
      std::optional<StackProcess> got = parse_proc(rest);
      p = got ? &h.processes.emplace_back(std::move(*got)) : nullptr;
    } else if (kind == "end") {
      h.complete = true;
    } else if (p && (kind == "py" || kind == "native" || kind == "note")) {
      auto& lines = kind == "py" ? p->python : kind == "native" ? p->native : p->notes;
      lines.emplace_back(rest);
    }
  }
  return h;
}

std::string format_stack_report(const std::string& job_id, const std::vector<HostStacks>& hosts) {
  size_t processes = 0;
  for (const auto& h : hosts) processes += h.processes.size();
  size_t answered = 0;
  for (const auto& h : hosts) answered += h.trouble.empty() ? 1 : 0;
  if (processes == 0 && answered == hosts.size())
    return fmt::format("stacks of job {}: no process of the job on these hosts\n", job_id);
  std::string out =
      fmt::format("stacks of job {}: {} process{} on {} host{}\n", job_id, processes,
                  processes == 1 ? "" : "es", hosts.size(), hosts.size() == 1 ? "" : "s");
  for (const auto& h : hosts) out += host_lines(h);
  return out + grouped(hosts, true, "Python stacks") + grouped(hosts, false, "native stacks");
}

std::string write_stacks_file(const std::string& log_dir, const std::string& stacks, int attempt) {
  if (stacks.empty()) return "";
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::string path =
      fmt::format("{}/stacks-{:04}{:02}{:02}-{:02}{:02}{:02}{}.txt", log_dir, tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  attempt > 1 ? fmt::format("-a{}", attempt) : "");
  return write_text_file(path, stacks) ? path : "";
}

}  // namespace msrun_ssh
