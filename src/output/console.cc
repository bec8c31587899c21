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

// Where the search for a group to join starts among the seqs of `open`: after the stream's newest
// pending line `last` (null: the stream has none pending).
size_t Gatherer::first_after(const Open& open, const Entry* last) const {
  if (last == nullptr) return open.head;
  if (last->open == &open) return static_cast<size_t>(last->pos - open.base) + 1;
  auto from = open.seqs.begin() + static_cast<std::ptrdiff_t>(open.head);
  return static_cast<size_t>(std::upper_bound(from, open.seqs.end(), last->seq) -
                             open.seqs.begin());
}

// Joins `source` to the oldest open group of `open` after everything the stream has pending; groups
// whose window has passed take no one else (take() has not printed them yet).
bool Gatherer::join(Open& open, int source, size_t slot, const Entry* last, double now_ms) {
  const uint64_t front = entry(0).seq;
  for (size_t i = first_after(open, last); i < open.seqs.size(); ++i) {
    Entry& e = entry(static_cast<size_t>(open.seqs[i] - front));
    if (e.first_ms + window_ms_ <= now_ms) continue;
    e.sources.push_back(source);
    last_seq_[slot] = e.seq;
    return true;
  }
  return false;
}

// The Open of a text no line of the stream has pending: a spare one when there is one.
Gatherer::Open& Gatherer::open_text(int stream, std::string_view text, size_t hash) {
  if (spare_.empty()) {
    auto made = open_[stream].try_emplace(Key{text, hash}).first;
    spare_.push_back(open_[stream].extract(made));
  }
  OpenMap::node_type node = std::move(spare_.back());
  spare_.pop_back();
  Open& open = node.mapped();
  open.text.assign(text);
  open.hash = hash;
  open.seqs.clear();
  open.head = 0;
  open.base = 0;
  node.key() = Key{open.text, hash};
  open_[stream].insert(std::move(node));
  return open;
}

// A new entry at the back of the ring (twice as large when full), with the storage of the one that
// was there before.
Gatherer::Entry& Gatherer::push_entry() {
  if (count_ == ring_.size()) {
    std::vector<Entry> larger(std::max<size_t>(16, ring_.size() * 2));
    for (size_t i = 0; i < count_; ++i) larger[i] = std::move(entry(i));
    ring_ = std::move(larger);
    head_ = 0;
  }
  return entry(count_++);
}

// The Open of a line's text (null: no pending line of the stream has it). Without a hash when the
// stream repeats its newest pending line `last`, or prints the text of the line after it (sources
// printing the same lines); else the map's.
Gatherer::Open* Gatherer::find_text(int stream, std::string_view text, const Entry* last,
                                    size_t& hash) {
  if (last != nullptr) {
    if (last->open->text == text) return last->open;
    const size_t next = static_cast<size_t>(last->seq - entry(0).seq) + 1;
    if (next < count_ && entry(next).is_stderr == last->is_stderr && entry(next).open->text == text)
      return entry(next).open;
  }
  hash = hash_(text);
  auto found = open_[stream].find(Key{text, hash});
  return found == open_[stream].end() ? nullptr : &found->second;
}

void Gatherer::add(int source, bool is_stderr, std::string_view text, double now_ms,
                   const std::string& stamp) {
  // Order matters within a stream: stdout and stderr lines go to different consoles.
  const int stream = is_stderr ? 1 : 0;
  const size_t slot = static_cast<size_t>(source) * 2 + static_cast<size_t>(stream);
  const uint64_t after = last_seq_.at(slot);
  const Entry* last = count_ > 0 && after >= entry(0).seq ? &entry(after - entry(0).seq) : nullptr;
  size_t hash = 0;
  Open* open = find_text(stream, text, last, hash);
  if (open != nullptr && join(*open, source, slot, last, now_ms)) return;
  if (open == nullptr) open = &open_text(stream, text, hash);
  Entry& e = push_entry();
  e.seq = next_seq_++;
  e.is_stderr = is_stderr;
  e.open = open;
  e.pos = open->base + open->seqs.size();
  e.stamp.assign(stamp);
  e.first_ms = now_ms;
  e.sources.assign(1, source);
  open->seqs.push_back(e.seq);
  last_seq_[slot] = e.seq;
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
  to += e.open->text;
  to += '\n';
}

// The oldest entry leaves the ring; its text leaves the map when no other line has it, and is
// kept for reuse unless it is long.
void Gatherer::pop_entry() {
  Entry& e = entry(0);
  Open& open = *e.open;
  if (++open.head < open.seqs.size()) {
    if (open.head * 2 >= open.seqs.size()) {  // the seqs gone out go, in amortized O(1)
      open.base += open.head;
      open.seqs.erase(open.seqs.begin(),
                      open.seqs.begin() + static_cast<std::ptrdiff_t>(open.head));
      open.head = 0;
    }
  } else {
    OpenMap::node_type node = open_[e.is_stderr ? 1 : 0].extract(Key{open.text, open.hash});
    if (open.text.capacity() <= kKeptTextBytes) spare_.push_back(std::move(node));
  }
  head_ = (head_ + 1) & (ring_.size() - 1);
  --count_;
}

void Gatherer::take(double now_ms, bool all, std::string& out, std::string& err) {
  while (count_ > 0 && (all || count_ > kMaxPending || entry(0).first_ms + window_ms_ <= now_ms)) {
    const Entry& e = entry(0);
    append_line(e, e.is_stderr ? err : out);
    pop_entry();
  }
}

}  // namespace msrun_ssh
