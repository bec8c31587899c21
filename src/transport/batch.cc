#include "msrun_ssh/batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace msrun_ssh {
namespace {

// The longest single wait: a caller's keep_waiting may depend on time alone.
constexpr double kMaxWaitMs = 1000;

}  // namespace

Batch::Batch(Transport& transport, EventHook on_event)
    : t_(transport), on_event_(std::move(on_event)) {}

size_t Batch::start(size_t host, const std::string& command) {
  size_t index = results_.size();
  results_.push_back(BatchResult{.host = host});
  ChannelId id = t_.exec(host, command);
  channels_.push_back(id);
  index_of_[id] = index;
  ++open_;
  return index;
}

std::string batch_trouble(const BatchResult& r, std::string_view timed_out) {
  switch (r.failure) {
    case BatchFailure::kOpenFailed:
      return r.why;
    case BatchFailure::kHostLost:
      return fmt::format("connection lost: {}", r.why);
    case BatchFailure::kTimedOut:
      return std::string(timed_out);
    case BatchFailure::kNone:
      break;
  }
  size_t end = r.err.find_last_not_of("\r\n \t");
  std::string err;
  if (end != std::string::npos) {
    size_t start = r.err.rfind('\n', end);
    start = start == std::string::npos ? 0 : start + 1;
    err = r.err.substr(start, end + 1 - start);
  }
  if (r.status)
    return fmt::format("exited with status {}{}{}", *r.status, err.empty() ? "" : ": ", err);
  return err.empty() ? "closed without an answer" : err;
}

void Batch::write(size_t index, std::string_view data) { t_.write(channels_.at(index), data); }

void Batch::send_eof(size_t index) { t_.send_eof(channels_.at(index)); }

size_t Batch::unsent(size_t index) const { return t_.unsent(channels_.at(index)); }

// A lost connection concerns every command of the host that has no other failure, also one that
// already ended: what it printed may have been cut short.
void Batch::host_lost(size_t host, std::string_view why) {
  for (auto& r : results_)
    if (r.host == host && r.failure == BatchFailure::kNone) {
      r.failure = BatchFailure::kHostLost;
      r.why = why;
    }
}

void Batch::drop_host(size_t host, std::string_view why) {
  host_lost(host, why);
  for (size_t i = 0; i < results_.size(); ++i) {
    BatchResult& r = results_[i];
    if (r.host != host || r.closed || !index_of_.erase(channels_[i])) continue;
    r.closed = true;
    --open_;
  }
  t_.drop_host(host);
}

std::vector<size_t> Batch::open_hosts() const {
  std::vector<size_t> hosts;
  for (const auto& r : results_)
    if (!r.closed && std::find(hosts.begin(), hosts.end(), r.host) == hosts.end())
      hosts.push_back(r.host);
  return hosts;
}

bool Batch::offer(const TransportEvent& e) {
  if (e.kind == TransportEvent::Kind::kHostLost) {
    host_lost(e.host, e.data);
    return false;
  }
  auto it = index_of_.find(e.channel);
  if (it == index_of_.end()) return false;
  size_t index = it->second;
  BatchResult& r = results_[index];
  switch (e.kind) {
    case TransportEvent::Kind::kData:
      (e.is_stderr ? r.err : r.out).append(e.data);
      break;
    case TransportEvent::Kind::kExit:
      r.status = e.status;
      r.signal = e.signal;
      break;
    case TransportEvent::Kind::kOpenFailed:
      r.failure = BatchFailure::kOpenFailed;
      r.why = e.data;
      [[fallthrough]];
    case TransportEvent::Kind::kClosed:
      if (!r.closed) {
        r.closed = true;
        --open_;
      }
      break;
    default:
      break;
  }
  if (on_event_) on_event_(index, e);
  return true;
}

bool Batch::wait_open(double deadline_ms, const std::function<bool()>& keep_waiting) {
  EventHandler handler = [this](const TransportEvent& e) { offer(e); };
  while (open_ > 0 && t_.now_ms() < deadline_ms) {
    double left = std::ceil(deadline_ms - t_.now_ms());
    t_.poll(static_cast<int>(std::clamp(left, 1.0, kMaxWaitMs)), handler);
    if (keep_waiting && !keep_waiting()) break;
  }
  return open_ == 0;
}

void Batch::wait(double deadline_ms, const std::function<bool()>& keep_waiting) {
  if (wait_open(deadline_ms, keep_waiting)) return;
  abandon();
  // The transport sends what was asked of it when it next polls: now, without waiting.
  t_.poll(0, [](const TransportEvent&) {});
}

bool Batch::wait_or_tell(double deadline_ms, const std::function<bool()>& keep_waiting,
                         std::string_view word, double last_ms) {
  bool told = false;
  if (!wait_open(deadline_ms, keep_waiting) && t_.now_ms() < deadline_ms) {
    told = true;
    for (size_t i = 0; i < results_.size(); ++i)
      if (!results_[i].closed) write(i, word);
    deadline_ms = std::min(deadline_ms, t_.now_ms() + last_ms);
  }
  wait(deadline_ms);
  return told;
}

void Batch::abandon() {
  if (open_ == 0) return;
  for (size_t i = 0; i < results_.size(); ++i) {
    BatchResult& r = results_[i];
    if (r.closed || !index_of_.erase(channels_[i])) continue;
    if (r.failure == BatchFailure::kNone) r.failure = BatchFailure::kTimedOut;
    t_.kill(channels_[i], "KILL");
  }
  open_ = 0;
}

std::vector<BatchResult> run_batch(Transport& transport, const std::vector<BatchCommand>& commands,
                                   double timeout_s, const std::function<bool()>& keep_waiting) {
  Batch batch(transport);
  for (const auto& c : commands) batch.start(c.host, c.command);
  batch.wait(transport.now_ms() + timeout_s * 1000, keep_waiting);
  return batch.results();
}

std::vector<BatchResult> run_batch(Transport& transport, const std::vector<size_t>& hosts,
                                   const std::string& command, double timeout_s,
                                   const std::function<bool()>& keep_waiting) {
  std::vector<BatchCommand> commands;
  commands.reserve(hosts.size());
  for (size_t h : hosts) commands.push_back({h, command});
  return run_batch(transport, commands, timeout_s, keep_waiting);
}

std::vector<std::optional<std::string>> exited_output(const std::vector<BatchResult>& results) {
  std::vector<std::optional<std::string>> out;
  out.reserve(results.size());
  for (const auto& r : results)
    out.push_back(r.status ? std::optional<std::string>(r.out) : std::nullopt);
  return out;
}

}  // namespace msrun_ssh
