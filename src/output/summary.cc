// The end of a run in words: Python tracebacks and stack dumps caught in the ranks' output, and the
// summary table, failures grouped by what they share.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/binding.h"
#include "msrun_ssh/output.h"

namespace msrun_ssh {

namespace {

constexpr std::string_view kTracebackStart = "Traceback (most recent call last):";
constexpr std::string_view kChainLines[] = {
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:"};

bool is_chain_line(std::string_view line) {
  return line == kChainLines[0] || line == kChainLines[1];
}

// What a group of failures shares: the status and the text, with the numbers of messages blurred
// (ranks, pids, ports differ between processes) but a frame's "line N" kept.
std::string group_key(const SummaryRow& r) {
  // The lines kept after the exception line count too: NCCL's "Last error:" and MindSpore's
  // error codes tell failures with the same first line apart.
  const auto& text = r.traceback.empty()
                         ? std::vector<std::string>(r.last_lines.begin(), r.last_lines.end())
                         : r.traceback;
  std::string key = r.status;
  for (const auto& line : text) {
    key += '\n';
    bool frame = line.rfind("  File \"", 0) == 0;
    for (size_t i = 0; i < line.size(); ++i) {
      bool digit = line[i] >= '0' && line[i] <= '9';
      if (!digit || frame) {
        key += line[i];
      } else if (key.back() != '#') {
        key += '#';
      }
    }
  }
  return key;
}

// Rows grouped by `key`, the groups in the order their first row came.
using RowGroups = std::vector<std::vector<const SummaryRow*>>;
template <typename Key>
RowGroups group_rows(const std::vector<const SummaryRow*>& rows, Key key) {
  RowGroups groups;
  std::map<std::string, size_t> index;
  for (const SummaryRow* r : rows) {
    auto [it, added] = index.emplace(key(*r), groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(r);
  }
  return groups;
}

// "rank 3 on HOST" for one row; "ranks 0-2,4 (4 processes), e.g. rank 0 on HOST" for several.
std::string group_label(const std::vector<const SummaryRow*>& g) {
  if (g.size() == 1) return fmt::format("{} on {}", g[0]->process, g[0]->host);
  std::vector<int> ranks;
  ranks.reserve(g.size());
  for (const SummaryRow* r : g) ranks.push_back(r->rank);
  return fmt::format("{}, e.g. {} on {}", describe_ranks(ranks), g[0]->process, g[0]->host);
}

void append_lines(std::string& out, const SummaryRow& r) {
  const bool tb = !r.traceback.empty();
  if (tb)
    for (const auto& l : r.traceback) out += l + "\n";
  else
    for (const auto& l : r.last_lines) out += l + "\n";
}

}  // namespace

void TracebackCatcher::push(std::string_view line) {
  last_blank_ = line.empty();
  if (tail_.empty() && head_.size() < kHeadLines) {
    head_.emplace_back(line);
    return;
  }
  tail_.emplace_back(line);
  if (tail_.size() > kMaxLines - kHeadLines - 1) {  // one line says how many are left out
    tail_.pop_front();
    ++left_out_;
  }
}

std::vector<std::string> TracebackCatcher::lines() const {
  std::vector<std::string> out(head_.begin(), head_.end());
  if (left_out_ > 0) out.push_back(fmt::format("  ... {} more lines ...", left_out_));
  out.insert(out.end(), tail_.begin(), tail_.end());
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

void TracebackCatcher::feed(std::string_view line) {
  // Also at the end of a line: after progress-bar redraws (tqdm's bar has no newline yet when
  // Python prints the traceback), after an unfinished stderr write ("loading ckpt... "); not
  // inside an exception group ("    | Traceback ...": blanks, '|' and '+' before it).
  std::string_view before =
      line.substr(0, line.size() - std::min(line.size(), kTracebackStart.size()));
  if (line.ends_with(kTracebackStart) &&
      (before.empty() || before.find_first_not_of(" |+") != std::string_view::npos)) {
    if (state_ != State::kChained) {
      head_.clear();
      tail_.clear();
      left_out_ = 0;
    }
    push(kTracebackStart);
    state_ = State::kFrames;
    return;
  }
  switch (state_) {
    case State::kIdle:
      break;
    case State::kFrames:
      push(line);
      // Frames are indented; the first line that is not is the exception.
      if (!line.empty() && line[0] != ' ') {
        state_ = State::kMessage;
        message_lines_ = 0;
      }
      break;
    case State::kMessage:
      if (last_blank_ && is_chain_line(line)) {
        push(line);
        state_ = State::kChained;
      } else if (message_lines_ < kMessageLines) {
        push(line);
        ++message_lines_;
      } else {
        state_ = State::kIdle;
      }
      break;
    case State::kChained:
      if (!line.empty())
        state_ = State::kIdle;  // the chained traceback never came
      else
        push(line);
      break;
  }
}

void StackCatcher::feed(std::string_view line) {
  if (line.ends_with("Fatal Python error: Aborted")) {  // after a progress bar's redraws too
    capturing_ = true;
    stack_.clear();
    return;
  }
  if (!capturing_) return;
  bool thread = line.rfind("Thread 0x", 0) == 0 || line.rfind("Current thread 0x", 0) == 0;
  bool frame = line.rfind("  File ", 0) == 0 || line.rfind("  <", 0) == 0;
  if (!(line.empty() || thread || frame)) {
    capturing_ = false;
    return;
  }
  if (line.empty() && stack_.empty()) return;
  if (stack_.size() < TracebackCatcher::kMaxLines) stack_.emplace_back(line);
}

// Stacks of different processes differ in their thread ids, addresses and LWP numbers only:
// blurred for grouping ("0x" and the hex digits after it, the digits after "LWP ").
static std::string stack_key(const std::vector<std::string>& stack) {
  std::string key;
  for (const auto& line : stack) {
    for (size_t i = 0; i < line.size(); ++i) {
      key += line[i];
      bool hex = line.compare(i, 2, "0x") == 0;
      if (!hex && line.compare(i, 4, "LWP ") != 0) continue;
      size_t from = i + (hex ? 2 : 4);
      size_t end = line.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789", from);
      key += hex ? "xX" : "WP X";
      i = (end == std::string::npos ? line.size() : end) - 1;
    }
    key += '\n';
  }
  return key;
}

std::string format_stack_groups(const std::vector<SummaryRow>& rows, std::string_view title) {
  std::vector<const SummaryRow*> with;
  for (const auto& r : rows)
    if (!r.stacks.empty()) with.push_back(&r);
  std::string out;
  for (const auto& g : group_rows(with, [](const SummaryRow& r) { return stack_key(r.stacks); })) {
    out += fmt::format("--- {} of {} ---\n", title, group_label(g));
    for (const auto& l : g[0]->stacks) out += l + "\n";
  }
  return out;
}

std::string format_stacks(const std::vector<SummaryRow>& rows) {
  std::string out = format_stack_groups(rows, "Python stacks");
  if (out.empty()) return "";
  size_t without = 0;
  for (const auto& r : rows) without += r.stacks.empty() ? 1 : 0;
  if (without > 0)
    out += fmt::format("--- no Python stack from {} process{} (not Python, or already ended) ---\n",
                       without, without == 1 ? "" : "es");
  return out;
}

std::string describe_ranks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  bool scheduler = !ranks.empty() && ranks.front() < 0;
  // Several processes of one rank (a rank's children) name it once.
  std::vector<int> workers;
  for (int r : ranks)
    if (r >= 0 && (workers.empty() || workers.back() != r)) workers.push_back(r);
  std::string out;
  if (scheduler) out = "scheduler";
  if (!workers.empty()) {
    if (!out.empty()) out += ", ";
    out += workers.size() == 1 ? fmt::format("rank {}", workers[0])
                               : fmt::format("ranks {}", format_cpu_list(workers));
  }
  if (ranks.size() > 1) out += fmt::format(" ({} processes)", ranks.size());
  return out;
}

const LogGap* first_incomplete_log(const std::vector<SummaryRow>& rows) {
  for (const SummaryRow& r : rows)
    if (r.log_gap.missing > 0 || !r.log_gap.close_error.empty()) return &r.log_gap;
  return nullptr;
}

std::string format_summary(const std::vector<SummaryRow>& rows) {
  size_t wh = 4, wp = 7, ws = 6;
  for (const auto& r : rows) {
    wh = std::max(wh, r.host.size());
    wp = std::max(wp, r.process.size());
    ws = std::max(ws, r.status.size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>9}\n", "host", wh, "process", wp,
                                "status", ws, "time");
  for (const auto& r : rows)
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>8.1f}s\n", r.host, wh, r.process, wp, r.status,
                       ws, r.seconds);
  const SummaryRow* root = nullptr;
  size_t torn_down = 0;
  std::vector<const SummaryRow*> failed;
  for (const auto& r : rows) {
    torn_down += r.torn_down ? 1 : 0;
    if (r.failed && r.root_cause && !root)
      root = &r;
    else if (r.failed)
      failed.push_back(&r);
  }
  if (root) {
    const char* what = !root->error_message.empty() ? " (its error file)"
                       : root->traceback.empty()    ? ""
                                                    : " (its traceback)";
    out += fmt::format("--- root cause: {} on {}: {}{} ---\n", root->process, root->host,
                       root->status, what);
    // The error file's message, unless the lines below hold it (its own traceback does).
    std::string_view said = std::string_view(root->error_message);
    said = said.substr(0, said.find('\n'));
    auto holds = [&](const auto& lines) {
      return std::any_of(lines.begin(), lines.end(),
                         [&](const std::string& l) { return l.find(said) != l.npos; });
    };
    if (!said.empty() &&
        !(root->traceback.empty() ? holds(root->last_lines) : holds(root->traceback)))
      out += fmt::format("error file: {}\n", root->error_message);
    append_lines(out, *root);
  }
  for (const auto& g : group_rows(failed, group_key)) {
    const SummaryRow& e = *g.front();
    if (e.traceback.empty() && e.last_lines.empty()) continue;  // the table says it all
    out += fmt::format("--- {}{}: {} ---\n", root ? "also failed: " : "failed: ", group_label(g),
                       e.status);
    append_lines(out, e);
  }
  if (torn_down > 0 && (root || !failed.empty()))
    out += fmt::format("--- ended by the teardown: {} process{} ---\n", torn_down,
                       torn_down == 1 ? "" : "es");
  for (const auto& r : rows) {
    if (r.log_gap.missing > 0)
      out += fmt::format(
          "--- incomplete log: {} ({} on {}) misses {} bytes ({}); it holds {} bytes ---\n",
          r.log_gap.path, r.process, r.host, r.log_gap.missing, r.log_gap.error, r.log_gap.written);
    if (!r.log_gap.close_error.empty())
      out += fmt::format(
          "--- log may be incomplete: {} ({} on {}): closing it failed ({}); {} bytes were "
          "written to it ---\n",
          r.log_gap.path, r.process, r.host, r.log_gap.close_error, r.log_gap.written);
  }
  return out + format_stacks(rows);
}

}  // namespace msrun_ssh
