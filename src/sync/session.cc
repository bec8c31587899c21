// Sync on the hosts (sync.h): one batch of one channel per host, driven from its keep_waiting
// callback in three phases on those channels — the manifests, the requests (marker read-back and
// hashes), the record streams (EOF for the hosts that get none).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>

#include "msrun_ssh/base.h"
#include "msrun_ssh/batch.h"
#include "msrun_ssh/sync.h"

namespace msrun_ssh {
namespace {

// The end line of the manifest and of the answer, always after a marker line.
constexpr std::string_view kEndLine = "\n{\"end\": true}\n";
constexpr size_t kChunk = size_t{256} * 1024;  // stream bytes produced at a time
constexpr size_t kInFlight = 1 << 20;          // stream bytes the transport may hold per host
constexpr double kProgressMs = 200;
constexpr double kSilentMs = 10000;  // unacknowledged bytes for this long: the host is lost

struct HostState {
  size_t channel = 0;                       // batch index of the host's channel
  size_t manifest_end = std::string::npos;  // offset in its stdout after the first end line
  size_t answer_end = std::string::npos;    // and after the second one
  bool asked = false;                       // a request was written
  RemoteManifest remote;
  SyncPlan plan;
  std::unique_ptr<RecordStream> stream;  // the records the host applies, once decided
  bool eof_sent = false;
  SyncHostResult result;

  bool answered() const { return answer_end != std::string::npos; }
  // Where the output of the apply step begins in its stdout.
  size_t apply_from() const { return asked ? answer_end : manifest_end; }
};

class Session {
 public:
  Session(Transport& t, const SyncSource& source, const SyncSettings& settings)
      : t_(t),
        source_(source),
        settings_(settings),
        batch_(t, [this](size_t i, const TransportEvent& e) { on_event(i, e); }),
        hosts_(source.dests.size()) {}

  std::vector<SyncHostResult> run() {
    last_activity_ = t_.now_ms();
    // The token goes first on stdin (the command is then the same on every sync to the same
    // place, and a kept connection may have started it already: mux.h).
    for (size_t h = 0; h < hosts_.size(); ++h) {
      std::string token = settings_.apply ? new_sync_token() : "";
      hosts_[h].channel = batch_.start(h, sync_command(source_.dests[h], kTokenFromStdin));
      batch_.write(hosts_[h].channel, token + "\n");
    }
    batch_.wait(1e300, [this] { return advance(); });
    if (settings_.progress) std::fputs("\r\033[K", settings_.progress);
    return finish();
  }

 private:
  enum class Phase { kManifests, kAnswers, kApply };

  void on_event(size_t index, const TransportEvent& e) {
    last_activity_ = t_.now_ms();
    if (e.kind != TransportEvent::Kind::kData || e.is_stderr) return;
    HostState& h = hosts_[batch_.result(index).host];
    const std::string& out = batch_.result(index).out;
    size_t from = out.size() - e.data.size();
    from = from > kEndLine.size() ? from - kEndLine.size() : 0;
    if (h.manifest_end == std::string::npos) {
      size_t pos = out.find(kEndLine, from);
      if (pos != std::string::npos) h.manifest_end = pos + kEndLine.size();
    } else if (h.asked && !h.answered()) {
      // The answer's end line comes after its marker line, never right after the manifest's.
      size_t pos = out.find(kEndLine, std::max(from, h.manifest_end));
      if (pos != std::string::npos) h.answer_end = pos + kEndLine.size();
    }
  }

  bool closed(size_t index) const { return batch_.result(index).closed; }

  bool advance() {
    if (phase_ == Phase::kManifests && manifests_done()) ask();
    if (phase_ == Phase::kAnswers && answers_done()) decide();
    if (phase_ == Phase::kApply) feed();
    draw_progress();
    drop_silent_hosts();
    if (settings_.stop && settings_.stop()) {
      stopped_ = true;
      return false;
    }
    return t_.now_ms() - last_activity_ < settings_.timeout_s * 1000;
  }

  // A host whose TCP has acknowledged nothing of what was sent to it for kSilentMs is cut off or
  // down (a host that is only slow or starved still acknowledges): its sync fails now, the others
  // go on.
  void drop_silent_hosts() {
    for (size_t h : batch_.open_hosts())
      if (t_.tcp_liveness(h, kSilentMs) == Transport::Liveness::kSilent)
        batch_.drop_host(h, fmt::format("no TCP acknowledgement for {:g} s (cut off or down)",
                                        kSilentMs / 1000));
  }

  bool manifests_done() const {
    return std::all_of(hosts_.begin(), hosts_.end(), [this](const HostState& h) {
      return h.manifest_end != std::string::npos || closed(h.channel);
    });
  }

  bool answers_done() const {
    return std::all_of(hosts_.begin(), hosts_.end(), [this](const HostState& h) {
      return !h.asked || h.answered() || closed(h.channel);
    });
  }

  // After every manifest: each host's difference by size and mtime; then one request per host
  // (the marker read-back when several hosts may share, the hashes it needs), or nothing yet.
  void ask() {
    phase_ = Phase::kAnswers;
    size_t ok = 0;
    for (HostState& h : hosts_) {
      const BatchResult& r = batch_.result(h.channel);
      h.remote =
          parse_remote_manifest(std::string_view(r.out).substr(0, h.manifest_end), source_.rules);
      if (h.manifest_end == std::string::npos || !h.remote.error.empty()) {
        h.result.error = h.remote.error.empty() ? trouble(r) : h.remote.error;
        continue;
      }
      ++ok;
      h.plan = diff_manifests(source_.local, h.remote.entries);
    }
    for (HostState& h : hosts_) {
      if (!h.result.error.empty()) continue;
      h.asked = !h.plan.to_hash.empty() || (settings_.apply && ok > 1);
      if (h.asked) batch_.write(h.channel, manifest_request(h.plan.to_hash));
    }
  }

  // After the answers: the final differences and the shared groups; the stream of its difference
  // for the first host of each group when it needs one, EOF for every other host.
  void decide() {
    phase_ = Phase::kApply;
    Hashes local = local_hashes();
    std::map<std::string, size_t> writer_of;  // marker read back -> the group's writer
    for (size_t i = 0; i < hosts_.size(); ++i) {
      HostState& h = hosts_[i];
      std::string marker;
      if (h.result.error.empty()) marker = final_plan(h, local);
      bool writes = h.result.error.empty() && settings_.apply && writer(i, marker, writer_of);
      if (writes && !h.plan.up_to_date())
        h.stream = std::make_unique<RecordStream>(source_.dir, source_.local, h.plan.actions);
      else
        end_input(h);
    }
  }

  // The host's difference with the hashes it answered; returns the marker it read back.
  std::string final_plan(HostState& h, const Hashes& local) {
    RemoteAnswer a;
    if (h.asked) {
      const BatchResult& r = batch_.result(h.channel);
      if (!h.answered()) {
        h.result.error = trouble(r);
        return "";
      }
      a = parse_remote_answer(
          std::string_view(r.out).substr(h.manifest_end, h.answer_end - h.manifest_end));
    }
    h.plan = diff_manifests(source_.local, h.remote.entries, &a.hashes, &local);
    h.result.differ = h.plan.actions.size();
    return a.marker;
  }

  // Whether host `i` writes for the hosts that read back `marker`: it is the first of them (or
  // has none). Else it shares the first one's directory.
  bool writer(size_t i, const std::string& marker, std::map<std::string, size_t>& writer_of) {
    if (marker.empty()) return true;
    auto [it, fresh] = writer_of.emplace(marker, i);
    if (fresh) return true;
    hosts_[i].result.shared_with = it->second;
    hosts_[it->second].result.sharers.push_back(i);
    return false;
  }

  // No more on the host's stdin: its program ends after what it was doing.
  void end_input(HostState& h) {
    batch_.send_eof(h.channel);
    h.eof_sent = true;
  }

  // The launcher's SHA-256 of every path some host asked about.
  Hashes local_hashes() const {
    std::set<std::string> paths;
    for (const HostState& h : hosts_) paths.insert(h.plan.to_hash.begin(), h.plan.to_hash.end());
    Hashes out;
    for (const auto& p : paths) {
      std::string error;
      if (auto sha = sha256_file(source_.dir + "/" + p, error)) out[p] = *sha;
    }
    return out;
  }

  // Keeps at most kInFlight bytes of each stream in the transport.
  void feed() {
    for (HostState& h : hosts_) {
      if (!h.stream || h.eof_sent || closed(h.channel)) continue;
      try {
        while (!h.stream->done() && batch_.unsent(h.channel) < kInFlight) {
          batch_.write(h.channel, h.stream->next(kChunk));
          last_activity_ = t_.now_ms();
        }
      } catch (const std::runtime_error& e) {
        h.result.error = e.what();  // the host sees EOF before the end record: nothing half-done
      }
      if (h.stream->done() || !h.result.error.empty()) end_input(h);
    }
  }

  void draw_progress() {
    if (!settings_.progress || t_.now_ms() - last_draw_ < kProgressMs) return;
    last_draw_ = t_.now_ms();
    size_t files = 0, done = 0;
    uint64_t bytes = 0;
    for (const HostState& h : hosts_) {
      if (h.stream) files += h.stream->files(), bytes += h.stream->data_bytes();
      bool over =
          !h.result.error.empty() || (phase_ == Phase::kApply && (!h.stream || closed(h.channel)));
      done += over ? 1 : 0;
    }
    std::fprintf(settings_.progress, "\rsync: %zu files, %.1f MB sent, %zu/%zu hosts done\033[K",
                 files, static_cast<double>(bytes) / 1e6, done, hosts_.size());
    std::fflush(settings_.progress);
  }

  std::string trouble(const BatchResult& r) const {
    return batch_trouble(r, fmt::format("no progress for {:g} s", settings_.timeout_s));
  }

  // The outcome of a host's apply step.
  void apply_result(HostState& h) {
    const BatchResult& r = batch_.result(h.channel);
    std::string_view out = std::string_view(r.out).substr(h.apply_from());
    auto summary = parse_apply_summary(out);
    if (summary && r.status == 0 && r.failure == BatchFailure::kNone) {
      h.result.files = summary->files;
      h.result.bytes = summary->bytes;
      h.result.deleted = summary->deleted;
      return;
    }
    if (!h.result.error.empty()) return;
    size_t pos = out.rfind("msrun-sync: error: ");
    h.result.error = pos != std::string::npos
                         ? std::string(out.substr(pos + 19, out.find('\n', pos) - pos - 19))
                         : trouble(r);
  }

  std::vector<SyncHostResult> finish() {
    std::vector<SyncHostResult> out;
    for (HostState& h : hosts_)
      if (h.stream) apply_result(h);
    for (HostState& h : hosts_) {
      if (stopped_ && batch_.result(h.channel).failure == BatchFailure::kTimedOut)
        h.result.error = "interrupted";  // given up on when the sync was stopped
      if (h.result.error.empty() && phase_ != Phase::kApply)
        h.result.error = trouble(batch_.result(h.channel));
      if (h.result.shared_with != SIZE_MAX && !hosts_[h.result.shared_with].result.error.empty())
        h.result.error = "its directory is shared with a host whose sync failed";
      out.push_back(h.result);
    }
    return out;
  }

  Transport& t_;
  const SyncSource& source_;
  const SyncSettings& settings_;
  Batch batch_;
  std::vector<HostState> hosts_;
  Phase phase_ = Phase::kManifests;
  double last_activity_ = 0;
  double last_draw_ = -1e300;
  bool stopped_ = false;  // SyncSettings::stop said so
};

}  // namespace

std::vector<SyncHostResult> sync_hosts(Transport& transport, const SyncSource& source,
                                       const SyncSettings& settings) {
  return Session(transport, source, settings).run();
}

}  // namespace msrun_ssh
