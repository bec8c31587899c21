#include "msrun_ssh/output.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <utility>

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
constexpr double kPromptQuietMs = 500;

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

// At most `max` bytes of `s`, never the first bytes of a UTF-8 character without its last.
std::string_view utf8_prefix(std::string_view s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

struct Output::Proc {
  std::string console_prefix[2];      // for stdout and stderr lines
  int source = -1;                    // in the gatherer
  bool line_start[2] = {true, true};  // the next log bytes of the stream begin a line
  // The stream whose line the log's last bytes leave open (a piece of a line over the framer's
  // limit, a final line without newline), -1 when they end a line: the other stream's next bytes
  // start a line of their own.
  int8_t log_open = -1;
  double redraw_ms[2] = {-1e18, -1e18};  // when a progress redraw of the stream was last shown
  std::string redraw_shown[2];
  // An unfinished line that stays so (a prompt: pdb's "(Pdb) ", input("...? ")) is shown once it
  // has been quiet for kPromptQuietMs, for a process that reads the launcher's stdin
  // (show_prompts): how much of it was shown, and when it last grew.
  bool prompts = false;
  size_t prompt_shown[2] = {0, 0};
  size_t prompt_seen[2] = {0, 0};  // how much of it show_redraws looked at (due_in_ms)
  double partial_ms[2] = {0, 0};
  std::string path;
  bool on_console = true;
  int fd = -1;           // the log's descriptor while it is open (open_logs_)
  bool has_log = false;  // the process has a log file (`path`)
  LineFramer framers[2];
  std::string log_buf;
  size_t logged = 0;
  // The last lines, in a ring whose strings keep their capacity: a flood of output costs no
  // allocation per line. Made at the first line: a process that prints nothing costs nothing.
  std::vector<std::string> ring;
  size_t ring_next = 0;
  size_t ring_count = 0;
  TracebackCatcher traceback;
  StackCatcher stacks;
  std::optional<ErrorFile> error_file;
  // Log bytes that could not be written (a full disk, ...): in all, and since the last write
  // that went through (the gap the next line in the file announces), with the first error.
  size_t missing = 0;
  size_t gap = 0;
  int write_errno = 0;
  std::string first_error;
  std::string close_error;  // the first failed close
  bool touched = false;     // in Output::touched_
  uint64_t lines = 0;       // lines it printed (both streams)
};

size_t default_max_open_logs() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<size_t>(16, static_cast<size_t>(rl.rlim_cur / 2));
}

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
  if (log_name.empty()) {  // console only
    procs_.push_back(p);
    return static_cast<int>(procs_.size() - 1);
  }
  p->path = config_.log_dir + "/" + log_name;
  if (!open_log(*p, O_CREAT | O_TRUNC)) {
    std::string why = errno == ELOOP ? "it is a symbolic link, which is not followed (anyone who "
                                       "may write in the directory could point it at any file "
                                       "of yours)"
                                     : std::strerror(errno);
    delete p;
    throw std::runtime_error(
        fmt::format("cannot open log file {}: {}", config_.log_dir + "/" + log_name, why));
  }
  ::fchmod(p->fd, 0600);
  p->has_log = true;
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
  ++p.lines;
  // What of the line was shown as a prompt (show_redraws) is not shown again: the rest is (pdb's
  // next output comes on the prompt's line, after what the user typed on the terminal).
  p.prompt_seen[s] = 0;
  const size_t shown = std::exchange(p.prompt_shown[s], 0);
  if (is_stderr && text.starts_with(kErrorFileLine)) {
    if (auto file = parse_error_file(text.substr(kErrorFileLine.size()))) {
      p.error_file = std::move(file);
      return;
    }
  }
  if (p.has_log) {
    if (p.log_open == 1 - s) p.log_buf += '\n';  // never glued to the other stream's piece
    if (config_.log_timestamps && p.line_start[s]) p.log_buf += stamp();
    p.line_start[s] = !text.empty() && text.back() == '\n';
    p.log_open = p.line_start[s] ? int8_t{-1} : static_cast<int8_t>(s);
    p.log_buf.append(text);
  }
  std::string_view body = text;
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  p.traceback.feed(body);
  p.stacks.feed(body);
  if (config_.keep_last_lines > 0) {
    if (p.ring.empty()) p.ring.resize(config_.keep_last_lines);
    // A line that redrew itself (a progress bar) as it ended, not as it began.
    std::string_view kept = utf8_prefix(
        body.find('\r') == std::string_view::npos ? body : console_text(body), kMaxKeptLine);
    p.ring[p.ring_next].assign(kept.data(), kept.size());
    p.ring_next = (p.ring_next + 1) % p.ring.size();
    p.ring_count = std::min(p.ring_count + 1, p.ring.size());
  }
  if (!p.on_console) return;
  if (shown > 0) {
    body.remove_prefix(std::min(shown, body.size()));
    if (body.empty()) return;
  }
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

void Output::show_prompts(int proc) {
  Proc& p = *procs_.at(static_cast<size_t>(proc));
  if (!p.on_console || std::exchange(p.prompts, true)) return;
  prompt_procs_.push_back(&p);
}

void Output::data(int proc, bool is_stderr, std::string_view bytes) {
  Proc& p = *procs_.at(static_cast<size_t>(proc));
  if (config_.timestamps || config_.log_timestamps || config_.gather) now_ms_ = now_ms();
  p.framers[is_stderr ? 1 : 0].feed(bytes, [&](std::string_view l) { line(p, is_stderr, l); });
  if (p.prompts && p.framers[is_stderr ? 1 : 0].pending() > 0)
    p.partial_ms[is_stderr ? 1 : 0] = now_ms();
  touch(p);
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
  touch(p);
}

// `p` has log bytes to write or a partial line to redraw: flush() looks at it (and only at the
// processes touched since, so that a turn of the event loop costs what happened in it, not the
// number of processes).
void Output::touch(Proc& p) {
  if (!std::exchange(p.touched, true)) touched_.push_back(&p);
}

void Output::separate(int proc, std::string_view text) {
  finish(proc);
  Proc& p = *procs_.at(static_cast<size_t>(proc));
  if (!p.has_log) return;
  // The run's last line may have come without its newline (killed in the middle of it): the
  // separator, and the next run's first line, each start a line of their own.
  if (p.log_open >= 0) p.log_buf += '\n';
  p.line_start[0] = p.line_start[1] = true;
  p.log_open = -1;
  if (config_.log_timestamps) {
    now_ms_ = now_ms();
    p.log_buf += stamp();
  }
  p.log_buf.append(text);
  p.log_buf += '\n';
  touch(p);
}

// A progress bar redrawn with '\r' has no newline until it ends: its newest complete redraw is
// shown as a console line, at most every redraw_interval_s, when it changed. An unfinished line
// without '\r' that stays so for kPromptQuietMs (a prompt) is shown as it is, once.
void Output::show_redraws() {
  now_ms_ = now_ms();
  for (Proc* p : touched_) {
    if (!p->on_console) continue;
    for (int s = 0; s < 2; ++s) {
      if (p->framers[s].pending() == 0) continue;
      bool quiet = p->prompts && now_ms_ - p->partial_ms[s] >= kPromptQuietMs;
      bool redraw_due = now_ms_ - p->redraw_ms[s] >= config_.redraw_interval_s * 1000;
      if (!quiet && !redraw_due) continue;
      std::string_view partial = p->framers[s].partial();
      if (quiet) p->prompt_seen[s] = partial.size();
      if (partial.find('\r') == std::string_view::npos) {
        // No redraw: a prompt, once quiet, and only what was not shown of it yet.
        if (partial.size() > p->prompt_shown[s] && quiet) {
          console_line(*p, s == 1, partial.substr(p->prompt_shown[s]));
          p->prompt_shown[s] = partial.size();
        }
        continue;
      }
      if (!redraw_due) continue;
      std::string_view latest = latest_redraw(partial);
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
  // An unfinished line not shown yet is shown once quiet (a prompt: show_redraws).
  for (const Proc* p : prompt_procs_)
    for (int s = 0; s < 2; ++s)
      if (p->framers[s].pending() > p->prompt_seen[s]) {
        double at = p->partial_ms[s] + kPromptQuietMs;
        due = due < 0 ? at : std::min(due, at);
      }
  if (due < 0) return -1;
  return static_cast<int>(std::clamp(due - now_ms(), 0.0, 60000.0)) + 1;
}

void Output::flush() {
  show_redraws();
  if (config_.gather) {
    now_ms_ = now_ms();
    write_console();
  }
  for (Proc* p : touched_) write_log(*p);
  // A partial line stays touched: its redraw may be due at a later turn.
  std::erase_if(touched_, [](Proc* p) {
    bool keep = !p->log_buf.empty() ||
                (p->on_console && (p->framers[0].pending() > 0 || p->framers[1].pending() > 0));
    p->touched = keep;
    return !keep;
  });
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

void Output::log_only(const std::string& text) {
  if (config_.launcher_log) config_.launcher_log->info("{}", text);
}

void Output::report(const std::string& text) {
  drain();
  console_write(config_.console_err, text, true);
  if (config_.launcher_log) config_.launcher_log->info("{}", text);
}

// At most max_open_logs log files are open at once (a launcher of 10,000 hosts × 8 ranks would
// need 80,000 descriptors): opening one more closes the one opened longest ago, which is opened
// again (appending) when it has bytes to write. `flags`: O_CREAT | O_TRUNC for the first open.
bool Output::open_log(Proc& p, int flags) {
  if (p.fd >= 0) return true;
  size_t limit = std::max<size_t>(1, config_.max_open_logs);
  while (open_logs_.size() >= limit) {
    Proc* oldest = open_logs_.front();
    open_logs_.pop_front();
    close_log(*oldest);
  }
  // O_NOFOLLOW: a link put in the log's place is not followed (it would truncate its target).
  p.fd =
      ::open(p.path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | (flags ? flags : O_APPEND), 0600);
  if (p.fd < 0) return false;
  open_logs_.push_back(&p);
  return true;
}

// Writes what `data` it can to the log of `p`; returns how much went through.
size_t Output::write_some_log(Proc& p, std::string_view data) {
  size_t done = 0;
  if (!open_log(p, 0)) {
    p.write_errno = errno;
    return 0;
  }
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
  if (!p.has_log || p.log_buf.empty()) return;
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

// Closes the log of `p` (not in open_logs_ any more). A failed close is said once per file: the
// file system may have dropped writes it had accepted (NFS reports them at close).
void Output::close_log(Proc& p) {
  if (p.fd < 0) return;
  int rc = config_.close_log ? config_.close_log(p.fd) : ::close(p.fd);
  p.fd = -1;
  if (rc == 0 || errno == EINTR || !p.close_error.empty()) return;  // EINTR: closed all the same
  p.close_error = std::strerror(errno);
  log_notes_.push_back(fmt::format(
      "warning: closing {} failed: {}; the file system may have lost bytes written to it (it "
      "accepted {})",
      p.path, p.close_error, p.logged));
  if (config_.on_log_error) config_.on_log_error(log_gap_of(p));
}

void Output::close_logs() {
  while (!open_logs_.empty()) {
    Proc* p = open_logs_.front();
    open_logs_.pop_front();
    close_log(*p);
  }
  say_log_notes();
}

void Output::say_log_notes() {
  for (const auto& note : log_notes_) {
    console_write(config_.console_err, fmt::format("msrun-ssh: {}\n", note), true);
    if (config_.launcher_log) config_.launcher_log->warn("{}", note);
  }
  log_notes_.clear();
}

LogGap Output::log_gap_of(const Proc& p) {
  return LogGap{p.path, p.logged, p.missing, p.first_error, p.close_error};
}

LogGap Output::log_gap(int proc) const { return log_gap_of(*procs_.at(static_cast<size_t>(proc))); }

std::deque<std::string> Output::last_lines(int proc) const {
  const Proc& p = *procs_.at(static_cast<size_t>(proc));
  std::deque<std::string> last;
  size_t size = p.ring.size();
  for (size_t i = 0; i < p.ring_count; ++i)
    last.push_back(p.ring[(p.ring_next + size - p.ring_count + i) % size]);
  return last;
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

uint64_t Output::lines(int proc) const { return procs_.at(static_cast<size_t>(proc))->lines; }

size_t Output::log_bytes(int proc) const {
  const Proc& p = *procs_.at(static_cast<size_t>(proc));
  return p.logged + p.log_buf.size();
}

}  // namespace msrun_ssh
