// The SSH pool's host keys: each host's known_hosts lines, narrowed and handed to libssh, the key
// verified as OpenSSH's StrictHostKeyChecking says, and a new key recorded (accept-new).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pool.h"
#include "spawn.h"

namespace msrun_ssh {
namespace {

// An in-memory file holding `text`, readable by path as /proc/self/fd/N; -1 on failure.
int memory_file(const std::string& text) {
  int fd = memfd_create("msrun-ssh-known_hosts", MFD_CLOEXEC);
  if (fd < 0) return -1;
  for (size_t done = 0; done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return fd;
}

std::string option_string(ssh_session s, ssh_options_e option) {
  char* value = nullptr;
  if (ssh_options_get(s, option, &value) != SSH_OK || !value) return "";
  std::string out = value;
  ssh_string_free_char(value);
  return out;
}

// The server's public key's base64 blob ("" when libssh has none); the key in *keep, for the
// caller to free.
std::string server_key_blob(ssh_session s, ssh_key* keep) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(s, &key) != SSH_OK || !key) return "";
  char* b64 = nullptr;
  std::string out;
  if (ssh_pki_export_pubkey_base64(key, &b64) == SSH_OK && b64) out = b64;
  ssh_string_free_char(b64);
  *keep = key;
  return out;
}

// ssh-keygen -Q -f KRL KEYFILE's exit status: 0 not revoked, 1 revoked, else it could not tell.
int krl_status(const std::string& krl, const std::string& key_file) {
  pid_t pid = spawn_program({"ssh-keygen", "-Q", "-f", krl, key_file}, -1, -1);
  if (pid < 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

// Why the server's key is revoked for `name`, as ssh judges it, "" when it is not: an @revoked
// line of a known_hosts file ssh reads for the host (libssh skips marker lines), or the ssh
// config's RevokedHostKeys (a KRL, asked of ssh-keygen -Q, or a list of public keys). A
// RevokedHostKeys file that cannot be read refuses the host, as ssh does.
std::string SshPool::Impl::revoked_because(Conn& c, const SshHostConfig* h,
                                           const std::string& name) {
  ssh_key key = nullptr;
  std::string blob = server_key_blob(c.session, &key);
  auto free_key = std::unique_ptr<ssh_key_struct, void (*)(ssh_key)>(key, ssh_key_free);
  if (blob.empty()) return "";
  std::vector<std::string> files;
  if (h) {
    files = h->user_known_hosts_files;
    files.insert(files.end(), h->global_known_hosts_files.begin(),
                 h->global_known_hosts_files.end());
  } else {  // as narrow_known_hosts finds them
    std::string user = option_string(c.session, SSH_OPTIONS_KNOWNHOSTS);
    std::string global = option_string(c.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS);
    files = {user.empty() ? (ssh_dir.empty() ? "" : ssh_dir + "/known_hosts") : expand_path(user),
             global.empty() ? "/etc/ssh/ssh_known_hosts" : expand_path(global)};
  }
  for (const auto& f : files)  // each read once per launch, whatever the number of hosts
    if (!f.empty() && access(f.c_str(), R_OK) == 0)
      if (size_t line = known_hosts_index(f).revoking_line(name, blob))
        return fmt::format("host key REVOKED ({} line {}: @revoked): refused", f, line);
  if (!h || h->revoked_host_keys.empty()) return "";
  const std::string& given = h->revoked_host_keys;
  std::string path = given.find_first_of("%$") == std::string::npos ? expand_path(given) : "";
  std::optional<std::string> text = path.empty() ? std::nullopt : read_whole_file(path);
  if (!text)
    return fmt::format(
        "cannot read the ssh config's RevokedHostKeys {}: refused, as ssh refuses it",
        in_quotes(given));
  constexpr std::string_view kKrlMagic("SSHKRL\n\0", 8);
  if (!text->starts_with(kKrlMagic))
    return key_listed(*text, blob)
               ? fmt::format("host key REVOKED (listed in RevokedHostKeys {}): refused", path)
               : "";
  auto [verdict, first] = krl_verdicts.try_emplace({path, blob}, -1);
  if (first) {
    char key_file[] = "/tmp/msrun-ssh-hostkey-XXXXXX";
    int fd = mkstemp(key_file);
    if (fd >= 0) close(fd);
    if (fd >= 0 && ssh_pki_export_pubkey_file(key, key_file) == SSH_OK)
      verdict->second = krl_status(path, key_file);
    if (fd >= 0) unlink(key_file);
  }
  int status = verdict->second;
  if (status < 0) krl_verdicts.erase(verdict);  // not told: the next connection asks again
  if (status == 0) return "";
  return status == 1
             ? fmt::format("host key REVOKED (by the KRL RevokedHostKeys {}): refused", path)
             : fmt::format(
                   "cannot check the host key against the KRL RevokedHostKeys {} "
                   "(ssh-keygen -Q): refused",
                   path);
}

// The path libssh would open for a known_hosts option value; "" when it holds what only libssh
// expands (%d, %u, ~user).
std::string SshPool::Impl::expand_path(const std::string& value) const {
  if (value.find('%') != std::string::npos) return "";
  if (value.starts_with("~/")) return home_dir.empty() ? "" : home_dir + value.substr(1);
  if (value.starts_with('~')) return "";
  return value;
}

// The lines of known_hosts file `path` for a host, computed once per file and host: a host with
// several connections (past MaxSessions) does not pay its HMACs again.
const std::string& SshPool::Impl::known_hosts_lines(const std::string& path,
                                                    const std::string& host, int port) {
  auto key = std::make_tuple(path, host, port);
  auto it = known_hosts_lines_of.find(key);
  if (it == known_hosts_lines_of.end())
    it = known_hosts_lines_of.emplace(key, known_hosts_index(path).lines_for(host, port)).first;
  return it->second;
}

const KnownHostsIndex& SshPool::Impl::known_hosts_index(const std::string& path) {
  auto& index = known_hosts_files[path];
  if (!index) index = std::make_unique<KnownHostsIndex>(read_whole_file(path).value_or(""));
  return *index;
}

// Points the session's known_hosts options at in-memory copies of its files that hold only the
// lines for its host (KnownHostsIndex). Leaves the session as it is when a path cannot be told
// for sure or a copy cannot be made: libssh then reads the files themselves.
void SshPool::Impl::narrow_known_hosts(Conn& c) {
  if (has_openssh(c.host)) return narrow_openssh_known_hosts(c);
  std::string user = option_string(c.session, SSH_OPTIONS_KNOWNHOSTS);
  user = user.empty() ? (ssh_dir.empty() ? "" : ssh_dir + "/known_hosts") : expand_path(user);
  std::string global = option_string(c.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS);
  global = global.empty() ? "/etc/ssh/ssh_known_hosts" : expand_path(global);
  std::string host = option_string(c.session, SSH_OPTIONS_HOST);
  unsigned int port = 22;
  if (!narrowing || user.empty() || global.empty() || host.empty() ||
      ssh_options_get_port(c.session, &port) != SSH_OK)
    return;
  if (hand_known_hosts(c, known_hosts_lines(user, host, static_cast<int>(port)),
                       known_hosts_lines(global, host, static_cast<int>(port)))) {
    c.known_hosts = user;
    c.global_known_hosts = global;
  }
}

// Hands the session in-memory copies holding `user_lines` and `global_lines` as its known_hosts
// files; false (the session as it was) when they cannot be made.
bool SshPool::Impl::hand_known_hosts(Conn& c, const std::string& user_lines,
                                     const std::string& global_lines) {
  int user_fd = narrowing ? memory_file(user_lines) : -1;
  int global_fd = narrowing ? memory_file(global_lines) : -1;
  if (user_fd < 0 || global_fd < 0) {
    if (user_fd >= 0) close(user_fd);
    if (global_fd >= 0) close(global_fd);
    return false;
  }
  c.known_hosts_fds = {user_fd, global_fd};
  ssh_options_set(c.session, SSH_OPTIONS_KNOWNHOSTS,
                  fmt::format("/proc/self/fd/{}", user_fd).c_str());
  ssh_options_set(c.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS,
                  fmt::format("/proc/self/fd/{}", global_fd).c_str());
  return true;
}

// With OpenSSH's settings: every UserKnownHostsFile and GlobalKnownHostsFile, each narrowed to
// the lines for the host as ssh looks it up (its HostKeyAlias, else "host" or "[host]:port"); the
// lines found under an alias are renamed to what libssh looks up. Without /proc, libssh reads the
// first file of each list itself.
void SshPool::Impl::narrow_openssh_known_hosts(Conn& c) {
  const SshHostConfig& h = *openssh[c.host].shared;  // its hostname is empty: the host's own
  const std::string& hostname = openssh[c.host].hostname;
  // As ssh -G gives them: their tokens and "~" expanded already (a second expansion would read
  // "kh%%h" as kh<host>), "none" left out.
  const std::vector<std::string>& user = h.user_known_hosts_files;
  const std::vector<std::string>& global = h.global_known_hosts_files;
  c.known_hosts = user.empty() ? "" : user[0];
  c.global_known_hosts = global.empty() ? "" : global[0];
  const bool alias = !h.host_key_alias.empty();
  const std::string& name = alias ? h.host_key_alias : hostname;
  const int port = alias ? 22 : h.port;
  auto lines_of = [&](const std::vector<std::string>& files) {
    std::string lines;
    for (const auto& f : files)
      if (access(f.c_str(), R_OK) == 0)
        lines += alias ? known_hosts_index(f).lines_for(name, port, true)
                       : known_hosts_lines(f, name, port);
    return alias ? renamed_known_hosts_lines(lines, known_hosts_name(hostname, h.port)) : lines;
  };
  if (!hand_known_hosts(c, lines_of(user), lines_of(global))) {
    ssh_options_set(c.session, SSH_OPTIONS_KNOWNHOSTS, c.known_hosts.c_str());
    ssh_options_set(c.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, c.global_known_hosts.c_str());
  }
}

// After the host key check: the session's options name the real files again (accept-new writes
// there) and the copies are closed.
void SshPool::Impl::close_known_hosts(Conn& c) {
  if (c.known_hosts_fds.empty()) return;
  if (c.session) {
    ssh_options_set(c.session, SSH_OPTIONS_KNOWNHOSTS, c.known_hosts.c_str());
    ssh_options_set(c.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, c.global_known_hosts.c_str());
  }
  for (int fd : c.known_hosts_fds) close(fd);
  c.known_hosts_fds.clear();
}

// accept-new with OpenSSH's settings: the server's key appended to the first UserKnownHostsFile
// under `name` (hashed when HashKnownHosts says so), as ssh records it.
bool SshPool::Impl::record_host_key(Conn& c, const std::string& name, bool hashed) {
  char* entry = nullptr;
  if (c.known_hosts.empty() || ssh_session_export_known_hosts_entry(c.session, &entry) != SSH_OK)
    return false;
  std::string line = entry;
  ssh_string_free_char(entry);
  size_t sp = line.find(' ');
  if (sp == std::string::npos) return false;
  line = (hashed ? hash_known_hosts_name(name) : name) + line.substr(sp);
  if (!line.ends_with('\n')) line += '\n';
  int fd = open(c.known_hosts.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  return close(fd) == 0 && ok;
}

bool SshPool::Impl::verify_host_key(size_t ci, ConnectFailure& error) {
  Conn& c = conns[ci];
  const SshEndpoint& ep = hosts[c.host];
  HostKeyPolicy policy = host_key_policy(c.host);
  // OpenSSH's settings (their HostName is the host's own, beside them), else none.
  const SshHostConfig* h = has_openssh(c.host) ? openssh[c.host].shared.get() : nullptr;
  // What ssh connects to, and the name it keeps the key under.
  std::string target = h ? openssh[c.host].hostname : ep.address;
  int port = h ? h->port : ep.port.value_or(22);
  std::string key_name =
      h && !h->host_key_alias.empty() ? h->host_key_alias : known_hosts_name(target, port);
  std::string known = c.known_hosts;
  if (known.empty() && h) known = "the global known_hosts files (UserKnownHostsFile none)";
  if (known.empty()) known = option_string(c.session, SSH_OPTIONS_KNOWNHOSTS);
  if (known.empty()) known = "~/.ssh/known_hosts";
  enum ssh_known_hosts_e verdict = ssh_session_is_known_server(c.session);
  if (verdict == SSH_KNOWN_HOSTS_OK) {
    // libssh answers OK for a host it has no line for when its StrictHostKeyChecking is off (an
    // ssh config it read itself, without an ssh client, says no): asked again with it on, it
    // says whether it found one. Without one the launcher's policy decides, the config's no
    // only where nothing else gives one.
    int strict = 1;
    ssh_options_set(c.session, SSH_OPTIONS_STRICTHOSTKEYCHECK, &strict);
    enum ssh_known_hosts_e found = ssh_session_is_known_server(c.session);
    if (found == SSH_KNOWN_HOSTS_UNKNOWN || found == SSH_KNOWN_HOSTS_NOT_FOUND) {
      verdict = found;
      if (!settings.host_key_policy && !has_openssh(c.host)) policy = HostKeyPolicy::kNo;
    }
  }
  close_known_hosts(c);
  // UserKnownHostsFile none: ssh then checks read-only, and a key it does not know fails before
  // StrictHostKeyChecking is looked at (sshconnect.c: readonly goes to fail), `no` included.
  auto unknown_without_a_file = [&] {
    error = {ConnectError::kHostKeyUnknown,
             fmt::format("unknown host key (not in {}); with UserKnownHostsFile none ssh refuses "
                         "a host it does not know, whatever StrictHostKeyChecking says",
                         known)};
    return false;
  };
  const bool no_user_file = h && c.known_hosts.empty();
  // Refused whatever the policy, as a changed key is (ssh lets StrictHostKeyChecking no through
  // an @revoked line, never RevokedHostKeys).
  if (std::string why = revoked_because(c, h, key_name); !why.empty()) {
    error = {ConnectError::kHostKeyChanged, why};
    return false;
  }
  switch (verdict) {
    case SSH_KNOWN_HOSTS_OK:
      return true;  // a line for the host holds its key (asked with StrictHostKeyChecking on)
    case SSH_KNOWN_HOSTS_CHANGED:
      error = {ConnectError::kHostKeyChanged,
               fmt::format("host key CHANGED (does not match {}): possible man-in-the-middle, "
                           "refused; if the host was reinstalled, remove its old key with: "
                           "ssh-keygen -R '{}' -f {}",
                           known, key_name, known)};
      return false;
    case SSH_KNOWN_HOSTS_OTHER:
      error = {ConnectError::kHostKeyChanged,
               fmt::format("host key of another type than the one in {}: refused", known)};
      return false;
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      if (policy == HostKeyPolicy::kAcceptNew) {
        if (h ? !record_host_key(c, key_name, h->hash_known_hosts)
              : ssh_session_update_known_hosts(c.session) != SSH_OK)
          return error = {ConnectError::kHostKeyUnverifiable,
                          fmt::format("cannot add its host key to {}", known)},
                 false;
        warnings.push_back({c.host, ConnectWarningKind::kHostKeyAdded,
                            fmt::format("new host key added to {}", known)});
        return true;
      }
      if (policy == HostKeyPolicy::kNo && no_user_file) return unknown_without_a_file();
      if (policy == HostKeyPolicy::kNo) {
        warnings.push_back({c.host, ConnectWarningKind::kHostKeyNotVerified,
                            fmt::format("host key NOT verified (not in {}) because {}", known,
                                        settings.host_key_policy
                                            ? "of --strict_host_key_checking=no"
                                            : "the ssh config says StrictHostKeyChecking no")});
        return true;
      }
      if (c.proxied && h) {
        // ssh-keyscan from here would not pass the jump host; ssh itself does, shows the key's
        // fingerprint, asks, and records it where and as it keeps keys (the host file's values
        // as its options: the same file and name the launcher looks up).
        std::string via = proxy_named(*h);
        std::string alias =
            h->host_key_alias.empty() ? "" : fmt::format(" under HostKeyAlias {}", key_name);
        error = {ConnectError::kHostKeyUnknown,
                 c.known_hosts.empty()
                     ? fmt::format("unknown host key (not in {}{}); it is reached through {}, and "
                                   "there is no known_hosts file to record it in",
                                   known, alias, via)
                     : fmt::format(
                           "unknown host key (not in {}{}); it is reached through {}: ssh "
                           "shows its fingerprint and records it when you answer yes: {}",
                           known, alias, via,
                           ssh_command_line(
                               query_of(c.host), settings.ssh_config,
                               {"-o", "BatchMode=no", "-o", "StrictHostKeyChecking=ask"}, "true"))};
        return false;
      }
      error = {ConnectError::kHostKeyUnknown,
               h && !h->host_key_alias.empty()
                   ? fmt::format("unknown host key (not in {} under HostKeyAlias {}); after "
                                 "checking it, add it with: ssh-keyscan -p {} {} | sed 's/^[^ "
                                 "]*/{}/' >> {}",
                                 known, key_name, port, target, key_name, known)
                   : fmt::format("unknown host key (not in {}); after checking it, add it with: "
                                 "ssh-keyscan -p {} {} >> {}",
                                 known, port, target, known)};
      return false;
    default:
      error = {ConnectError::kHostKeyUnverifiable,
               fmt::format("cannot check the host key: {}", describe_error(c.session))};
      return false;
  }
}

}  // namespace msrun_ssh
