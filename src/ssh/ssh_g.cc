// `ssh -G`'s answer read (ssh_config.h): the settings, the %-tokens, and the commands that ask
// ssh and reach a ProxyJump's hops.
#include <fmt/format.h>
#include <pwd.h>
#include <sys/stat.h>

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/ssh_config.h"

namespace msrun_ssh {
namespace {

int number(std::string_view line, std::string_view value, int lo, int hi) {
  int out = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || ec != std::errc() || p != value.data() + value.size() || out < lo ||
      out > hi)
    throw std::runtime_error(fmt::format("ssh -G: not a number in \"{}\"", line));
  return out;
}

bool yes_no(std::string_view line, std::string_view value) {
  if (value == "yes" || value == "true") return true;
  if (value == "no" || value == "false") return false;
  throw std::runtime_error(fmt::format("ssh -G: not yes or no in \"{}\"", line));
}

}  // namespace

std::optional<std::string> identity_agent_socket(
    const std::string& value, const std::function<const char*(const char*)>& getenv_fn) {
  if (value == "none") return std::nullopt;
  std::string name = value.empty() || value == "SSH_AUTH_SOCK" ? "SSH_AUTH_SOCK" : "";
  if (value.starts_with('$')) name = value.substr(1);
  if (name.empty()) return value;
  const char* socket = getenv_fn(name.c_str());
  if (!socket || !*socket) return std::nullopt;
  return name == "SSH_AUTH_SOCK" ? std::string() : std::string(socket);
}

SshHostConfig parse_ssh_g(std::string_view text) {
  SshHostConfig c;
  for (std::string_view line : split_lines(text)) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty()) continue;
    size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos)
      throw std::runtime_error(fmt::format("ssh -G: no value in \"{}\"", line));
    std::string_view key = line.substr(0, sp);
    std::string_view value = line.substr(sp + 1);
    if (key == "hostname") {
      c.hostname = value;
    } else if (key == "port") {
      c.port = number(line, value, 1, 65535);
    } else if (key == "user") {
      c.user = value;
    } else if (key == "identityfile") {
      c.identity_files.emplace_back(value);
    } else if (key == "identitiesonly") {
      c.identities_only = yes_no(line, value);
    } else if (key == "identityagent") {
      c.identity_agent = value;
    } else if (key == "certificatefile") {
      c.certificate_files.emplace_back(value);
    } else if (key == "proxyjump") {
      c.proxy_jump = value == "none" ? "" : std::string(value);
    } else if (key == "proxycommand") {
      c.proxy_command = value == "none" ? "" : std::string(value);
    } else if (key == "userknownhostsfile") {
      // "none": no file (ssh neither reads nor writes one), never a file named so.
      c.user_known_hosts_files = value == "none" ? std::vector<std::string>{} : owned_words(value);
    } else if (key == "globalknownhostsfile") {
      c.global_known_hosts_files =
          value == "none" ? std::vector<std::string>{} : owned_words(value);
    } else if (key == "hostkeyalias") {
      c.host_key_alias = value == "none" ? "" : std::string(value);
    } else if (key == "revokedhostkeys") {
      c.revoked_host_keys = value == "none" ? "" : std::string(value);
    } else if (key == "hashknownhosts") {
      c.hash_known_hosts = yes_no(line, value);
    } else if (key == "stricthostkeychecking") {
      if (value == "accept-new")
        c.strict_host_key_checking = HostKeyPolicy::kAcceptNew;
      else if (value == "ask")
        c.strict_host_key_checking = HostKeyPolicy::kYes;  // nobody to ask: refused
      else
        c.strict_host_key_checking = yes_no(line, value) ? HostKeyPolicy::kYes : HostKeyPolicy::kNo;
    } else if (key == "connecttimeout") {
      if (value == "none")
        c.connect_timeout_s.reset();
      else
        c.connect_timeout_s = number(line, value, 0, 1 << 30);
    } else if (key == "serveraliveinterval") {
      c.server_alive_interval_s = number(line, value, 0, 1 << 30);
    } else if (key == "canonicalizehostname") {
      c.canonicalize_hostname = value != "false" && value != "no";
    } else if (key == "serveralivecountmax") {
      c.server_alive_count_max = number(line, value, 0, 1 << 30);
    }
  }
  if (c.hostname.empty()) throw std::runtime_error("ssh -G: no hostname in its answer");
  return c;
}

std::string expand_ssh_tokens(std::string_view value, const SshTokens& t) {
  std::string out;
  if (value.starts_with("~/")) {
    out = t.home;
    value.remove_prefix(1);
  } else if (value.starts_with('~')) {
    // "~user/...": that user's home, as ssh's tilde_expand.
    size_t slash = value.find('/');
    std::string user(value.substr(1, slash == std::string_view::npos ? value.npos : slash - 1));
    const passwd* pw = ::getpwnam(user.c_str());
    if (!pw || !pw->pw_dir)
      throw std::runtime_error(fmt::format("\"{}\": no user {}", value, user));
    out = pw->pw_dir;
    value.remove_prefix(slash == std::string_view::npos ? value.size() : slash);
  }
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '$' && i + 1 < value.size() && value[i + 1] == '{') {
      // ${NAME}: the launcher's environment, as ssh's for IdentityFile (ssh -G leaves it as is).
      size_t close = value.find('}', i);
      if (close == std::string_view::npos)
        throw std::runtime_error(fmt::format("\"{}\": an unclosed ${{", value));
      std::string name(value.substr(i + 2, close - i - 2));
      const char* v = std::getenv(name.c_str());
      if (!v)
        throw std::runtime_error(
            fmt::format("\"{}\": environment variable {} is not set", value, name));
      out += v;
      i = close;
      continue;
    }
    if (value[i] != '%') {
      out += value[i];
      continue;
    }
    if (i + 1 == value.size())
      throw std::runtime_error(fmt::format("\"{}\": a lone % at the end", value));
    char token = value[++i];
    const SshHostConfig* h = t.host;
    static const std::string none;
    const std::string& hostname = t.hostname ? *t.hostname : h ? h->hostname : none;
    switch (token) {
      case '%':
        out += '%';
        break;
      case 'd':
        out += t.home;
        break;
      case 'u':
        out += t.local_user;
        break;
      case 'i':
        out += t.uid;
        break;
      case 'l':
        out += t.local_host;
        break;
      case 'L':
        out += t.local_host.substr(0, t.local_host.find('.'));
        break;
      case 'n':
        out += t.original_host;
        break;
      case 'h':
        out += h ? hostname : "";
        break;
      case 'p':
        out += h ? std::to_string(h->port) : "";
        break;
      case 'r':
        out += h ? h->user : "";
        break;
      case 'C':  // as ssh 9.2: a hash of %l%h%p%r
        out += h ? sha1_hex(t.local_host + hostname + std::to_string(h->port) + h->user) : "";
        break;
      case 'k':  // the HostKeyAlias, else the name as given (ssh's command line: the host file's)
        out += h && !h->host_key_alias.empty() ? h->host_key_alias : t.original_host;
        break;
      default:
        throw std::runtime_error(fmt::format("\"{}\": unknown token %{}", value, token));
    }
  }
  return out;
}

std::string proxy_command_for_libssh(std::string_view command, const std::string& hostname,
                                     int port, const std::string& user,
                                     const std::string& original_host,
                                     const std::string& host_key_alias) {
  // libssh expands the tokens of its ProxyCommand itself, but not %n and with other meanings for
  // some: every token is expanded here as ssh does (ProxyCommand takes %%, %h, %k, %n, %p and %r:
  // its expand_proxy_command) and each '%' of the result doubled, for libssh to read back as it
  // is.
  auto escaped = [](std::string_view v) {
    std::string out;
    for (char ch : v) out += ch == '%' ? std::string("%%") : std::string(1, ch);
    return out;
  };
  std::string out;
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] != '%') {
      out += command[i];
      continue;
    }
    if (i + 1 == command.size())
      throw std::runtime_error(fmt::format("ProxyCommand \"{}\": a lone % at the end", command));
    switch (command[++i]) {
      case '%':
        out += "%%";
        break;
      case 'h':
        out += escaped(hostname);
        break;
      case 'k':
        out += escaped(host_key_alias.empty() ? original_host : host_key_alias);
        break;
      case 'n':
        out += escaped(original_host);
        break;
      case 'p':
        out += std::to_string(port);
        break;
      case 'r':
        out += escaped(user);
        break;
      default:
        throw std::runtime_error(fmt::format(
            "ProxyCommand \"{}\": unknown token %{} (ssh takes %%, %h, %k, %n, %p and %r there)",
            command, command[i]));
    }
  }
  return out;
}

std::string proxy_jump_command(std::string_view hops, const std::string& config_file,
                               const std::string& log_file) {
  std::vector<std::string> list;
  size_t pos = 0;
  while (true) {
    size_t comma = hops.find(',', pos);
    list.emplace_back(trim(hops.substr(pos, comma - pos)));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  std::string last = list.back();
  list.pop_back();
  for (const auto& hop : list)
    if (hop.empty() || hop.find_first_of(" \t'\"") != std::string::npos)
      throw std::runtime_error(fmt::format("ProxyJump {}: not [user@]host[:port]", hops));
  std::string user;
  if (size_t at = last.rfind('@'); at != std::string::npos) {
    user = last.substr(0, at);
    last = last.substr(at + 1);
  }
  std::string port;
  if (last.starts_with('[')) {
    // ssh -G brackets an address: "[198.18.7.3]", "[::1]:2222"; ssh would take the brackets as
    // part of a host argument's name.
    size_t close = last.find(']');
    std::string rest = close == std::string::npos ? "" : last.substr(close + 1);
    if (close == std::string::npos || (!rest.empty() && (rest[0] != ':' || rest.size() == 1)))
      throw std::runtime_error(fmt::format("ProxyJump {}: not [user@]host[:port]", hops));
    if (!rest.empty()) port = rest.substr(1);
    last = last.substr(1, close - 1);
  } else if (size_t colon = last.rfind(':');
             colon != std::string::npos && last.find(':') == colon && colon + 1 < last.size()) {
    port = last.substr(colon + 1);
    last = last.substr(0, colon);
  }
  if (last.empty() || last.find_first_of(" \t'\"") != std::string::npos ||
      user.find_first_of(" \t'\"") != std::string::npos ||
      port.find_first_not_of("0123456789") != std::string::npos)
    throw std::runtime_error(fmt::format("ProxyJump {}: not [user@]host[:port]", hops));
  std::string cmd = "ssh -o BatchMode=yes";
  if (!log_file.empty()) cmd += " -E " + shell_quote(log_file) + " -o LogLevel=INFO";
  if (!user.empty()) cmd += " -l " + shell_quote(user);
  if (!port.empty()) cmd += " -p " + port;
  if (!list.empty()) {
    std::string rest;
    for (const auto& hop : list) rest += (rest.empty() ? "" : ",") + hop;
    cmd += " -J " + shell_quote(rest);
  }
  if (!config_file.empty()) cmd += " -F " + shell_quote(config_file);
  return cmd + " -W '[%h]:%p' " + shell_quote(last);
}

namespace {

// ssh OPTIONS [-F config_file] [-l USER] [-p PORT] [-i IDENTITY] [-o UserKnownHostsFile=FILE]
// -- NAME: the host file's values as ssh's options (the identity file only when asked).
std::vector<std::string> ssh_argv(const SshQuery& q, const std::string& config_file,
                                  const std::vector<std::string>& options, bool identity) {
  std::vector<std::string> argv{"ssh"};
  argv.insert(argv.end(), options.begin(), options.end());
  if (!config_file.empty()) argv.insert(argv.end(), {"-F", config_file});
  if (!q.user.empty()) argv.insert(argv.end(), {"-l", q.user});
  if (q.port) argv.insert(argv.end(), {"-p", std::to_string(*q.port)});
  if (identity && !q.identity_file.empty()) argv.insert(argv.end(), {"-i", q.identity_file});
  if (!q.known_hosts.empty())
    argv.insert(argv.end(), {"-o", "UserKnownHostsFile=" + q.known_hosts});
  argv.insert(argv.end(), {"--", q.name});
  return argv;
}

}  // namespace

std::string ssh_command_line(const SshQuery& q, const std::string& config_file,
                             const std::vector<std::string>& options, const std::string& remote) {
  std::vector<std::string> argv = ssh_argv(q, config_file, options, true);
  argv.push_back(remote);
  std::string line;
  for (const auto& word : argv) {
    bool plain = !word.empty() && word.find_first_not_of(
                                      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                      "0123456789_@%+=:,./-") == std::string::npos;
    line += (line.empty() ? "" : " ") + (plain ? word : shell_quote(word));
  }
  return line;
}

bool identity_file_exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::vector<std::string> ssh_g_command(const SshQuery& q, const std::string& config_file) {
  // BatchMode=no: Debian's client defaults ServerAliveInterval to 300 under BatchMode yes, and a
  // host's silence limit (interval x count: 15 min) is taken from what the config sets, not from
  // that default. Nothing else read here depends on BatchMode (the launcher never prompts).
  // The identity file as -i when it exists (ssh -i takes it only then, as its stat says): ssh's
  // own files then stand in place of its defaults.
  return ssh_argv(q, config_file, {"-G", "-o", "BatchMode=no"},
                  identity_file_exists(q.identity_file));
}

}  // namespace msrun_ssh
