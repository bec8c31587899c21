// OpenSSH's own answer for a host's settings (ssh_config.h): `ssh -G`, asked and parsed.
#include "msrun_ssh/ssh_config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "config_walk.h"
#include "msrun_ssh/base.h"
#include "spawn.h"

namespace msrun_ssh {
namespace {

// One `ssh -G` running: its pid, its output so far, and when it must have ended.
struct Asking {
  pid_t pid = -1;
  int out = -1, err = -1;
  std::string stdout_text, stderr_text;
  bool out_open = true, err_open = true;
  double deadline_ms = 0;
  size_t query = 0;
};

// Starts `argv` with stdin on /dev/null and its output on two pipes; pid -1 when it cannot.
Asking start(const std::vector<std::string>& argv) {
  Asking a;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return a;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return a;
  }
  pid_t pid = spawn_program(argv, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    return a;
  }
  a.pid = pid;
  a.out = out[0];
  a.err = err[0];
  return a;
}

// Reads what `fd` has; false at its end.
bool drain(int fd, std::string& into) {
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n > 0) into.append(buf, static_cast<size_t>(n));
  return n > 0 || (n < 0 && errno == EINTR);
}

}  // namespace

bool ssh_client_installed() {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t colon = std::min(dirs.find(':', pos), dirs.size());
    std::string dir(dirs.substr(pos, colon - pos));
    if (::access(((dir.empty() ? "." : dir) + "/ssh").c_str(), X_OK) == 0) return true;
    pos = colon + 1;
  }
  return false;
}

namespace {

// Waits for `a` to end (it was killed, or its output ended); the resolution it gave.
SshResolution finish(Asking& a, bool timed_out, double timeout_s) {
  ::close(a.out);
  ::close(a.err);
  int status = 0;
  ::waitpid(a.pid, &status, 0);
  SshResolution r;
  // ssh ends its messages' lines with \r\n (they would show as \x0d in ours).
  std::string err;
  for (std::string_view line : split_lines(trim(a.stderr_text, " \t\r\n")))
    err += (err.empty() ? "" : "\n") + std::string(trim(line, "\r"));
  if (timed_out) {
    r.error = fmt::format("ssh -G did not answer within {} s", timeout_s);
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    r.error = err.empty() ? "ssh -G failed" : err;
    r.refused = WIFEXITED(status);
  } else {
    try {
      r.config = parse_ssh_g(a.stdout_text);
      r.text = std::move(a.stdout_text);
    } catch (const std::runtime_error& e) {
      r.error = e.what();
    }
  }
  return r;
}

}  // namespace

namespace {

// Asks `ssh -G` for the queries `which`, at most `parallel` at a time; their answers go to `out`.
// False when no ssh client can be started at all.
bool ask(const std::vector<SshQuery>& queries, const std::vector<size_t>& which,
         const std::string& config_file, int parallel, double timeout_s,
         std::vector<SshResolution>& out) {
  std::vector<Asking> running;
  size_t next = 0;
  while (next < which.size() || !running.empty()) {
    while (next < which.size() && static_cast<int>(running.size()) < std::max(1, parallel)) {
      size_t q = which[next++];
      Asking a = start(ssh_g_command(queries[q], config_file));
      if (a.pid < 0) {
        if (errno == ENOENT) return false;
        out[q].error = fmt::format("cannot run ssh -G: {}", std::strerror(errno));
        continue;
      }
      a.query = q;
      a.deadline_ms = monotonic_ms() + timeout_s * 1000;
      running.push_back(std::move(a));
    }
    if (running.empty()) continue;
    std::vector<pollfd> fds;
    for (const auto& a : running) {
      fds.push_back({a.out_open ? a.out : -1, POLLIN, 0});
      fds.push_back({a.err_open ? a.err : -1, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 50);
    double now = monotonic_ms();
    for (size_t i = running.size(); i-- > 0;) {
      Asking& a = running[i];
      if (fds[2 * i].revents) a.out_open = drain(a.out, a.stdout_text);
      if (fds[2 * i + 1].revents) a.err_open = drain(a.err, a.stderr_text);
      bool ended = !a.out_open && !a.err_open;
      bool late = !ended && now > a.deadline_ms;
      if (!ended && !late) continue;
      if (late) ::kill(a.pid, SIGKILL);
      out[a.query] = finish(a, late, timeout_s);
      running.erase(running.begin() + static_cast<long>(i));
    }
  }
  return true;
}

// One `Host` line of the configs ssh reads (its patterns, in order; "!" negates one), or a
// Match line whose criteria are all `all`, `originalhost` or `host` before any HostName (so that
// host is still the name itself): each criterion's comma-separated patterns, all of which must
// match.
struct HostLine {
  std::vector<std::string> patterns;
  bool is_match = false;
  std::vector<std::vector<std::string>> criteria;
};

bool host_line_matches(const HostLine& line, std::string_view name) {
  return pattern_list_matches(name, line.patterns);
}

// Unlike Host lines, a Match line's host and originalhost compare without regard to case
// (OpenSSH's match_hostname): its patterns are kept lower-cased.
bool match_line_matches(const HostLine& line, std::string_view name) {
  std::string lower = to_lower(name);
  return std::all_of(line.criteria.begin(), line.criteria.end(), [&](const auto& patterns) {
    return host_line_matches(HostLine{patterns}, lower);
  });
}

// Which Host and Match lines match `name`, as a string of 0 and 1.
std::string matched_lines(const std::vector<HostLine>& lines, std::string_view name) {
  std::string out;
  for (const auto& l : lines)
    out += (l.is_match ? match_line_matches(l, name) : host_line_matches(l, name)) ? '1' : '0';
  return out;
}

}  // namespace

std::optional<std::vector<std::string>> match_words(std::string_view args) {
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    while (i < args.size() && (args[i] == ' ' || args[i] == '\t')) ++i;
    if (i == args.size()) return out;
    std::string word;
    if (args[i] == '"') {
      size_t close = args.find(args[i], i + 1);
      if (close == std::string_view::npos) return std::nullopt;
      word = args.substr(i + 1, close - i - 1);
      i = close + 1;
      if (i < args.size() && args[i] != ' ' && args[i] != '\t') return std::nullopt;
    } else {
      size_t end = args.find_first_of(" \t", i);
      if (end == std::string_view::npos) end = args.size();
      word = args.substr(i, end - i);
      i = end;
    }
    if (word.find_first_of("\\\"'") != std::string::npos) return std::nullopt;
    out.push_back(std::move(word));
  }
}

namespace {

// Whether an exec command's tokens are the same for every name of the same Host lines: none of
// %h, %n, %C, %k, %j (the name, its hash, its alias, its jump hosts) or a token this reading
// does not know.
bool exec_is_name_free(std::string_view command) {
  for (size_t i = command.find('%'); i != std::string_view::npos; i = command.find('%', i + 2)) {
    if (i + 1 == command.size()) return false;
    if (std::string_view("%LldiurpU").find(command[i + 1]) == std::string_view::npos) return false;
  }
  return true;
}

// A Match line's criteria as HostLine reads them: host and originalhost kept as patterns; all,
// user, localuser and an exec whose command does not name the host dropped, since they answer
// alike for every name the same earlier lines matched (the user is the same, the command the
// same). False for any other criterion (canonical, final, a negated one, an exec that names the
// host ...), or `host` once a HostName came before it.
bool read_match_line(std::string_view args, bool hostname_seen, HostLine& out) {
  out.is_match = true;
  std::optional<std::vector<std::string>> w = match_words(args);
  if (!w) return false;
  for (size_t i = 0; i < w->size(); ++i) {
    std::string criterion = to_lower((*w)[i]);
    if (criterion == "all") continue;
    if (i + 1 == w->size()) return false;
    const std::string& value = (*w)[++i];
    if (criterion == "user" || criterion == "localuser") continue;
    if (criterion == "exec" && exec_is_name_free(value)) continue;
    if (criterion != "originalhost" && criterion != "host") return false;
    if (criterion == "host" && hostname_seen) return false;
    std::vector<std::string> patterns;
    for (std::string_view p : split_words(value, ",")) patterns.push_back(to_lower(p));
    out.criteria.push_back(std::move(patterns));
  }
  return true;
}

// Reads the Host and Match lines of config `path` and the files it includes (relative names under
// `base`) into `out`; false when they hold what this reading cannot follow (a Match line other
// than read_match_line's, a quoted pattern, an Include with tokens or variables, Includes nested
// too deeply) or `must_exist` and `path` cannot be read. `hostname_seen`: a HostName line came
// before, in ssh's reading order.
bool read_host_lines(const std::string& path, const std::string& base, bool must_exist,
                     std::vector<HostLine>& out, bool& hostname_seen) {
  auto visit = [&](const ConfigLine& l) {
    // ssh strips either quote (a Host 'gpu*' line is the pattern gpu*): not followed here.
    if (l.keyword != "match" && l.value.find_first_of("\"'") != std::string_view::npos)
      return false;
    if (l.keyword == "hostname") hostname_seen = true;
    if (l.keyword == "host") {
      out.push_back({owned_words(l.value)});
    } else if (l.keyword == "match") {
      HostLine m;
      if (!read_match_line(l.value, hostname_seen, m)) return false;
      out.push_back(std::move(m));
    } else if (l.keyword == "include") {
      return l.value.find_first_of("%$") == std::string_view::npos;
    }
    return true;
  };
  ConfigWalk w = walk_config(path, base, visit);
  return w == ConfigWalk::kRead || (w == ConfigWalk::kMissing && !must_exist);
}

// The Host lines of every config ssh reads for `config_file` ("": the user's and the system's),
// in ssh's order; nullopt when one holds what read_host_lines cannot follow.
std::optional<std::vector<HostLine>> host_lines(const std::string& config_file) {
  const std::string home = config_home();
  std::vector<HostLine> lines;
  bool hostname_seen = false;
  bool ok =
      config_file.empty()
          ? read_host_lines(home + "/.ssh/config", home + "/.ssh", false, lines, hostname_seen) &&
                read_host_lines("/etc/ssh/ssh_config", "/etc/ssh", false, lines, hostname_seen)
          : read_host_lines(config_file, home + "/.ssh", true, lines, hostname_seen);
  if (!ok) return std::nullopt;
  return lines;
}

// Whether `name` is a numeric address that ssh writes otherwise (getaddrinfo and getnameinfo,
// as its resolve_addr: 10.0.0.010 is 10.0.0.8, 10.1 is 10.0.0.1, FE80::0001 is fe80::1), or
// that ssh keeps in capitals (FE80::1: an address is not lower-cased): its host name is not the
// lower-cased name an answer shared with it would give it, so it is asked on its own.
bool address_ssh_rewrites(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(name.c_str(), "22", &hints, &res) != 0 || !res) return false;
  char written[NI_MAXHOST] = {};
  bool rewritten = getnameinfo(res->ai_addr, res->ai_addrlen, written, sizeof written, nullptr, 0,
                               NI_NUMERICHOST) != 0 ||
                   std::strcmp(written, name.c_str()) != 0;
  freeaddrinfo(res);
  return rewritten;
}

// Whether the answer for `name` can stand for another name of the same Host lines: it holds the
// name nowhere but in its "host" line and in a hostname that is the name itself (no HostName, or
// HostName %h), and the host name is not canonicalized (a DNS answer per name).
bool stands_for_others(const SshResolution& r, std::string_view name) {
  if (!r.config || r.config->canonicalize_hostname) return false;
  std::string needle = to_lower(name);
  for (std::string_view line : split_lines(r.text)) {
    if (line.starts_with("host ") || line.starts_with("hostname ")) continue;
    if (to_lower(line).find(needle) != std::string::npos) return false;
  }
  const std::string& host = r.config->hostname;
  return host == needle || host.find(needle) == std::string::npos;
}

}  // namespace

SshHostConfig SharedHostConfig::whole() const {
  SshHostConfig config = *shared;
  config.hostname = hostname;
  return config;
}

SharedHostConfig HostConfigSharer::share(SshHostConfig config) {
  constexpr size_t kLooked = 8;
  SharedHostConfig out{nullptr, std::exchange(config.hostname, {})};
  for (size_t i = recent_.size(); i > 0 && i + kLooked > recent_.size(); --i)
    if (*recent_[i - 1] == config) {
      out.shared = recent_[i - 1];
      return out;
    }
  recent_.push_back(std::make_shared<const SshHostConfig>(std::move(config)));
  out.shared = recent_.back();
  return out;
}

std::optional<std::vector<SshResolution>> resolve_with_openssh(const std::vector<SshQuery>& queries,
                                                               const std::string& config_file,
                                                               int parallel, double timeout_s) {
  if (!ssh_client_installed()) return std::nullopt;
  std::vector<SshResolution> out(queries.size());
  // An answer is asked once per run: the plan (host names) and the pool (every setting) ask the
  // same questions, and each `ssh -G` costs 10-60 ms of CPU.
  // Kept as shared settings (SharedHostConfig), without ssh's text (about 4 KB a host, read only
  // while grouping the names below).
  struct Cached {
    SharedHostConfig config;
    std::string error;
  };
  static std::mutex cache_lock;
  static std::map<std::string, Cached> cache;
  static std::string cache_of;  // the config file and its text's hash the cache holds answers of
  static HostConfigSharer sharer;
  std::lock_guard<std::mutex> hold(cache_lock);
  // A config rewritten between two questions is asked anew.
  std::string config_key =
      fmt::format("{}\n{}", config_file,
                  sha256_hex(config_file.empty() ? "" : read_whole_file(config_file).value_or("")));
  if (config_key != cache_of) {
    cache.clear();
    sharer = HostConfigSharer();
    cache_of = std::move(config_key);
  }
  auto cache_key = [&](const SshQuery& q) {
    return fmt::format("{}\n{}\n{}\n{}\n{}", q.name, q.user, q.port.value_or(0), q.known_hosts,
                       q.identity_file);
  };
  std::vector<bool> known(queries.size(), false);
  for (size_t i = 0; i < queries.size(); ++i)
    if (auto it = cache.find(cache_key(queries[i])); it != cache.end()) {
      out[i].config = it->second.config.whole();
      out[i].error = it->second.error;
      known[i] = true;
    }
  // Names that the same Host lines match (and that no Match line could tell apart) get the same
  // answer but for their own name: one of them is asked, the others only when its answer holds
  // its name elsewhere. Without that reading of the config, every distinct query is asked.
  std::optional<std::vector<HostLine>> lines = host_lines(config_file);
  std::map<std::string, std::vector<size_t>> groups;  // key -> queries, the first one asked
  for (size_t i = 0; i < queries.size(); ++i) {
    if (known[i]) continue;
    const SshQuery& q = queries[i];
    std::string key =
        lines && !address_ssh_rewrites(q.name) ? matched_lines(*lines, q.name) : "name " + q.name;
    key += fmt::format("\n{}\n{}\n{}\n{}\n", q.user, q.port.value_or(0), q.known_hosts,
                       q.identity_file);
    groups[key].push_back(i);
  }
  // Each group's first name is asked, and a second name of it too: its answer must be the first
  // one's but for its own name where the first has its own, else the group is asked name by name.
  // That is what the config's text cannot tell: a HostName fixed to the first name ("Host *" /
  // "HostName vm" asked first for vm), or a value hashed from the name (%C) that holds no name.
  std::vector<size_t> first;
  std::map<size_t, size_t> probe_of;  // a group's first member -> its second name's query
  first.reserve(groups.size());
  for (const auto& [key, members] : groups) {
    first.push_back(members.front());
    for (size_t m : members)
      if (queries[m].name != queries[members.front()].name) {
        probe_of[members.front()] = m;
        first.push_back(m);
        break;
      }
  }
  if (!ask(queries, first, config_file, parallel, timeout_s, out)) return std::nullopt;
  std::vector<size_t> again;
  for (const auto& [key, members] : groups) {
    size_t rep = members.front();
    bool shared = stands_for_others(out[rep], queries[rep].name);
    if (shared && probe_of.contains(rep)) {
      size_t probe = probe_of[rep];
      std::optional<SshHostConfig> expected = out[rep].config;
      if (expected && expected->hostname == to_lower(queries[rep].name))
        expected->hostname = to_lower(queries[probe].name);
      shared = out[probe].config && expected && *out[probe].config == *expected &&
               out[probe].error == out[rep].error;
    }
    for (size_t i = 1; i < members.size(); ++i) {
      size_t m = members[i];
      if (out[m].config || !out[m].error.empty()) continue;  // asked already (the probe)
      // The answer without ssh's text (about 4 KB: a copy per host was 2 MB at 512 hosts).
      if (queries[m].name == queries[rep].name) {
        out[m] = SshResolution{out[rep].config, out[rep].error, {}, out[rep].refused};
      } else if (shared) {
        out[m] = SshResolution{out[rep].config, out[rep].error, {}, out[rep].refused};
        if (out[m].config->hostname == to_lower(queries[rep].name))
          out[m].config->hostname = to_lower(queries[m].name);
      } else {
        again.push_back(m);
      }
    }
  }
  if (!ask(queries, again, config_file, parallel, timeout_s, out)) return std::nullopt;
  for (size_t i = 0; i < queries.size(); ++i) {
    if (!known[i] && out[i].config)
      cache.emplace(cache_key(queries[i]), Cached{sharer.share(*out[i].config), out[i].error});
    std::string().swap(out[i].text);  // read only while grouping the names above
  }
  // ssh -G was given the host file's identity as -i when it exists, and then lists it first and
  // leaves ssh's default files out, as ssh -i does. A missing one ssh -G leaves out (with its
  // defaults): it comes first all the same, so that the login names it.
  for (size_t i = 0; i < queries.size(); ++i)
    if (out[i].config && !queries[i].identity_file.empty() &&
        !identity_file_exists(queries[i].identity_file)) {
      auto& files = out[i].config->identity_files;
      files.insert(files.begin(), queries[i].identity_file);
    }
  return out;
}

}  // namespace msrun_ssh
