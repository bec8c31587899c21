// The terminal's status row (status_line.h).
#include "msrun_ssh/status_line.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "msrun_ssh/base.h"
#include "msrun_ssh/console_sink.h"

namespace msrun_ssh {
namespace {

constexpr std::string_view kErase = "\r\033[K";
// Queued past this, the console has fallen behind (a terminal stopped by Ctrl-S): the row is not
// drawn again until it has caught up, so that rows (never dropped) cannot pile up in the queue.
constexpr size_t kBehindBytes = size_t{64} << 10;

size_t terminal_width(int fd) {
  winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

std::string rate_text(double bytes_per_s) {
  if (bytes_per_s >= 1e6) return fmt::format("{:.1f} MB/s", bytes_per_s / 1e6);
  if (bytes_per_s >= 1e3) return fmt::format("{:.1f} KB/s", bytes_per_s / 1e3);
  return fmt::format("{:.0f} B/s", bytes_per_s);
}

}  // namespace

StatusLine::StatusLine(int fd, bool enabled, size_t width)
    : fd_(fd),
      enabled_(enabled),
      width_(width     ? width
             : enabled ? terminal_width(fd)
                       : 80),
      measure_(enabled && width == 0) {}

StatusLine::~StatusLine() { hide(); }

void StatusLine::show(std::string_view text) {
  if (!enabled_) return;
  // In the background (`&`, `bg`) the terminal's row is the shell's prompt: not drawn over.
  if (in_background_of(fd_)) return hide();
  if (text.empty()) return hide();
  wanted_ = text;
  if (measure_) width_ = terminal_width(fd_);
  if (drawn_ && cut(wanted_) == text_) return;  // on the screen already
  if (!behind()) draw();  // else at a later show, once the console has caught up
}

std::string StatusLine::cut(std::string_view text) const {
  return std::string(text.substr(0, width_ > 1 ? width_ - 1 : 1));
}

bool StatusLine::behind() const { return sink_ && sink_->queued_bytes() >= kBehindBytes; }

void StatusLine::hide() {
  if (drawn_) erase();
  text_.clear();
  wanted_.clear();
}

void StatusLine::put(int fd, std::string_view data, bool droppable) {
  if (sink_)
    sink_->write(fd, data, droppable);
  else
    write_fully(fd, data);
}

void StatusLine::write(int fd, std::string_view data, bool droppable) {
  if (!drawn_) return put(fd, data, droppable);
  erase();
  put(fd, data, droppable);
  if (!data.empty() && data.back() == '\n' && !behind()) draw();
}

void StatusLine::draw() {
  // The terminal's width now (also when redrawn under a line written): a window made narrower
  // than the row would wrap it, and the erase would then clear only its last screen line.
  if (measure_) width_ = terminal_width(fd_);
  text_ = cut(wanted_);
  std::string row(kErase);
  row += text_;
  put(fd_, row, false);
  drawn_ = true;
}

void StatusLine::erase() {
  put(fd_, kErase, false);
  drawn_ = false;
}

bool terminal_status_enabled(int fd, bool quiet) {
  if (quiet || !isatty(fd)) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

std::string StartProgress::text() const {
  std::string out;
  switch (phase) {
    case Phase::kConnecting:
      out = fmt::format("msrun-ssh: connecting {}/{}", done, hosts);
      if (failed) out += fmt::format(" (failed {})", failed);
      break;
    case Phase::kWatchdogs:
      out = fmt::format("msrun-ssh: watchdogs ready {}/{}", done, hosts);
      break;
    case Phase::kStarted:
      out = fmt::format("msrun-ssh: started {}/{}", done, processes);
      break;
  }
  if (phase_seconds >= 3 && !slowest.empty()) {
    out += "; waiting for ";
    for (size_t i = 0; i < slowest.size() && i < 3; ++i)
      out += fmt::format("{}{}", i ? ", " : "", slowest[i]);
    if (slowest.size() > 3) out += fmt::format(" (+{})", slowest.size() - 3);
  }
  return out;
}

StartView::StartView(StatusLine& line, std::vector<std::string> hosts, size_t processes, Now now)
    : line_(line), hosts_(std::move(hosts)), now_(std::move(now)) {
  progress_.hosts = hosts_.size();
  progress_.processes = processes;
  phase(StartProgress::Phase::kConnecting);
}

void StartView::phase(StartProgress::Phase phase) {
  progress_.phase = phase;
  progress_.done = 0;
  done_.assign(hosts_.size(), false);
  phase_start_ = now_();
  draw(true);
}

void StartView::host_done(size_t host, bool ok) {
  if (host >= done_.size() || done_[host]) return;
  done_[host] = true;
  ++(ok ? progress_.done : progress_.failed);
  draw(progress_.done + progress_.failed == hosts_.size());
}

void StartView::processes_started(size_t n) {
  progress_.phase = StartProgress::Phase::kStarted;
  progress_.done = n;
  draw(true);
}

void StartView::tick() { draw(false); }

void StartView::finish() {
  finished_ = true;
  line_.hide();
}

void StartView::draw(bool now) {
  if (finished_ || !line_.enabled()) return;
  double t = now_();
  if (!now && drawn_at_ >= 0 && t - drawn_at_ < 0.1) return;
  drawn_at_ = t;
  progress_.phase_seconds = t - phase_start_;
  progress_.slowest.clear();
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (!done_[h] && progress_.phase != StartProgress::Phase::kStarted)
      progress_.slowest.push_back(hosts_[h]);
  line_.show(progress_.text());
}

std::string running_status_text(size_t running, size_t exited, size_t failed, double bytes_per_s,
                                double elapsed_s) {
  auto s = static_cast<long long>(elapsed_s);
  return fmt::format("msrun-ssh: running {}, exited {}, failed {} | {} | {:02}:{:02}:{:02}",
                     running, exited, failed, rate_text(bytes_per_s), s / 3600, s / 60 % 60,
                     s % 60);
}

}  // namespace msrun_ssh
