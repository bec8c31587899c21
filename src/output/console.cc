// The console's views of the output: receive timestamps, progress-bar redraws, and gathering of
// identical lines of many processes (--output gather).
#include <fmt/format.h>
#include <time.h>

#include <algorithm>

#include "msrun_ssh/binding.h"
#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/output.h"

namespace msrun_ssh {

std::string format_timestamp(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(ms / 1000);
  long frac = static_cast<long>(ms % 1000);
  if (frac < 0) {
    frac += 1000;
    --secs;
  }
  struct tm tm {};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

std::string process_prefix(int rank, std::string_view host) {
  return rank < 0 ? fmt::format("sched@{}", host) : fmt::format("{}@{}", rank, host);
}

std::string_view console_text(std::string_view line) {
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t cr = line.rfind('\r');
  return cr == std::string_view::npos ? line : line.substr(cr + 1);
}

std::string_view latest_redraw(std::string_view partial) {
  size_t end = partial.rfind('\r');
  while (end != std::string_view::npos && end > 0) {
    size_t begin = partial.rfind('\r', end - 1);
    size_t from = begin == std::string_view::npos ? 0 : begin + 1;
    if (end > from) return partial.substr(from, end - from);
    if (begin == std::string_view::npos) break;
    end = begin;
  }
  return {};
}

int Gatherer::add_source(int rank, std::string host, std::string suffix, std::string own_out,
                         std::string own_err) {
  sources_.push_back(
      {rank, std::move(host), std::move(suffix), {std::move(own_out), std::move(own_err)}});
  last_seq_.insert(last_seq_.end(), {0, 0});
  return static_cast<int>(sources_.size() - 1);
}

void Gatherer::add(int source, bool is_stderr, std::string_view text, double now_ms,
                   const std::string& stamp) {
  // Order matters within a stream: stdout and stderr lines go to different consoles.
  const int stream = is_stderr ? 1 : 0;
  const size_t slot = static_cast<size_t>(source) * 2 + static_cast<size_t>(stream);
  const uint64_t after = last_seq_.at(slot);
  auto open = open_[stream].find(text);
  if (open != open_[stream].end()) {
    // The oldest open group of this text after everything the source has pending; groups whose
    // window has passed take no one else (take() has not printed them yet).
    auto& seqs = open->second;
    for (auto it = std::upper_bound(seqs.begin(), seqs.end(), after); it != seqs.end(); ++it) {
      Entry& e = pending_[static_cast<size_t>(*it - pending_.front().seq)];
      if (e.first_ms + window_ms_ <= now_ms) continue;
      e.sources.push_back(source);
      last_seq_[slot] = *it;
      return;
    }
  }
  const uint64_t seq = next_seq_++;
  Entry& e =
      pending_.emplace_back(Entry{seq, is_stderr, std::string(text), stamp, now_ms, {source}});
  if (open == open_[stream].end())
    open_[stream].emplace(std::string_view(e.text), std::deque<uint64_t>{seq});
  else
    open->second.push_back(seq);
  last_seq_[slot] = seq;
}

// "[0-7@node[01-02]]" for the sources of a group, worked out once per set of sources.
const std::string& Gatherer::label_of(const Entry& e) {
  const int stream = e.is_stderr ? 1 : 0;
  if (labels_[stream].size() >= kMaxPending) labels_[stream].clear();  // bounded, whatever comes
  auto [it, added] = labels_[stream].try_emplace(e.sources);
  if (!added) return it->second;
  std::vector<int> ranks;
  std::vector<std::string> hosts;
  ranks.reserve(e.sources.size());
  hosts.reserve(e.sources.size());
  bool scheduler = false;
  for (int i : e.sources) {
    const Source& src = sources_[static_cast<size_t>(i)];
    if (src.rank < 0)
      scheduler = true;
    else
      ranks.push_back(src.rank);
    hosts.push_back(src.host);
  }
  std::sort(ranks.begin(), ranks.end());
  std::string who = format_cpu_list(ranks);
  if (scheduler) who = ranks.empty() ? std::string("sched") : "sched," + who;
  std::string label =
      fmt::format("{}@{}{}{}", who, fold_nodeset(hosts),
                  sources_[static_cast<size_t>(e.sources[0])].suffix, e.is_stderr ? " err" : "");
  it->second = color_ ? fmt::format("\x1b[{}m[{}]\x1b[0m ", e.is_stderr ? 31 : 36, label)
                      : fmt::format("[{}] ", label);
  return it->second;
}

void Gatherer::append_line(const Entry& e, std::string& to) {
  const int s = e.is_stderr ? 1 : 0;
  to += e.stamp;
  to += e.sources.size() == 1 ? sources_[static_cast<size_t>(e.sources[0])].own[s] : label_of(e);
  to += e.text;
  to += '\n';
}

void Gatherer::take(double now_ms, bool all, std::string& out, std::string& err) {
  while (!pending_.empty() && (all || pending_.size() > kMaxPending ||
                               pending_.front().first_ms + window_ms_ <= now_ms)) {
    Entry& e = pending_.front();
    append_line(e, e.is_stderr ? err : out);
    auto& open = open_[e.is_stderr ? 1 : 0];
    auto it = open.find(std::string_view(e.text));
    // The front is the oldest pending line of all, so the first of its text, and the key views
    // its text: the key moves to the next line of the same text, if there is one.
    it->second.pop_front();
    if (it->second.empty()) {
      open.erase(it);
    } else {
      auto node = open.extract(it);
      node.key() = pending_[static_cast<size_t>(node.mapped().front() - e.seq)].text;
      open.insert(std::move(node));
    }
    pending_.pop_front();
  }
}

}  // namespace msrun_ssh
