// Watching a running job (docs/slow-nodes.md): on every host a sampler (src/remote/sampler.pl)
// reports the job's processes there once a second, over the job's own connection; the straggler
// rule reads those samples, and `msrun-ssh top` shows them.
//
// The straggler of a synchronous job is the rank the others wait for: it is computing, waiting
// for a CPU, or held back by its CPU quota while its peers sleep in a collective. A rank's demand
// is, over the last few seconds (an exponential average of the rates between samples, time
// constant kSmoothSeconds), the CPUs it kept busy (user + system time of its processes)
// plus the larger of its threads' run-queue wait and the share of the time its cgroup was
// throttled by a CPU quota (at most 1; kernels count the latter in the former too), plus its
// host's steal time share. The rule (StragglerWatch):
//   raised   the ranks of a host whose demand is at least kMinDemand and at least kRatio x the
//            median demand of the job's workers (the lower median: one slow host of two is
//            found), at kRaiseAfter samples of that host in a row;
//   cleared  once none of its ranks meets it, at kClearAfter samples in a row.
// Ranks all slow together do not meet it (the median is slow too); output does not enter it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/options.h"
#include "msrun_ssh/output.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

// One rank's processes on a host at one moment (the sampler's "ranks" entries).
struct RankSample {
  std::string rank;  // "0", "sched", "other"
  int pids = 0;
  double cpu_ticks = 0;  // utime + stime of its processes, in the host's clock ticks
  double wait_ns = 0;    // run-queue wait of their threads (schedstat)
  long rss_kb = 0;
  double throttled_ns = -1;  // its cgroup's CPU-quota throttling so far; -1 unknown
  std::string state;         // "R" when one of them runs, "D", else "S"
};

struct HostSample {
  double t = 0;             // the host's clock, seconds (monotonic)
  double hz = 100;          // clock ticks per second
  std::vector<double> cpu;  // /proc/stat's cpu line: user nice system idle iowait irq softirq steal
  double load = 0;
  long mem_total_kb = 0;
  long mem_avail_kb = 0;
  std::vector<RankSample> ranks;
  std::vector<double> accel;  // each GPU / NPU's utilisation (%), when the host has a tool
};

// One sampler line; nullopt when it is not one.
std::optional<HostSample> parse_sample(std::string_view line);

// What a rank did between two samples of its host.
struct RankRate {
  std::string rank;
  double cpu = 0;        // CPUs kept busy
  double wait = 0;       // CPUs' worth of run-queue wait
  double throttled = 0;  // share of the time its cgroup was throttled (0..1)
  double steal = 0;      // its host's steal share (0..1)
  long rss_kb = 0;
  int pids = 0;
  std::string state;
  // The kernel may count the time a CPU quota holds a thread back as run-queue wait too: the
  // larger of the two counts.
  double demand() const { return cpu + std::max(wait, throttled) + steal; }
};

struct HostRate {
  double busy = 0;   // share of the host's CPUs busy (0..1)
  double steal = 0;  // share stolen by the hypervisor (0..1)
  double load = 0;
  long mem_total_kb = 0;
  long mem_avail_kb = 0;
  std::vector<RankRate> ranks;
  std::vector<double> accel;  // the last sample's
};

// The rates between `before` and `now` of one host (nullopt when `now` is not later).
std::optional<HostRate> host_rate(const HostSample& before, const HostSample& now);

constexpr double kSmoothSeconds = 3;
constexpr double kMinDemand = 0.5;
constexpr double kRatio = 3;
constexpr int kRaiseAfter = 3;
constexpr int kClearAfter = 5;

// A straggler raised or cleared: a host and its slow ranks.
struct StragglerChange {
  bool raised = true;
  size_t host = 0;
  std::vector<std::string> ranks;
  double demand = 0;  // the slowest of them (raised), or 0
  double median = 0;  // the workers' median demand then
  RankRate worst;     // the slowest rank's figures (raised)
};

class StragglerWatch {
 public:
  // Its hosts' state is made at the first sample: a job over before its samplers start (they
  // start a second after the processes) holds none of it.
  explicit StragglerWatch(size_t hosts) : count_(hosts) {}

  // Host `host`'s new sample; returns what it changes (at most one change, for that host).
  std::vector<StragglerChange> add(size_t host, HostSample sample);
  // Host `host` has no sampler any more (it ended, or died): its figures are forgotten (they
  // counted in the median the others are held to, and `top` showed them as live) and a straggler
  // raised there is cleared; returns that clearing, if any.
  std::vector<StragglerChange> forget(size_t host);

  // The host's smoothed rates (nullopt before it has two samples).
  const std::optional<HostRate>& rate(size_t host) const {
    static const std::optional<HostRate> none;
    return hosts_.empty() ? none : hosts_.at(host).rate;
  }
  bool raised(size_t host) const { return !hosts_.empty() && hosts_.at(host).raised; }
  size_t hosts() const { return count_; }

 private:
  struct Host {
    std::optional<HostSample> last;  // only the last sample is kept: memory is per host
    std::optional<HostRate> rate;
    int slow_in_a_row = 0;
    int fine_in_a_row = 0;
    bool raised = false;
    std::vector<std::string> raised_ranks;  // what the last raise named
  };
  double median_demand() const;
  static void smooth(const HostRate& before, HostRate& now, double a);
  size_t count_;
  std::vector<Host> hosts_;
};

// The command of a host's sampler: `exec perl -e SAMPLER JOB INTERVAL RANKS` (without perl it
// ends at once, and that host is not watched). `ranks`: the host's rank words, comma-separated
// ("sched,0,1"; "" for every process of the job it finds).
std::string sampler_command(const std::string& job_id, double interval_s,
                            const std::string& ranks = "");

// The samplers of one job, riding on its runner's transport: start() opens one per host, offer()
// takes every transport event and keeps the samplers' own, stop() ends them (at the job's end).
class JobWatch {
 public:
  using OnChange = std::function<void(const StragglerChange&)>;
  JobWatch(Transport& transport, size_t hosts, OnChange on_change);

  // A sampler on each of `hosts`; `ranks[h]`: host h's rank words (sampler_command).
  void start(const std::vector<size_t>& hosts, const std::vector<std::string>& ranks,
             const std::string& job_id, double interval_s);
  // Whether `event` was a sampler's (then it is used up).
  bool offer(const TransportEvent& event);
  void stop();

  const StragglerWatch& stragglers() const { return watch_; }
  size_t open() const { return host_of_.size(); }  // samplers still running

 private:
  Transport& t_;
  OnChange on_change_;
  StragglerWatch watch_;
  std::map<ChannelId, size_t> host_of_;  // open samplers
  std::vector<LineFramer> lines_;        // per host, made by start()
  bool stopping_ = false;                // stop() was called: the job is ending
};

// ---- msrun-ssh top ------------------------------------------------------------------------------
//
// An attached run with --watch writes, once a second, what `top` shows to
// top_file() (through a temporary name; removed at the job's end): the hosts' and
// the ranks' rates from the samples, and from the output each rank's lines per second, the age of
// its last line and its step rate when its lines show a step. `msrun-ssh top --job ID` reads it.

// A step number in a line of output: by `custom` (its first group, else its whole match) when
// given, else the first of "step N" / "iter N" (any case, up to 4 characters between), tqdm's
// "N/TOTAL [", "epoch N".
std::optional<double> progress_step(std::string_view line, const std::optional<std::regex>& custom);

// What the launcher knows of a process beside the samples: its output.
struct RankOutput {
  std::string rank;  // "0", "sched"
  size_t host = 0;
  uint64_t lines = 0;
  std::string last_line;
  bool known = true;  // false: its output is not seen here (a detached job's): none of it shown
};

class TopTracker {
 public:
  // `progress_regex`: --progress_regex ("" : the defaults). Throws InputError when it is not one.
  explicit TopTracker(const std::string& progress_regex);
  // The snapshot at `now_ms`.
  nlohmann::json snapshot(double now_ms, const std::string& job_id,
                          const std::vector<std::string>& hosts, const JobWatch& watch,
                          const std::vector<RankOutput>& outputs);

 private:
  struct Seen {
    uint64_t lines = 0;
    double lines_ms = -1;  // when `lines` last changed
    std::optional<double> step;
    double step_ms = -1;
    double lines_per_s = 0;
    double steps_per_s = 0;
  };
  void output_figures(const RankOutput& o, double now_ms, double dt, nlohmann::json& j);
  std::optional<std::regex> custom_;
  std::map<std::string, Seen> seen_;  // by "host/rank"
  double at_ms_ = -1;
};

// <jobs dir>/<ID>.top: beside the job's record (not *.json: the records are those).
std::string top_file(const std::string& jobs_dir, const std::string& job_id);

// The screen of `top` from a snapshot, at most `width` columns wide.
std::string format_top(const nlohmann::json& snapshot, size_t width);

// `msrun-ssh top [--job ID] [--once]` (docs/slow-nodes.md): an attached job from the snapshot its
// launcher writes; a detached one over connections of its own (a sampler on each host, no output
// figures: the output is in the hosts' logs). Exit 0 when the job ended or on Ctrl-C, 2 when
// there is no such job or nothing to show, 255 when no host of a detached job could be reached.
int top_command(const Options& options);

}  // namespace msrun_ssh
