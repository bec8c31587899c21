// `msrun-ssh top`: the snapshot an attached run writes once a second, and its screen (watch.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/jobs.h"
#include "msrun_ssh/watch.h"

namespace msrun_ssh {
namespace {

constexpr int kTopWaitSeconds = 120;
constexpr size_t kProgressScan = 1024;

const std::regex kStep(R"((?:^|[^A-Za-z])(?:step|iter|iteration)[^0-9\n]{0,4}(\d+))",
                       std::regex::icase);
const std::regex kTqdm(R"((\d+)/\d+ \[)");
const std::regex kEpoch(R"((?:^|[^A-Za-z])epoch[^0-9\n]{0,4}(\d+))", std::regex::icase);

std::optional<double> first_number(std::string_view line, const std::regex& re) {
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(line.begin(), line.end(), m, re)) return std::nullopt;
  std::string text = m.size() > 1 && m[1].matched ? m[1].str() : m[0].str();
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return std::nullopt;
  return v;
}

double per_second(double delta, double ms) { return ms > 0 ? delta * 1000 / ms : 0; }

// A host's accelerators' utilisation: "35 0 12" (each device), "-" without a tool.
std::string accel_cell(const nlohmann::json& host) {
  if (!host.contains("accel") || !host["accel"].is_array() || host["accel"].empty()) return "-";
  std::vector<double> v;
  for (const auto& u : host["accel"]) v.push_back(u.is_number() ? u.get<double>() : -1);
  return fmt::format("{:.0f}", fmt::join(v, " "));
}

std::string cut(std::string s, size_t width) {
  if (s.size() > width) s.resize(width);
  return s;
}

void show(const nlohmann::json& snap, bool tty) {
  winsize ws{};
  size_t width = tty && ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 200;
  std::string screen = format_top(snap, width);
  std::fputs(tty ? ("\x1b[H\x1b[2J" + screen).c_str() : (screen + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// A detached job: its launcher is gone, so `top` connects to its hosts (as `status` does) and runs
// a sampler on each itself; once a second the screen, until every sampler has ended (no process
// of the job left), Ctrl-C, or with --once the first screen after two samples.
int top_of_detached(const JobRecord& record, const Options& options, int sfd) {
  Reached r = reach(record, options);
  std::vector<size_t> connected;
  std::vector<std::string> hosts, ranks(record.hosts.size());
  for (size_t h = 0; h < record.hosts.size(); ++h) {
    hosts.push_back(host_key(record.hosts[h]));
    if (r.unreachable.at(h).empty())
      connected.push_back(h);
    else
      std::fprintf(stderr, "msrun-ssh: top: %s: %s\n", hosts.back().c_str(),
                   r.unreachable[h].c_str());
  }
  if (connected.empty()) return kExitHostFailure;
  std::vector<RankOutput> outputs;
  for (const auto& p : record.processes) {
    std::string word = rank_word(p.rank);
    ranks[p.host] += (ranks[p.host].empty() ? "" : ",") + word;
    outputs.push_back({word, p.host, 0, "", false});
  }
  JobWatch watch(*r.pool, hosts.size(), nullptr);
  watch.start(connected, ranks, record.id, 1);
  r.pool->watch_fd(sfd);
  TopTracker top("");
  const bool tty = isatty(1);
  bool stop = false;
  for (int second = 1; !stop; ++second) {
    const double until = r.pool->now_ms() + 1000;
    while (!stop && r.pool->now_ms() < until)
      r.pool->poll(static_cast<int>(std::max(1.0, until - r.pool->now_ms())),
                   [&](const TransportEvent& e) {
                     if (e.kind == TransportEvent::Kind::kFdReady && e.fd == sfd)
                       stop = signal_status(sfd) != 0;
                     else
                       watch.offer(e);
                   });
    if (stop) break;
    if (watch.open() == 0) {
      std::printf("top: job %s: no process of it is left on the hosts\n", record.id.c_str());
      break;
    }
    if (second < 2) continue;  // rates need two samples
    show(top.snapshot(r.pool->now_ms(), record.id, hosts, watch, outputs), tty);
    if (options.once) break;
  }
  r.pool->unwatch_fd(sfd);
  watch.stop();
  r.pool->disconnect_all();
  return kExitOk;
}

}  // namespace

std::optional<double> progress_step(std::string_view line,
                                    const std::optional<std::regex>& custom) {
  // std::regex matches by recursion, a frame per character a repetition takes: a rank's line of
  // a megabyte of digits after "step" would overflow the launcher's stack. A step is read from
  // the line's first kProgressScan bytes only.
  line = line.substr(0, kProgressScan);
  if (custom) return first_number(line, *custom);
  for (const std::regex* re : {&kStep, &kTqdm, &kEpoch})
    if (auto v = first_number(line, *re)) return v;
  return std::nullopt;
}

std::string top_file(const std::string& jobs_dir, const std::string& job_id) {
  return fmt::format("{}/{}.top", jobs_dir, job_id);
}

TopTracker::TopTracker(const std::string& progress_regex) {
  if (progress_regex.empty()) return;
  try {
    custom_.emplace(progress_regex);
  } catch (const std::regex_error& e) {
    throw InputError(
        fmt::format("--progress_regex={}: not a regular expression: {}", progress_regex, e.what()));
  }
}

void TopTracker::output_figures(const RankOutput& o, double now_ms, double dt, nlohmann::json& j) {
  Seen& s = seen_[fmt::format("{}/{}", o.host, o.rank)];
  if (s.lines_ms < 0 || o.lines != s.lines) {
    s.lines_per_s = s.lines_ms < 0 ? 0 : per_second(static_cast<double>(o.lines - s.lines), dt);
    s.lines = o.lines;
    s.lines_ms = now_ms;
  } else {
    s.lines_per_s = 0;
  }
  if (auto step = progress_step(o.last_line, custom_)) {
    if (s.step && *step != *s.step && s.step_ms >= 0)
      s.steps_per_s = per_second(*step - *s.step, now_ms - s.step_ms);
    if (!s.step || *step != *s.step) {
      s.step = step;
      s.step_ms = now_ms;
    }
  }
  j["lines"] = o.lines;
  j["lines_per_s"] = s.lines_per_s;
  j["last_line_age_s"] = (now_ms - s.lines_ms) / 1000;
  if (s.step) {
    j["step"] = *s.step;
    j["steps_per_s"] = s.steps_per_s;
  }
}

nlohmann::json TopTracker::snapshot(double now_ms, const std::string& job_id,
                                    const std::vector<std::string>& hosts, const JobWatch& watch,
                                    const std::vector<RankOutput>& outputs) {
  double dt = at_ms_ < 0 ? 0 : now_ms - at_ms_;
  at_ms_ = now_ms;
  nlohmann::json doc{{"job", job_id}, {"time", format_timestamp(std::chrono::system_clock::now())}};
  nlohmann::json hs = nlohmann::json::array(), ranks = nlohmann::json::array();
  for (size_t h = 0; h < hosts.size(); ++h) {
    nlohmann::json j{{"host", hosts[h]}, {"straggler", watch.stragglers().raised(h)}};
    if (const auto& r = watch.stragglers().rate(h)) {
      j["busy"] = r->busy;
      j["steal"] = r->steal;
      j["load"] = r->load;
      j["mem_total_kb"] = r->mem_total_kb;
      j["mem_avail_kb"] = r->mem_avail_kb;
      if (!r->accel.empty()) j["accel"] = r->accel;
    }
    hs.push_back(std::move(j));
  }
  for (const auto& o : outputs) {
    nlohmann::json j{{"rank", o.rank}, {"host", hosts.at(o.host)}};
    if (o.known) output_figures(o, now_ms, dt, j);
    if (const auto& r = watch.stragglers().rate(o.host))
      for (const auto& k : r->ranks)
        if (k.rank == o.rank) {
          j["cpu"] = k.cpu;
          j["wait"] = k.wait;
          j["throttled"] = k.throttled;
          j["demand"] = k.demand();
          j["rss_kb"] = k.rss_kb;
          j["state"] = k.state;
        }
    ranks.push_back(std::move(j));
  }
  doc["hosts"] = std::move(hs);
  doc["ranks"] = std::move(ranks);
  return doc;
}

std::string format_top(const nlohmann::json& snap, size_t width) {
  auto num = [](const nlohmann::json& j, const char* k) {
    return j.contains(k) && j[k].is_number() ? j[k].get<double>() : -1.0;
  };
  auto fixed = [](double v, const char* spec) {
    return v < 0 ? std::string("-") : fmt::format(fmt::runtime(spec), v);
  };
  std::string out =
      cut(fmt::format("msrun-ssh top: job {}  {}", snap.value("job", "?"), snap.value("time", "")),
          width) +
      "\n\n";
  out += cut(fmt::format("{:<18} {:>6} {:>6} {:>6} {:>12}  {:<10} {}", "host", "CPU%", "steal%",
                         "load", "mem free", "", "accel%"),
             width) +
         "\n";
  for (const auto& h : snap.value("hosts", nlohmann::json::array())) {
    double total = num(h, "mem_total_kb"), avail = num(h, "mem_avail_kb");
    out +=
        cut(fmt::format("{:<18} {:>6} {:>6} {:>6} {:>12}  {:<10} {}", h.value("host", "?"),
                        fixed(num(h, "busy") * 100, "{:.0f}"),
                        fixed(num(h, "steal") * 100, "{:.0f}"), fixed(num(h, "load"), "{:.2f}"),
                        total > 0 ? fmt::format("{:.1f}/{:.1f}G", avail / 1048576, total / 1048576)
                                  : std::string("-"),
                        h.value("straggler", false) ? "STRAGGLER" : "", accel_cell(h)),
            width) +
        "\n";
  }
  out += '\n';
  out += cut(fmt::format("{:>6} {:<18} {:>5} {:>6} {:>5} {:>8} {:>3} {:>7} {:>6} {:>8} {:>7}",
                         "rank", "host", "CPU%", "wait%", "thr%", "RSS", "st", "lines/s", "last",
                         "step", "steps/s"),
             width);
  out += '\n';
  for (const auto& r : snap.value("ranks", nlohmann::json::array())) {
    double rss = num(r, "rss_kb");
    out +=
        cut(fmt::format("{:>6} {:<18} {:>5} {:>6} {:>5} {:>8} {:>3} {:>7} {:>6} {:>8} {:>7}",
                        r.value("rank", "?"), r.value("host", "?"),
                        fixed(num(r, "cpu") * 100, "{:.0f}"), fixed(num(r, "wait") * 100, "{:.0f}"),
                        fixed(num(r, "throttled") * 100, "{:.0f}"),
                        rss < 0 ? std::string("-") : fmt::format("{:.0f}M", rss / 1024),
                        r.value("state", "-"), fixed(num(r, "lines_per_s"), "{:.1f}"),
                        fixed(num(r, "last_line_age_s"), "{:.0f}s"),
                        fixed(num(r, "step"), "{:.0f}"), fixed(num(r, "steps_per_s"), "{:.2f}")),
            width) +
        "\n";
  }
  return out;
}

int top_command(const Options& options) {
  const std::string dir = jobs_dir(std::getenv);
  JobRecord record;
  if (options.job.empty()) {
    // The newest attached job whose launcher runs here.
    auto all = load_job_records(dir, stderr);
    auto it = std::find_if(all.begin(), all.end(), [](const JobRecord& r) {
      return !r.detached && !r.exit_status && launcher_runs_here(r);
    });
    if (it == all.end()) throw InputError(fmt::format("top: no running job in {}", dir));
    record = *it;
  } else {
    record = load_job_record(dir, options.job);
  }
  int sfd = signal_fd({SIGINT, SIGTERM, SIGHUP});
  if (record.detached) {
    int status = top_of_detached(record, options, sfd);
    ::close(sfd);
    return status;
  }
  const std::string path = top_file(dir, record.id);
  const bool tty = isatty(1);
  int status = kExitOk;
  bool seen = false;
  for (int waited = 0;; ++waited) {
    std::optional<std::string> text = read_whole_file(path);
    nlohmann::json snap =
        text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json(nullptr);
    if (!snap.is_object()) {
      if (!launcher_runs_here(record)) {
        std::printf("top: job %s has ended\n", record.id.c_str());
        break;
      }
      // The first snapshot comes once every process has started, which can take a while (slow
      // login rcs, many hosts); a job started with --watch=False (or without the launch agent,
      // which runs the samplers: --agent=False, --transport srun) never writes one.
      if (!seen && !text && waited >= kTopWaitSeconds) {
        std::fprintf(stderr,
                     "top: job %s wrote no %s in %d s (started with --watch=False, --agent=False "
                     "or --transport srun?)\n",
                     record.id.c_str(), path.c_str(), kTopWaitSeconds);
        status = kExitUsage;
        break;
      }
      if (!seen && tty && waited == 0)
        std::printf("top: waiting for job %s to start...\n", record.id.c_str());
    } else {
      seen = true;
      show(snap, tty);
      if (options.once) break;
    }
    pollfd p{sfd, POLLIN, 0};
    if (::poll(&p, 1, 1000) > 0 && signal_status(sfd) != 0) break;
  }
  ::close(sfd);
  return status;
}

}  // namespace msrun_ssh
