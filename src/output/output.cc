#include "msrun_ssh/output.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "msrun_ssh/error.h"

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
  std::string console_prefix[2];  // for stdout and stderr lines
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
};

Output::Output(OutputConfig config) : config_(std::move(config)) {}

Output::~Output() {
  flush();
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

int Output::add_process(const std::string& prefix, const std::string& log_name, bool on_console) {
  auto* p = new Proc;
  p->console_prefix[0] =
      config_.color ? fmt::format("\x1b[36m[{}]\x1b[0m ", prefix) : fmt::format("[{}] ", prefix);
  p->console_prefix[1] = config_.color ? fmt::format("\x1b[31m[{} err]\x1b[0m ", prefix)
                                       : fmt::format("[{} err] ", prefix);
  p->path = config_.log_dir + "/" + log_name;
  p->on_console = on_console;
  p->fd = ::open(p->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (p->fd < 0) {
    std::string why = std::strerror(errno);
    delete p;
    throw std::runtime_error(
        fmt::format("cannot open log file {}: {}", config_.log_dir + "/" + log_name, why));
  }
  ::fchmod(p->fd, 0600);
  p->ring.resize(config_.keep_last_lines);
  procs_.push_back(p);
  return static_cast<int>(procs_.size() - 1);
}

void Output::line(Proc& p, bool is_stderr, std::string_view text) {
  p.log_buf.append(text);
  std::string_view body = text;
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  if (!p.ring.empty()) {
    p.ring[p.ring_next].assign(body.data(), std::min(body.size(), kMaxKeptLine));
    p.ring_next = (p.ring_next + 1) % p.ring.size();
    p.ring_count = std::min(p.ring_count + 1, p.ring.size());
  }
  if (!p.on_console) return;
  std::string& buf = is_stderr ? err_buf_ : out_buf_;
  buf += p.console_prefix[is_stderr ? 1 : 0];
  buf.append(body);
  buf += '\n';
}

void Output::data(int proc, bool is_stderr, std::string_view bytes) {
  Proc& p = *procs_.at(static_cast<size_t>(proc));
  p.framers[is_stderr ? 1 : 0].feed(bytes, [&](std::string_view l) { line(p, is_stderr, l); });
  if (p.log_buf.size() >= kLogFlushBytes) {
    write_all(p.fd, p.log_buf);
    p.logged += p.log_buf.size();
    p.log_buf.clear();
  }
  std::string& console = is_stderr ? err_buf_ : out_buf_;
  if (console.size() >= kConsoleFlushBytes) {
    write_all(is_stderr ? config_.console_err : config_.console_out, console);
    console.clear();
  }
}

void Output::finish(int proc) {
  Proc& p = *procs_.at(static_cast<size_t>(proc));
  for (int s = 0; s < 2; ++s) p.framers[s].finish([&](std::string_view l) { line(p, s == 1, l); });
}

void Output::flush() {
  for (Proc* p : procs_) {
    if (p->log_buf.empty()) continue;
    write_all(p->fd, p->log_buf);
    p->logged += p->log_buf.size();
    p->log_buf.clear();
  }
  if (!out_buf_.empty()) write_all(config_.console_out, out_buf_);
  if (!err_buf_.empty()) write_all(config_.console_err, err_buf_);
  out_buf_.clear();
  err_buf_.clear();
}

void Output::message(const std::string& text) {
  flush();
  write_all(config_.console_err, "msrun-ssh: " + text + "\n");
  if (config_.launcher_log) config_.launcher_log->info("{}", text);
}

const std::deque<std::string>& Output::last_lines(int proc) const {
  const Proc& p = *procs_.at(static_cast<size_t>(proc));
  p.last.clear();
  size_t size = p.ring.size();
  for (size_t i = 0; i < p.ring_count; ++i)
    p.last.push_back(p.ring[(p.ring_next + size - p.ring_count + i) % size]);
  return p.last;
}

size_t Output::log_bytes(int proc) const {
  const Proc& p = *procs_.at(static_cast<size_t>(proc));
  return p.logged + p.log_buf.size();
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
  for (const auto& r : rows) {
    if (!r.failed || r.last_lines.empty()) continue;
    out += fmt::format("--- last lines of {} on {} ---\n", r.process, r.host);
    for (const auto& l : r.last_lines) out += l + "\n";
  }
  return out;
}

}  // namespace msrun_ssh
