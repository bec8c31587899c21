// The samples of a running job and the straggler rule (watch.h).
#include "msrun_ssh/watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"

namespace msrun_ssh {
namespace {

double number(const nlohmann::json& j, const char* key, double otherwise = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : otherwise;
}

bool is_worker(const std::string& rank) {
  return !rank.empty() && rank.find_first_not_of("0123456789") == std::string::npos;
}

// The lower median: of two values the smaller, so that one slow host of two stands out.
double lower_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

}  // namespace

std::optional<HostSample> parse_sample(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("t") || !j.contains("ranks") || !j["ranks"].is_array())
    return std::nullopt;
  HostSample s;
  s.t = number(j, "t");
  s.hz = number(j, "hz", 100);
  if (s.hz <= 0) s.hz = 100;
  if (auto c = j.find("cpu"); c != j.end() && c->is_array())
    for (const auto& v : *c) s.cpu.push_back(v.is_number() ? v.get<double>() : 0);
  s.load = number(j, "load");
  if (auto m = j.find("mem_kb"); m != j.end() && m->is_array() && m->size() == 2 &&
                                 (*m)[0].is_number() && (*m)[1].is_number()) {
    s.mem_total_kb = saturate<long>((*m)[0].get<double>());
    s.mem_avail_kb = saturate<long>((*m)[1].get<double>());
  }
  if (auto a = j.find("accel"); a != j.end() && a->is_array())
    for (const auto& v : *a)
      if (v.is_number()) s.accel.push_back(v.get<double>());
  for (const auto& r : j["ranks"]) {
    if (!r.is_object() || !r.contains("rank") || !r["rank"].is_string()) continue;
    s.ranks.push_back({r["rank"].get<std::string>(), saturate<int>(number(r, "pids")),
                       number(r, "cpu"), number(r, "wait_ns"), saturate<long>(number(r, "rss_kb")),
                       number(r, "thr_ns", -1), r.value("state", "")});
  }
  return s;
}

std::optional<HostRate> host_rate(const HostSample& before, const HostSample& now) {
  double dt = now.t - before.t;
  if (!(dt > 0)) return std::nullopt;
  HostRate h;
  h.load = now.load;
  h.mem_total_kb = now.mem_total_kb;
  h.mem_avail_kb = now.mem_avail_kb;
  h.accel = now.accel;
  if (before.cpu.size() >= 8 && now.cpu.size() >= 8) {
    double total = 0, idle = 0;
    for (size_t i = 0; i < 8; ++i) total += now.cpu[i] - before.cpu[i];
    idle = (now.cpu[3] - before.cpu[3]) + (now.cpu[4] - before.cpu[4]);
    if (total > 0) {
      h.busy = std::clamp((total - idle) / total, 0.0, 1.0);
      h.steal = std::clamp((now.cpu[7] - before.cpu[7]) / total, 0.0, 1.0);
    }
  }
  for (const auto& r : now.ranks) {
    auto was = std::find_if(before.ranks.begin(), before.ranks.end(),
                            [&](const RankSample& b) { return b.rank == r.rank; });
    RankRate rr{r.rank, 0, 0, 0, h.steal, r.rss_kb, r.pids, r.state};
    if (was != before.ranks.end()) {
      // A process that ended or started in between makes a sum go down: no rate then.
      rr.cpu = std::max(0.0, (r.cpu_ticks - was->cpu_ticks) / now.hz / dt);
      rr.wait = std::max(0.0, (r.wait_ns - was->wait_ns) / 1e9 / dt);
      if (r.throttled_ns >= 0 && was->throttled_ns >= 0)
        rr.throttled = std::clamp((r.throttled_ns - was->throttled_ns) / 1e9 / dt, 0.0, 1.0);
    }
    h.ranks.push_back(std::move(rr));
  }
  return h;
}

// `now` becomes the exponential average of `before` and itself, `a` its weight (rank by rank; a
// rank new in `now` starts from its own figures).
void StragglerWatch::smooth(const HostRate& before, HostRate& now, double a) {
  auto mix = [a](double old, double fresh) { return old + a * (fresh - old); };
  now.busy = mix(before.busy, now.busy);
  now.steal = mix(before.steal, now.steal);
  for (auto& r : now.ranks) {
    auto was = std::find_if(before.ranks.begin(), before.ranks.end(),
                            [&](const RankRate& b) { return b.rank == r.rank; });
    if (was == before.ranks.end()) continue;
    r.cpu = mix(was->cpu, r.cpu);
    r.wait = mix(was->wait, r.wait);
    r.throttled = mix(was->throttled, r.throttled);
    r.steal = now.steal;
  }
}

// The lower median of the hosts' own (lower) medians: a slow host that runs half the workers or
// more would set a median of the ranks itself, and never stand out.
double StragglerWatch::median_demand() const {
  std::vector<double> medians;
  for (const auto& h : hosts_) {
    if (!h.rate) continue;
    std::vector<double> d;
    for (const auto& r : h.rate->ranks)
      if (is_worker(r.rank)) d.push_back(r.demand());
    if (!d.empty()) medians.push_back(lower_median(std::move(d)));
  }
  return lower_median(medians);
}

std::vector<StragglerChange> StragglerWatch::add(size_t host, HostSample sample) {
  if (hosts_.empty()) hosts_.resize(count_);
  Host& h = hosts_.at(host);
  if (h.last && sample.t <= h.last->t) return {};
  std::optional<HostRate> now = h.last ? host_rate(*h.last, sample) : std::nullopt;
  double dt = h.last ? sample.t - h.last->t : 0;
  h.last = std::move(sample);
  if (!now) return {};
  if (h.rate) smooth(*h.rate, *now, 1 - std::exp(-dt / kSmoothSeconds));
  h.rate = std::move(now);
  StragglerChange c;
  c.host = host;
  c.median = median_demand();
  for (const auto& r : h.rate->ranks) {
    if (!is_worker(r.rank) || r.demand() < kMinDemand || r.demand() < kRatio * c.median) continue;
    c.ranks.push_back(r.rank);
    if (r.demand() > c.demand) {
      c.demand = r.demand();
      c.worst = r;
    }
  }
  bool slow = !c.ranks.empty();
  h.slow_in_a_row = slow ? h.slow_in_a_row + 1 : 0;
  h.fine_in_a_row = slow ? 0 : h.fine_in_a_row + 1;
  if (!h.raised && h.slow_in_a_row >= kRaiseAfter) {
    h.raised = true;
    h.raised_ranks = c.ranks;
    return {c};
  }
  if (h.raised && h.fine_in_a_row >= kClearAfter) {
    h.raised = false;
    c.raised = false;
    c.ranks = std::move(h.raised_ranks);
    return {c};
  }
  return {};
}

std::vector<StragglerChange> StragglerWatch::forget(size_t host) {
  if (hosts_.empty()) return {};
  Host& h = hosts_.at(host);
  std::vector<StragglerChange> out;
  if (h.raised) {
    StragglerChange c;
    c.host = host;
    c.raised = false;
    c.median = median_demand();
    c.ranks = std::move(h.raised_ranks);
    out.push_back(std::move(c));
  }
  h = Host{};
  return out;
}

std::string sampler_command(const std::string& job_id, double interval_s,
                            const std::string& ranks) {
  return fmt::format("{}{} {:g} {}", sampler_command_head(), shell_quote(job_id), interval_s,
                     shell_quote(ranks));
}

JobWatch::JobWatch(Transport& transport, size_t hosts, OnChange on_change)
    : t_(transport), on_change_(std::move(on_change)), watch_(hosts) {}

void JobWatch::start(const std::vector<size_t>& hosts, const std::vector<std::string>& ranks,
                     const std::string& job_id, double interval_s) {
  if (lines_.empty()) lines_.assign(watch_.hosts(), LineFramer(1 << 16));
  for (size_t h : hosts)
    host_of_[t_.exec(h, sampler_command(job_id, interval_s, h < ranks.size() ? ranks[h] : ""))] = h;
}

bool JobWatch::offer(const TransportEvent& e) {
  auto it = host_of_.find(e.channel);
  if (it == host_of_.end()) return false;
  size_t host = it->second;
  if (e.kind == TransportEvent::Kind::kData && !e.is_stderr) {
    lines_[host].feed(e.data, [&](std::string_view line) {
      auto sample = parse_sample(line);
      if (!sample) return;
      for (const auto& change : watch_.add(host, std::move(*sample)))
        if (on_change_) on_change_(change);
    });
  } else if (e.kind == TransportEvent::Kind::kClosed ||
             e.kind == TransportEvent::Kind::kOpenFailed) {
    host_of_.erase(it);
    // A sampler that ended before the job (it died, or its host's processes all ended): what it
    // measured last is no longer so. At the job's end (stop) a straggler stays as it was.
    if (!stopping_)
      for (const auto& change : watch_.forget(host))
        if (on_change_) on_change_(change);
  }
  return true;
}

void JobWatch::stop() {
  stopping_ = true;
  for (const auto& [channel, host] : host_of_) t_.kill(channel, "KILL");
}

}  // namespace msrun_ssh
