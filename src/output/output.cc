#include "msrun_ssh/output.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "msrun_ssh/binding.h"
#include "msrun_ssh/console_sink.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/status_line.h"

namespace msrun_ssh {
namespace {

// Buffers are written out once they reach these sizes, not only at flush(): with hundreds of
// processes flooding output, what one turn of the event loop brings in stays bounded in memory.
constexpr size_t kLogFlushBytes = size_t{64} << 10;
constexpr size_t kConsoleFlushBytes = size_t{1} << 20;
constexpr size_t kMaxKeptLine = 400;

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return;  // a closed console must not stop the job; logs are checked by their byte count
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

struct Output::Proc {
  std::string console_prefix[2];         // for stdout and stderr lines
  int source = -1;                       // in the gatherer
  bool line_start[2] = {true, true};     // the next log bytes of the stream begin a line
  double redraw_ms[2] = {-1e18, -1e18};  // when a progress redraw of the stream was last shown
  std::string redraw_shown[2];
  std::string path;
  bool on_console = true;
  int fd = -1;
  LineFramer framers[2];
  std::string log_buf;
  size_t logged = 0;
  // The last lines, in a ring whose strings keep their capacity: a flood of output costs no
  // allocation per line. `last` is the oldest-first copy that last_lines() hands out.
  std::vector<std::string> ring;
  size_t ring_next = 0;
  size_t ring_count = 0;
  mutable std::deque<std::string> last;
  TracebackCatcher traceback;
  StackCatcher stacks;
  std::optional<ErrorFile> error_file;
  // Log bytes that could not be written (a full disk, ...): in all, and since the last write
  // that went through (the gap the next line in the file announces), with the first error.
  size_t missing = 0;
  size_t gap = 0;
  int write_errno = 0;
  std::string first_error;
};

Output::Output(OutputConfig config)
    : config_(std::move(config)), gatherer_(config_.gather_window_s * 1000, config_.color) {
  if (!config_.clock) config_.clock = [] { return std::chrono::system_clock::now(); };
}

Output::~Output() {
  drain();
  for (Proc* p : procs_) {
    if (p->fd >= 0) ::close(p->fd);
    delete p;
  }
}

void Output::make_log_dir(const std::string& log_dir) {
  std::string path;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = log_dir.find('/', pos + 1);
    path = log_dir.substr(0, pos);
    if (path.empty()) continue;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
      throw InputError(
          fmt::format("--log_dir={}: cannot create {}: {}", log_dir, path, std::strerror(errno)));
  }
  struct stat st {};
  if (::stat(log_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(fmt::format("--log_dir={}: not a directory", log_dir));
  if (::access(log_dir.c_str(), W_OK) != 0)
    throw InputError(fmt::format("--log_dir={}: not writable", log_dir));
}

int Output::add_process(const std::string& prefix, const std::string& log_name, bool on_console,
                        int rank, const std::string& host) {
  auto* p = new Proc;
  p->console_prefix[0] =
      config_.color ? fmt::format("\x1b[36m[{}]\x1b[0m ", prefix) : fmt::format("[{}] ", prefix);
  p->console_prefix[1] = config_.color ? fmt::format("\x1b[31m[{} err]\x1b[0m ", prefix)
                                       : fmt::format("[{} err] ", prefix);
  if (config_.gather) {
    // "3@HOST a2": the gathered prefix keeps what follows the host.
    size_t at = host.empty() ? std::string::npos : prefix.find("@" + host);
    std::string suffix = at == std::string::npos ? "" : prefix.substr(at + 1 + host.size());
    p->source = gatherer_.add_source(rank, host.empty() ? prefix : host, suffix,
                                     p->console_prefix[0], p->console_prefix[1]);
  }
  p->on_console = on_console;
  p->ring.resize(config_.keep_last_lines);
  if (log_name.empty()) {  // console only
    procs_.push_back(p);
    return static_cast<int>(procs_.size() - 1);
  }
  p->path = config_.log_dir + "/" + log_name;
  p->fd = ::open(p->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (p->fd < 0) {
    std::string why = std::strerror(errno);
    delete p;
    throw std::runtime_error(
        fmt::format("cannot open log file {}: {}", config_.log_dir + "/" + log_name, why));
  }
  ::fchmod(p->fd, 0600);
  procs_.push_back(p);
  return static_cast<int>(procs_.size() - 1);
}

double Output::now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(config_.clock().time_since_epoch()).count();
}

// The receive time of what is being handled, formatted once per millisecond.
const std::string& Output::stamp() {
  if (now_ms_ != stamp_ms_) {
    stamp_ms_ = now_ms_;
    using namespace std::chrono;
    stamp_ = format_timestamp(system_clock::time_point(
                 duration_cast<system_clock::duration>(duration<double, std::milli>(now_ms_)))) +
             ' ';
  }
  return stamp_;
}

void Output::line(Proc& p, bool is_stderr, std::string_view text) {
  const int s = is_stderr ? 1 : 0;
  if (is_stderr && text.starts_with(kErrorFileLine)) {
    if (auto file = parse_error_file(text.substr(kErrorFileLine.size()))) {
      p.error_file = std::move(file);
      return;
    }
  }
  if (p.fd >= 0) {
    if (config_.log_timestamps && p.line_start[s]) p.log_buf += stamp();
    p.line_start[s] = !text.empty() && text.back() == '\n';
    p.log_buf.append(text);
  }
  std::string_view body = text;
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  p.traceback.feed(body);
  p.stacks.feed(body);
  if (!p.ring.empty()) {
    p.ring[p.ring_next].assign(body.data(), std::min(body.size(), kMaxKeptLine));
    p.ring_next = (p.ring_next + 1) % p.ring.size();
    p.ring_count = std::min(p.ring_count + 1, p.ring.size());
  }
  if (!p.on_console) return;
  if (body.find('\r') != std::string_view::npos) {
    body = console_text(body);  // a finished progress bar: its last state
    if (body.empty()) return;
    p.redraw_shown[s].clear();
  }
  console_line(p, is_stderr, body);
}

void Output::console_line(Proc& p, bool is_stderr, std::string_view text) {
  static const std::string kNoStamp;
  if (config_.gather) {
    gatherer_.add(p.source, is_stderr, text, now_ms_, config_.timestamps ? stamp() : kNoStamp);
    if (gatherer_.pending() > Gatherer::kMaxPending) write_console();
    return;
  }
  std::string& buf = is_stderr ? err_buf_ : out_buf_;
  if (config_.timestamps) buf += stamp();
  buf += p.console_prefix[is_stderr ? 1 : 0];
  buf.append(text);
  buf += '\n';
}

void Output::data(int proc, bool is_stderr, std::string_view bytes) {
  Proc& p = *procs_.at(static_cast<size_t>(proc));
  if (config_.timestamps || config_.log_timestamps || config_.gather) now_ms_ = now_ms();
  p.framers[is_stderr ? 1 : 0].feed(bytes, [&](std::string_view l) { line(p, is_stderr, l); });
  if (p.log_buf.size() >= kLogFlushBytes) write_log(p);
  std::string& console = is_stderr ? err_buf_ : out_buf_;
  if (console.size() >= kConsoleFlushBytes) {
    console_write(is_stderr ? config_.console_err : config_.console_out, console);
    console.clear();
  }
}

void Output::finish(int proc) {
  Proc& p = *procs_.at(static_cast<size_t>(proc));
  for (int s = 0; s < 2; ++s) p.framers[s].finish([&](std::string_view l) { line(p, s == 1, l); });
}

void Output::separate(int proc, std::string_view text) {
  finish(proc);
  Proc& p = *procs_.at(static_cast<size_t>(proc));
  if (p.fd < 0) return;
  if (config_.log_timestamps) {
    now_ms_ = now_ms();
    p.log_buf += stamp();
  }
  p.log_buf.append(text);
  p.log_buf += '\n';
}

// A progress bar redrawn with '\r' has no newline until it ends: its newest complete redraw is
// shown as a console line, at most every redraw_interval_s, when it changed.
void Output::show_redraws() {
  now_ms_ = now_ms();
  for (Proc* p : procs_) {
    if (!p->on_console) continue;
    for (int s = 0; s < 2; ++s) {
      if (p->framers[s].pending() == 0 ||
          now_ms_ - p->redraw_ms[s] < config_.redraw_interval_s * 1000)
        continue;
      std::string_view latest = latest_redraw(p->framers[s].partial());
      if (latest.empty() || latest == p->redraw_shown[s]) continue;
      p->redraw_shown[s].assign(latest);
      p->redraw_ms[s] = now_ms_;
      console_line(*p, s == 1, latest);
    }
  }
}

// Gathered lines that are due join the console buffers.
void Output::write_console() { gatherer_.take(now_ms_, false, out_buf_, err_buf_); }

void Output::console_write(int fd, std::string_view text, bool own) {
  if (config_.status)
    config_.status->write(fd, text, !own);
  else if (config_.sink)
    config_.sink->write(fd, text, !own);
  else
    write_all(fd, text);
}

void Output::drain() {
  now_ms_ = now_ms();
  gatherer_.take(now_ms_, true, out_buf_, err_buf_);
  flush();
}

int Output::due_in_ms() {
  double due = gatherer_.due_ms();
  if (due < 0) return -1;
  return static_cast<int>(std::clamp(due - now_ms(), 0.0, 60000.0)) + 1;
}

void Output::flush() {
  show_redraws();
  if (config_.gather) {
    now_ms_ = now_ms();
    write_console();
  }
  for (Proc* p : procs_) write_log(*p);
  say_log_notes();
  if (!out_buf_.empty()) console_write(config_.console_out, out_buf_);
  if (!err_buf_.empty()) console_write(config_.console_err, err_buf_);
  out_buf_.clear();
  err_buf_.clear();
}

void Output::settle_console(double timeout_ms) {
  if (config_.sink) config_.sink->drain(timeout_ms);
}

void Output::message(const std::string& text) {
  drain();
  console_write(config_.console_err, fmt::format("msrun-ssh: {}\n", text), true);
  if (config_.launcher_log) config_.launcher_log->info("{}", text);
}

void Output::report(const std::string& text) {
  drain();
  console_write(config_.console_err, text, true);
  if (config_.launcher_log) config_.launcher_log->info("{}", text);
}

// Writes what `data` it can to the log of `p`; returns how much went through.
size_t Output::write_some_log(Proc& p, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = config_.write_log ? config_.write_log(p.fd, data.data() + done, data.size() - done)
                                  : ::write(p.fd, data.data() + done, data.size() - done);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      p.write_errno = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  p.logged += done;
  return done;
}

// Writes the buffered log bytes of `p`. A failure is said once (when the gap opens) and the bytes
// are counted as missing; the first write that goes through afterwards is a line saying how many
// bytes are missing at that place, and that the log goes on.
void Output::write_log(Proc& p) {
  if (p.fd < 0 || p.log_buf.empty()) return;
  if (p.gap > 0) {
    std::string marker = fmt::format("\n[msrun-ssh: {} bytes of this log are missing here: {}]\n",
                                     p.gap, std::strerror(p.write_errno));
    if (write_some_log(p, marker) == marker.size()) {
      log_notes_.push_back(
          fmt::format("{} is written again; {} bytes are missing in it, at a line that says so",
                      p.path, p.gap));
      p.gap = 0;
    }
  }
  size_t done = p.gap > 0 ? 0 : write_some_log(p, p.log_buf);
  if (done < p.log_buf.size()) {
    const bool opens = p.gap == 0;
    p.gap += p.log_buf.size() - done;
    p.missing += p.log_buf.size() - done;
    if (opens) {
      if (p.first_error.empty()) p.first_error = std::strerror(p.write_errno);
      log_notes_.push_back(fmt::format(
          "warning: cannot write {}: {}; it holds {} bytes, the console keeps every line, and "
          "the log goes on when it can (the bytes missing are counted)",
          p.path, std::strerror(p.write_errno), p.logged));
      if (config_.on_log_error) config_.on_log_error(log_gap_of(p));
    }
  }
  p.log_buf.clear();
}

void Output::say_log_notes() {
  for (const auto& note : log_notes_) {
    console_write(config_.console_err, fmt::format("msrun-ssh: {}\n", note), true);
    if (config_.launcher_log) config_.launcher_log->warn("{}", note);
  }
  log_notes_.clear();
}

LogGap Output::log_gap_of(const Proc& p) {
  return LogGap{p.path, p.logged, p.missing, p.first_error};
}

LogGap Output::log_gap(int proc) const { return log_gap_of(*procs_.at(static_cast<size_t>(proc))); }

const std::deque<std::string>& Output::last_lines(int proc) const {
  const Proc& p = *procs_.at(static_cast<size_t>(proc));
  p.last.clear();
  size_t size = p.ring.size();
  for (size_t i = 0; i < p.ring_count; ++i)
    p.last.push_back(p.ring[(p.ring_next + size - p.ring_count + i) % size]);
  return p.last;
}

const std::vector<std::string>& Output::stacks(int proc) const {
  return procs_.at(static_cast<size_t>(proc))->stacks.lines();
}

const std::optional<ErrorFile>& Output::error_file(int proc) const {
  return procs_.at(static_cast<size_t>(proc))->error_file;
}

const TracebackCatcher& Output::traceback(int proc) const {
  return procs_.at(static_cast<size_t>(proc))->traceback;
}

size_t Output::log_bytes(int proc) const {
  const Proc& p = *procs_.at(static_cast<size_t>(proc));
  return p.logged + p.log_buf.size();
}

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
  if (block_.size() < kMaxLines) {
    block_.emplace_back(line);
    return;
  }
  // Full: the last line stays the newest one, the ones before it are counted.
  ++left_out_;
  block_[kMaxLines - 2] = fmt::format("  ... {} more lines ...", left_out_);
  block_[kMaxLines - 1] = std::string(line);
}

void TracebackCatcher::feed(std::string_view line) {
  if (line == kTracebackStart) {
    if (state_ != State::kChained) {
      block_.clear();
      left_out_ = 0;
    }
    push(line);
    state_ = State::kFrames;
    return;
  }
  switch (state_) {
    case State::kIdle:
      break;
    case State::kFrames:
      push(line);
      // Frames are indented; the first line that is not is the exception.
      if (!line.empty() && line[0] != ' ') state_ = State::kAfterException;
      break;
    case State::kAfterException:
      state_ = line.empty() ? State::kBlankAfterException : State::kIdle;
      break;
    case State::kBlankAfterException:
      if (is_chain_line(line)) {
        push("");
        push(line);
        state_ = State::kChained;
      } else {
        state_ = line.empty() ? State::kBlankAfterException : State::kIdle;
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
  if (line == "Fatal Python error: Aborted") {
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
  for (const auto& r : rows)
    if (r.log_gap.missing > 0)
      out += fmt::format(
          "--- incomplete log: {} ({} on {}) misses {} bytes ({}); it holds {} bytes ---\n",
          r.log_gap.path, r.process, r.host, r.log_gap.missing, r.log_gap.error, r.log_gap.written);
  return out + format_stacks(rows);
}

}  // namespace msrun_ssh
