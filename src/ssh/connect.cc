// Phase one of the SSH pool: connect every host with at most `fanout` handshakes in flight, verify
// its host key against known_hosts (narrowed to the host's lines), authenticate.
#include <fcntl.h>
#include <fmt/format.h>
#include <libssh/callbacks.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <initializer_list>
#include <tuple>

#include "config_walk.h"
#include "msrun_ssh/base.h"
#include "pool.h"

namespace msrun_ssh {
namespace {

// A launcher holds several descriptors per host: lift the soft limit to the hard one.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// The user's home as libssh and OpenSSH find it: from the password database, not $HOME.
std::string user_home_dir() {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(static_cast<size_t>(size > 0 ? size : 16384));
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) != 0 || !found || !pw.pw_dir)
    return "";
  return pw.pw_dir;
}

// The passphrase of an encrypted identity file: none, so the file is passed over as ssh passes it
// over in batch mode. Without this callback libssh leaves an encrypted PEM key to OpenSSL, whose
// own prompt reads /dev/tty and would stop the launcher at the user's terminal.
int no_passphrase(const char*, char*, size_t, int, int, void*) { return -1; }

// A session's callbacks: only its passphrase question, answered with none. Without them libssh's
// default identities (ssh_userauth_publickey_auto, no ssh client on this machine) leave an
// encrypted PEM key to OpenSSL, which asks on the terminal: the launcher waited there, past the
// connect timeout, every host with it.
ssh_callbacks session_callbacks() {
  static ssh_callbacks_struct callbacks = [] {
    ssh_callbacks_struct c{};
    c.auth_function = no_passphrase;
    ssh_callbacks_init(&c);
    return c;
  }();
  return &callbacks;
}

// `path`'s private key, without asking for a passphrase; nullptr when it cannot be loaded.
ssh_key load_private_key(const std::string& path) {
  ssh_key key = nullptr;
  if (ssh_pki_import_privkey_file(path.c_str(), nullptr, no_passphrase, nullptr, &key) != SSH_OK)
    return nullptr;
  return key;
}

// The public key blob of `key` (a certificate's own blob for a certificate); nullopt without one.
std::optional<std::string> key_blob(ssh_key key) {
  std::optional<std::string> out;
  char* b64 = nullptr;
  if (key && ssh_pki_export_pubkey_base64(key, &b64) == SSH_OK && b64) out = decode_base64(b64);
  ssh_string_free_char(b64);
  return out;
}

// A failure libssh describes: its words, and their kind.
ConnectFailure libssh_failure(ssh_session s) {
  std::string why = name_damage(describe_error(s));
  return {classify_libssh_error(why), why};
}

// A login the server ended while keys were being offered (the host key was verified: the host
// is reached, the keys were not taken): libssh's words for it, and for sshd's MaxAuthTries ssh
// users' remedy.
ConnectFailure ended_login(ssh_session s) {
  ConnectFailure failure = libssh_failure(s);
  failure.kind = ConnectError::kAuthDenied;
  if (failure.reason.find("Too many authentication failures") != std::string::npos)
    failure.reason +=
        " (sshd's MaxAuthTries ended the login before a key it takes was offered: list that key "
        "with IdentityFile and IdentitiesOnly yes in the ssh config)";
  return failure;
}

// The file of offer `k` of the listed files: ssh offers each file twice, its key (k even), then
// its certificate (k odd): FILE-cert, else FILE-cert.pub, which ssh-add loads with the key.
std::string offer_file(const std::vector<std::string>& files, size_t k) {
  return k % 2 == 1 ? files[k / 2] + "-cert" : files[k / 2];
}

}  // namespace

ConnectError classify_libssh_error(std::string_view message) {
  auto has = [message](std::string_view part) { return message.find(part) != message.npos; };
  if (has("Connection refused")) return ConnectError::kRefused;
  if (has("Failed to resolve hostname") || has("No route to host") || has("Network is unreachable"))
    return ConnectError::kUnreachable;
  if (has("timed out")) return ConnectError::kTimedOut;
  if (has("host key")) return ConnectError::kHostKeyUnverifiable;
  return ConnectError::kOther;
}

std::string name_damage(std::string message) {
  // libssh's words (packet.c, packet_crypt.c) for a packet it could not take as sent.
  static constexpr std::string_view kDamaged[] = {
      "HMAC error",      "Decryption error",         "Packet len too high",
      "Invalid padding", "Packet too short to read", "must be used on multiple of blocksize"};
  for (std::string_view words : kDamaged) {
    if (message.find(words) != message.npos)
      return message +
             " (a packet arrived damaged: a faulty link, NIC or middlebox on the way changed its"
             " bytes)";
  }
  return message;
}

SshPool::Impl::Impl(std::vector<SshEndpoint> h, SshSettings s)
    : hosts(std::move(h)), settings(std::move(s)) {
  raise_fd_limit();
  home_dir = user_home_dir();
  if (!home_dir.empty()) ssh_dir = home_dir + "/.ssh";
  // The narrowed known_hosts copies are opened by libssh as /proc/self/fd/N.
  narrowing = access("/proc/self/fd", X_OK) == 0;
  epfd = epoll_create1(EPOLL_CLOEXEC);
  tokens.home = home_dir;
  if (const passwd* pw = getpwuid(getuid())) tokens.local_user = pw->pw_name;
  tokens.uid = std::to_string(getuid());
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) tokens.local_host = name;
}

SshPool::Impl::~Impl() {
  close_all();
  if (epfd >= 0) close(epfd);
  for (int fd : proxy_reports)
    if (fd >= 0) close(fd);
  for (const Conn& c : conns) {
    if (c.proxy_fd >= 0) close(c.proxy_fd);
    if (c.proxy_log >= 0) close(c.proxy_log);
  }
}

ssh_key SshPool::Impl::identity(const std::string& path, ConnectFailure& error) {
  auto it = keys.find(path);
  if (it != keys.end()) return it->second.get();
  ssh_key key = load_private_key(path);
  if (!key) {
    error = {ConnectError::kIdentityUnreadable, fmt::format("cannot load identity file {}", path)};
    return nullptr;
  }
  return keys.emplace(path, KeyPtr(key)).first->second.get();
}

namespace {

// `key_path`'s private key with the certificate `cert` (freed here) in it; nullptr when `cert` is
// null, a host's (ssh offers a user's only), not a certificate of that key (libssh copies any
// certificate into any key: ssh refuses one that is not of the key, a key renewed with its old
// certificate left beside it, and never offers it), or the key cannot be loaded without a
// passphrase.
ssh_key certify(const std::string& key_path, ssh_key cert) {
  ssh_key key = cert ? load_private_key(key_path) : nullptr;
  ssh_key pub = nullptr;
  if (key && ssh_pki_export_privkey_to_pubkey(key, &pub) != SSH_OK) pub = nullptr;
  std::optional<std::string> cert_blob = key_blob(cert), plain_blob = key_blob(pub);
  if (pub) ssh_key_free(pub);
  bool ok = cert_blob && plain_blob && certificate_is_of(*cert_blob, *plain_blob) &&
            user_certificate(*cert_blob) && ssh_pki_copy_cert_to_privkey(cert, key) == SSH_OK;
  if (cert) ssh_key_free(cert);
  if (!ok && key) {
    ssh_key_free(key);
    key = nullptr;
  }
  return key;
}

// The certificate in the first of `files` that holds one, or nullptr.
ssh_key first_certificate(std::initializer_list<std::string> files) {
  for (const std::string& file : files) {
    ssh_key cert = nullptr;
    if (access(file.c_str(), R_OK) == 0 && ssh_pki_import_cert_file(file.c_str(), &cert) == SSH_OK)
      return cert;
  }
  return nullptr;
}

}  // namespace

// `path`'s private key with the certificate beside it (PATH-cert, else PATH-cert.pub) in it, as
// ssh offers it after the plain key; nullptr when there is no such certificate, it is not one of
// that key, or the key cannot be loaded without a passphrase. Loaded once per file.
ssh_key SshPool::Impl::certified_identity(const std::string& path) {
  auto it = certified_keys.find(path);
  if (it != certified_keys.end()) return it->second.get();
  ssh_key key = certify(path, first_certificate({path + "-cert", path + "-cert.pub"}));
  return certified_keys.emplace(path, KeyPtr(key)).first->second.get();
}

// `key_path`'s private key with the certificate of CertificateFile `cert_path` (or, as ssh reads
// it, of `cert_path`.pub) in it, or nullptr as certify says. Loaded once per pair.
ssh_key SshPool::Impl::certified_by_file(const std::string& key_path,
                                         const std::string& cert_path) {
  std::string both = key_path + '\0' + cert_path;  // no path holds a NUL: apart from the above's
  auto it = certified_keys.find(both);
  if (it != certified_keys.end()) return it->second.get();
  ssh_key key = certify(key_path, first_certificate({cert_path, cert_path + ".pub"}));
  return certified_keys.emplace(both, KeyPtr(key)).first->second.get();
}

// The identity file of `files` whose private key signs with CertificateFile `cert_path`, as ssh
// picks it (sign_and_send_pubkey): the first whose public key the certificate certifies, else, of
// those whose public key could not be read, one the certificate's name is that of, or of its .pub
// or -cert.pub; "" when none. The agent's copy of the key comes before any file in ssh's order:
// where a file's key signs, it is the same signature.
std::string SshPool::Impl::certificate_signer(const std::string& cert_path,
                                              const std::vector<std::string>& files) {
  std::optional<std::string> cert = public_blob(cert_path);
  if (!cert) return "";  // a host's certificate finds its signer, and certify refuses it
  for (const std::string& file : files)
    if (std::optional<std::string> blob = public_blob(file);
        blob && certificate_is_of(*cert, *blob))
      return file;
  for (const std::string& file : files)
    if (!public_blob(file) &&
        (cert_path == file || cert_path == file + ".pub" || cert_path == file + "-cert.pub"))
      return file;
  return "";
}

// CertificateFile `cert_path` in the private key of its signer among `files` (told to `signer`
// when given), when that key loads without a passphrase; else nullptr (the agent's copy of the key
// may sign it).
ssh_key SshPool::Impl::file_certified(const std::string& cert_path,
                                      const std::vector<std::string>& files,
                                      std::string* signer_out) {
  std::string signer = certificate_signer(cert_path, files);
  if (signer_out) *signer_out = signer;
  if (signer.empty() || access(signer.c_str(), R_OK) != 0) return nullptr;
  return certified_by_file(signer, cert_path);
}

bool SshPool::Impl::start_connect(size_t ci, ConnectFailure& error) {
  Conn& c = conns[ci];
  const SshEndpoint& ep = hosts[c.host];
  c.session = ssh_new();
  if (!c.session) return error = {ConnectError::kOther, "out of memory"}, false;
  ssh_set_callbacks(c.session, session_callbacks());
  // libssh would look the user's home directory up in the password database for every session.
  if (!ssh_dir.empty()) ssh_options_set(c.session, SSH_OPTIONS_SSH_DIR, ssh_dir.c_str());
  if (c.host < openssh.size()) {
    if (!openssh[c.host].shared) return error = *resolve_failures[c.host], false;
    apply_openssh(c, openssh_of(c.host));
  } else if (!apply_libssh_config(c, ep, error)) {
    return false;
  }
  narrow_known_hosts(c);
  ssh_set_blocking(c.session, 0);
  c.deadline = monotonic_ms() + connect_timeout_s(c.host) * 1000;
  c.state = ConnState::kConnecting;
  return advance(ci, error);
}

// Without an ssh client: libssh reads the ssh config itself, then the host file's values win.
bool SshPool::Impl::apply_libssh_config(Conn& c, const SshEndpoint& ep, ConnectFailure& error) {
  ssh_options_set(c.session, SSH_OPTIONS_HOST, ep.address.c_str());
  std::string config = settings.ssh_config;
  if (config.empty()) {
    // The user's home as ssh finds it (the password database, not $HOME), as the file that
    // refuse_what_libssh_misreads checked: with HOME elsewhere libssh read another config.
    std::string def = config_home() + "/.ssh/config";
    if (access(def.c_str(), R_OK) == 0) config = def;
  }
  if (!config.empty() && ssh_options_parse_config(c.session, config.c_str()) != SSH_OK)
    return error = {ConnectError::kOther, fmt::format("cannot parse ssh config {}", config)}, false;
  apply_ssh_log_verbosity(c.session);  // a LogLevel in the config does not decide it
  bool no = false;
  ssh_options_set(c.session, SSH_OPTIONS_PROCESS_CONFIG, &no);
  if (!ep.user.empty()) ssh_options_set(c.session, SSH_OPTIONS_USER, ep.user.c_str());
  if (ep.port) {
    unsigned int port = static_cast<unsigned int>(*ep.port);
    ssh_options_set(c.session, SSH_OPTIONS_PORT, &port);
  }
  if (!ep.known_hosts.empty())
    ssh_options_set(c.session, SSH_OPTIONS_KNOWNHOSTS, ep.known_hosts.c_str());
  return true;
}

namespace {

// A file for a ProxyJump's ssh to write its messages to (libssh sends the proxy's stderr to
// /dev/null): a memfd of the launcher's, which the ssh opens by its /proc path (ssh closes the
// descriptors it inherits before it opens its log file). -1, and no path, when this /proc cannot
// reopen it (ssh would not start without its log file). A launcher that is not dumpable (a
// setuid or unreadable binary) has a /proc/PID/fd only it can enter, itself: ssh could not.
int proxy_log_file(std::string& path) {
  if (::prctl(PR_GET_DUMPABLE) != 1) return -1;
  int fd = ::memfd_create("msrun-ssh-proxy-log", MFD_CLOEXEC);
  if (fd < 0) return -1;
  path = fmt::format("/proc/{}/fd/{}", ::getpid(), fd);
  int again = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (again < 0) {
    ::close(fd);
    path.clear();
    return -1;
  }
  ::close(again);
  return fd;
}

// Once its host is through, what the proxy wrote is never read (its words matter only for a
// failure before the server's banner): emptied, and closed (the proxy holds the file itself,
// until it ends). Not sealed against growing: a proxy whose write to its stderr failed might
// end, and its host with it.
void forget_proxy_log(int& fd) {
  if (fd < 0) return;
  (void)!::ftruncate(fd, 0);
  ::close(fd);
  fd = -1;
}

// Whether libssh runs a ProxyCommand under a POSIX shell (`$SHELL -c 'exec COMMAND'`, /bin/bash or
// /bin/sh without $SHELL), where a redirection before the command is the shell's and not the
// command's (`exec 2>>FILE COMMAND`). Under csh, fish and the like the proxy's stderr stays
// libssh's /dev/null.
bool posix_proxy_shell() {
  const char* shell = std::getenv("SHELL");
  if (!shell || !*shell) return true;  // libssh takes /bin/bash, or /bin/sh
  std::string_view name = shell;
  if (size_t slash = name.rfind('/'); slash != std::string_view::npos)
    name.remove_prefix(slash + 1);
  for (std::string_view posix :
       {"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "ash", "yash", "posh"})
    if (name == posix) return true;
  return false;
}

}  // namespace

// The last lines a ProxyJump's ssh, or a ProxyCommand, wrote (its own words for what failed on the
// way), at most three, on one line; "" when it wrote none.
std::string SshPool::Impl::proxy_said(const Conn& c) const {
  if (c.proxy_log < 0) return "";
  constexpr off_t kTail = 4096;
  struct stat st {};
  if (::fstat(c.proxy_log, &st) != 0 || st.st_size == 0) return "";
  off_t from = std::max<off_t>(0, st.st_size - kTail);
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  ssize_t n = ::pread(c.proxy_log, text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::vector<std::string> lines;
  for (std::string_view line : split_lines(text))
    if (line = trim(line, " \t\r"); !line.empty()) lines.push_back(name_damage(std::string(line)));
  std::string out;
  for (size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i)
    out += (out.empty() ? "" : " / ") + lines[i];
  return out;
}

// With OpenSSH's answer: the session gets exactly its values, and reads no config of its own.
void SshPool::Impl::apply_openssh(Conn& c, const SshHostConfig& h) {
  ssh_options_set(c.session, SSH_OPTIONS_HOST, h.hostname.c_str());
  bool no = false;
  ssh_options_set(c.session, SSH_OPTIONS_PROCESS_CONFIG, &no);
  apply_ssh_log_verbosity(c.session);
  unsigned int port = static_cast<unsigned int>(h.port);
  ssh_options_set(c.session, SSH_OPTIONS_PORT, &port);
  if (!h.user.empty()) ssh_options_set(c.session, SSH_OPTIONS_USER, h.user.c_str());
  // Checked when it was resolved: the jump's command can be made, the command's tokens are ssh's.
  std::string log_path;
  // One hop only: the hops before the last are an ssh of that ssh's own, whose stderr is
  // libssh's /dev/null, and the last one's words for their failure would name the wrong host.
  // A ProxyCommand's stderr goes to the same kind of file, by its shell's redirection.
  bool command = h.proxy_jump.empty() && !h.proxy_command.empty() && posix_proxy_shell();
  if ((command || (!h.proxy_jump.empty() && h.proxy_jump.find(',') == std::string::npos)) &&
      c.proxy_log < 0)
    c.proxy_log = proxy_log_file(log_path);
  std::string proxy = h.proxy_jump.empty()
                          ? proxy_command_for_libssh(h.proxy_command, h.hostname, h.port, h.user,
                                                     hosts[c.host].address, h.host_key_alias)
                          : proxy_jump_command(h.proxy_jump, settings.ssh_config, log_path);
  // libssh runs it as ssh does, `exec COMMAND` under $SHELL -c (no shell waits between the
  // proxy and its signals; a COMMAND that begins with `exec ` as it is, from libssh 0.10.5); the
  // proxy is a process group of its own (proxies.cc). The redirection goes after that `exec`.
  if (command && !log_path.empty() && !proxy.empty()) {
    std::string redirect = "2>>" + shell_quote(log_path) + " ";
    proxy = proxy.starts_with("exec ") ? "exec " + redirect + proxy.substr(5) : redirect + proxy;
  }
  if (!proxy.empty()) {
    ssh_options_set(c.session, SSH_OPTIONS_PROXYCOMMAND, proxy.c_str());
    c.proxied = true;
  }
  // As ssh -G gives it (its tokens, ${NAME} and "~" expanded); the older $NAME form read here.
  if (auto socket = identity_agent_socket(h.identity_agent); socket && !socket->empty())
    ssh_options_set(c.session, SSH_OPTIONS_IDENTITY_AGENT, socket->c_str());
}

void SshPool::Impl::resolve_hosts() {
  if (!settings.openssh_config) return;
  std::vector<SshQuery> queries;
  for (size_t h = 0; h < hosts.size(); ++h) queries.push_back(query_of(h));
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  auto answers = resolve_with_openssh(queries, settings.ssh_config,
                                      static_cast<int>(std::clamp(cpus * 2, 2L, 32L)), 10);
  if (!answers) return;  // no ssh client: libssh reads the config
  openssh.assign(hosts.size(), {});
  resolve_failures.assign(hosts.size(), std::nullopt);
  HostConfigSharer sharer;
  for (size_t h = 0; h < hosts.size(); ++h) {
    SshResolution& r = (*answers)[h];
    std::string why = r.error;
    if (r.config && why.empty()) {
      try {
        if (!r.config->proxy_jump.empty())
          proxy_jump_command(r.config->proxy_jump, settings.ssh_config);
        else
          proxy_command_for_libssh(r.config->proxy_command, r.config->hostname, r.config->port,
                                   r.config->user, hosts[h].address, r.config->host_key_alias);
      } catch (const std::runtime_error& e) {
        why = e.what();
      }
    }
    if (why.empty())
      openssh[h] = sharer.share(std::move(*r.config));
    else
      resolve_failures[h] = ConnectFailure{ConnectError::kOther, "ssh config: " + why};
  }
}

HostKeyPolicy SshPool::Impl::host_key_policy(size_t host) const {
  if (settings.host_key_policy) return *settings.host_key_policy;
  if (has_openssh(host)) return openssh[host].shared->strict_host_key_checking;
  return HostKeyPolicy::kYes;
}

double SshPool::Impl::connect_timeout_s(size_t host) const {
  if (!settings.connect_timeout_given && has_openssh(host) &&
      openssh[host].shared->connect_timeout_s && *openssh[host].shared->connect_timeout_s > 0)
    return *openssh[host].shared->connect_timeout_s;
  return settings.connect_timeout_s;
}

// The public key blob of identity file `path` as ssh finds it to match the agent's keys: the file
// itself when it is a public key, else `path`.pub, else the public half an OpenSSH private key
// file carries unencrypted. nullopt when none of them gives one.
std::optional<std::string> SshPool::Impl::public_blob(const std::string& path) {
  auto it = public_blobs.find(path);
  if (it != public_blobs.end()) return it->second;
  auto blob_of = [](const std::string& file, bool private_key) -> std::optional<std::string> {
    std::string head(36, '\0');
    FILE* f = std::fopen(file.c_str(), "rb");
    if (!f) return std::nullopt;
    head.resize(std::fread(head.data(), 1, head.size(), f));
    std::fclose(f);
    if ((head.rfind("-----BEGIN OPENSSH PRIVATE KEY-----", 0) == 0) != private_key)
      return std::nullopt;
    ssh_key key = nullptr;
    if (ssh_pki_import_pubkey_file(file.c_str(), &key) != SSH_OK) return std::nullopt;
    std::optional<std::string> out = key_blob(key);
    ssh_key_free(key);
    return out;
  };
  std::optional<std::string> blob = blob_of(path, false);
  if (!blob) blob = blob_of(path + ".pub", false);
  if (!blob) blob = blob_of(path, true);
  return public_blobs.emplace(path, std::move(blob)).first->second;
}

// The public key blobs of the listed files (`files`) as ssh lists them: each offer's key; with
// `beside` the certificate beside each file (FILE-cert) too, which ssh reads only when the config
// gives no CertificateFile.
std::vector<std::string> SshPool::Impl::listed_blobs(const std::vector<std::string>& files,
                                                     bool beside) {
  std::vector<std::string> listed;
  for (size_t k = 0; k < 2 * files.size(); k += beside ? 1 : 2)
    if (auto blob = public_blob(offer_file(files, k));
        blob && (k % 2 == 0 || user_certificate(*blob)))
      listed.push_back(std::move(*blob));
  return listed;
}

// The session asks the agent through the filter, which puts the keys of the listed files first
// and, under IdentitiesOnly, offers no other (AgentFilter). False when the agent is to be asked
// as it is (no listed file has a public key to look for, and others may be offered), and under
// IdentitiesOnly when there is nothing to offer: no listed key, or no agent to reach.
bool SshPool::Impl::filter_agent(Conn& c, const std::string& socket, bool identities_only,
                                 const std::vector<std::string>& files,
                                 const std::vector<std::string>& certificates) {
  AgentView view{listed_blobs(files, certificates.empty()), !identities_only, {}};
  // The CertificateFiles no file's key signs: the agent's copy of the key may.
  for (const std::string& cert : certificates)
    if (!file_certified(cert, files))
      if (std::optional<std::string> blob = public_blob(cert); blob && user_certificate(*blob))
        view.certificates.push_back(*blob);
  const char* env = socket.empty() ? std::getenv("SSH_AUTH_SOCK") : nullptr;
  std::string path = socket.empty() ? (env ? env : "") : socket;
  // Under IdentitiesOnly with no listed key the agent shows nothing, a certificate's key neither.
  if ((view.listed.empty() && (identities_only || view.certificates.empty())) || path.empty())
    return false;
  if (!agent_filter) agent_filter = std::make_unique<AgentFilter>();
  auto held = std::make_shared<AgentHeld>();
  int fd = agent_filter->open(path, std::move(view), held);
  if (fd < 0) return false;
  if (ssh_set_agent_socket(c.session, fd) != SSH_OK) return close(fd), false;
  c.agent_fd = fd;
  c.agent_held = std::move(held);
  return true;
}

// Once authenticated, a session never asks the agent again: the filter's socket is closed (libssh
// would hold it, and the filter its agent connection, for the session's life).
void SshPool::Impl::release_agent(Conn& c) {
  c.agent_held.reset();
  if (c.agent_fd < 0) return;
  ssh_set_agent_socket(c.session, SSH_INVALID_SOCKET);  // libssh closes it no more
  close(c.agent_fd);
  c.agent_fd = -1;
}

// Whether offer `k` of `files` (offer_file) is the first of them whose key the agent held for
// connection `c`.
bool SshPool::Impl::held_by_agent(const Conn& c, const std::vector<std::string>& files, size_t k) {
  std::optional<std::string> blob = public_blob(offer_file(files, k));
  if (!blob || !c.agent_held->holds(*blob)) return false;
  for (size_t i = k % 2; i < k; i += 2)
    if (public_blob(offer_file(files, i)) == blob) return false;
  return true;
}

// Public-key authentication as ssh does it with these settings (pubkey_prepare): each
// CertificateFile's certificate first, signed by its key's file (certificate_signer); then the
// agent's keys (none with IdentityAgent none): the certificates no file signed, with the agent's
// copy of their key, those of the listed files before the others and under IdentitiesOnly only
// those (the filter); then each IdentityFile in order but the first file of each key (or
// certificate) the agent held and so offered already; a file that does not exist or cannot be
// loaded without a passphrase is passed over. ssh offers every CertificateFile before the agent's
// keys: here one its file's key signs comes before one the agent signs. `rc`: SSH_AUTH_SUCCESS or
// SSH_AUTH_AGAIN; false with `error` when none was accepted or libssh failed.
bool SshPool::Impl::authenticate_openssh(size_t ci, int& rc, ConnectFailure& error) {
  Conn& c = conns[ci];
  const SshHostConfig& h = *openssh[c.host].shared;  // its hostname is empty: t has the host's
  std::optional<std::string> socket = identity_agent_socket(h.identity_agent);
  SshTokens t = openssh_tokens(c.host);
  std::vector<std::string> files, certs;
  for (auto [from, to, keyword] : {std::tuple(&h.identity_files, &files, "IdentityFile"),
                                   std::tuple(&h.certificate_files, &certs, "CertificateFile")}) {
    for (const auto& file : *from) {
      try {
        to->push_back(expand_ssh_tokens(file, t));
      } catch (const std::runtime_error& e) {
        return error = {ConnectError::kOther, fmt::format("ssh config: {} {}", keyword, e.what())},
               false;
      }
    }
  }
  size_t agent_at = certs.size(), files_from = agent_at + (socket ? 1 : 0);
  // Each file is offered twice, as ssh lists it: its key, then its key with the certificate
  // beside it (FILE-cert), when there is one and the config gives no CertificateFile.
  while (c.auth_step < files_from + 2 * files.size()) {
    if (c.auth_step < agent_at) {
      const std::string& cert = certs[c.auth_step];
      std::string signer;
      ssh_key key = file_certified(cert, files, &signer);
      if (!key) {  // the agent's to sign, or nobody's
        ++c.auth_step;
        continue;
      }
      std::string name = fmt::format("{} with the key of {}", cert, signer);
      if (std::find(c.offered.begin(), c.offered.end(), name) == c.offered.end())
        c.offered.push_back(name);
      rc = ssh_userauth_publickey(c.session, nullptr, key);
    } else if (c.auth_step < files_from) {
      if (!c.agent_settled) {
        c.agent_settled = true;
        if (!filter_agent(c, *socket, h.identities_only, files, certs) && h.identities_only) {
          ++c.auth_step;
          continue;
        }
      }
      rc = ssh_userauth_agent(c.session, nullptr);
    } else {
      size_t k = c.auth_step - files_from;
      const std::string& path = files[k / 2];
      bool with_certificate = k % 2 == 1;
      if (with_certificate && !certs.empty()) {
        ++c.auth_step;
        continue;
      }
      // A key the agent held was offered through it, and is not offered again from the first
      // file that holds it (ssh's pubkey_prepare: each of the agent's keys claims one file).
      if (c.agent_held && held_by_agent(c, files, k)) {
        ++c.auth_step;
        continue;
      }
      ssh_key key = nullptr;
      if (access(path.c_str(), R_OK) == 0) {
        ConnectFailure unreadable;
        key = with_certificate ? certified_identity(path) : identity(path, unreadable);
      }
      if (!key) {
        ++c.auth_step;
        continue;
      }
      std::string name = with_certificate ? path + " with its certificate" : path;
      if (std::find(c.offered.begin(), c.offered.end(), name) == c.offered.end())
        c.offered.push_back(name);
      rc = ssh_userauth_publickey(c.session, nullptr, key);
    }
    if (rc == SSH_AUTH_AGAIN || rc == SSH_AUTH_SUCCESS) return true;
    if (rc == SSH_AUTH_ERROR) return error = libssh_failure(c.session), false;
    ++c.auth_step;  // denied (or partial): the next one
  }
  // What was offered: the agent's keys (under IdentitiesOnly its copies of the listed ones, when
  // it was asked), then the files that could be loaded.
  auto join = [](const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
    return out;
  };
  std::string offered = join(c.offered);
  if (socket && h.identities_only && c.agent_fd != -1) {
    std::vector<std::string> named;
    for (const auto& path : files)
      if (public_blob(path)) named.push_back(path);
    offered = fmt::format("the agent's copies of the keys of {}{}{}", join(named),
                          offered.empty() ? "" : ", then ", offered);
  } else if (socket && !h.identities_only && !offered.empty()) {
    offered = "the agent's keys, " + offered;
  }
  error = {ConnectError::kAuthDenied,
           fmt::format("authentication denied (publickey) for user {}{}", h.user,
                       offered.empty() ? std::string(" (no identity file could be loaded)")
                                       : fmt::format(" (offered {})", offered))};
  return false;
}

// For a connection that failed before the server answered: libssh sends its proxy's stderr to
// /dev/null, so what went wrong at the jump host (unreachable, refused, its key unknown) is not
// in libssh's words: the last words the proxy wrote to its file (proxy_log_file), when it has one,
// and the command that shows more.
std::string SshPool::Impl::proxy_hint(size_t ci) const {
  const Conn& c = conns[ci];
  if (!c.proxied || !has_openssh(c.host)) return "";
  const SshHostConfig& h = *openssh[c.host].shared;
  std::string command = ssh_command_line(query_of(c.host), settings.ssh_config, {}, "true");
  const char* who = h.proxy_jump.empty() ? "which" : "whose ssh";
  if (std::string said = proxy_said(c); !said.empty())
    return fmt::format(" (through {}, {} said: {}; `{}` shows more)", proxy_named(h), who, said,
                       command);
  // A ProxyCommand's stderr is its shell's too; a ProxyJump's ssh that could not start wrote
  // nothing to its file, its shell's words went to /dev/null.
  if (c.proxy_log >= 0 && h.proxy_jump.empty())
    return fmt::format(" (through {}, which said nothing; `{}` shows more)", proxy_named(h),
                       command);
  return fmt::format(" (through {}; the proxy's own errors are not seen here: `{}` shows them)",
                     proxy_named(h), command);
}

// What the handshakes to `host` pass through on their way: the first hop of its ProxyJump, or its
// ProxyCommand as the config writes it (before its tokens are expanded); "" when reached directly.
std::string SshPool::Impl::jump_of(size_t host) const {
  if (!has_openssh(host)) return "";
  const SshHostConfig& h = *openssh[host].shared;
  if (!h.proxy_jump.empty()) return "ProxyJump " + h.proxy_jump.substr(0, h.proxy_jump.find(','));
  return h.proxy_command.empty() ? "" : "ProxyCommand " + h.proxy_command;
}

// Moves one connection as far as it can go without blocking. False: failed, `error` says why.
bool SshPool::Impl::advance(size_t ci, ConnectFailure& error) {
  Conn& c = conns[ci];
  const SshEndpoint& ep = hosts[c.host];
  if (c.state == ConnState::kConnecting) {
    int rc = connect_forking_a_proxy(ci);
    if (rc == SSH_AGAIN) return update_epoll(ci), true;
    if (rc != SSH_OK) {
      error = libssh_failure(c.session);
      if (!ssh_get_serverbanner(c.session)) error.reason += proxy_hint(ci);
      return false;
    }
    if (!verify_host_key(ci, error)) return false;
    c.state = ConnState::kAuth;
  }
  if (c.state == ConnState::kAuth) {
    int rc;
    if (has_openssh(c.host)) {
      if (!authenticate_openssh(ci, rc, error)) return false;
    } else if (!ep.identity_file.empty()) {
      ssh_key key = identity(ep.identity_file, error);
      if (!key) return false;
      rc = ssh_userauth_publickey(c.session, nullptr, key);
    } else {
      rc = ssh_userauth_publickey_auto(c.session, nullptr, nullptr);
    }
    if (rc == SSH_AUTH_AGAIN) {
      // libssh 0.10 says "again" of a login the server has ended (its disconnect read, the
      // socket closed: sshd's MaxAuthTries reached): nothing more comes, and the wait would end
      // only at the connect timeout, saying nothing of why.
      if (!ssh_is_connected(c.session) || ssh_get_fd(c.session) == SSH_INVALID_SOCKET)
        return error = ended_login(c.session), false;
      return update_epoll(ci), true;
    }
    if (rc == SSH_AUTH_DENIED || rc == SSH_AUTH_PARTIAL) {
      char* user = nullptr;
      ssh_options_get(c.session, SSH_OPTIONS_USER, &user);
      error = {ConnectError::kAuthDenied,
               fmt::format("authentication denied (publickey) for user {}", user ? user : "?")};
      ssh_string_free_char(user);
      return false;
    }
    if (rc != SSH_AUTH_SUCCESS) return error = libssh_failure(c.session), false;
    release_agent(c);
    // libssh puts the socket back into blocking mode once it is connected: a write larger than
    // the room in a full socket buffer (a host cut off while a stream goes to it) would then
    // stop the whole loop. Non-blocking, send() writes what fits and libssh keeps the rest.
    int fd = ssh_get_fd(c.session);
    if (int fl = fcntl(fd, F_GETFL); fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    c.event = ssh_event_new();
    ssh_event_add_session(c.event, c.session);
    c.state = ConnState::kReady;
    update_epoll(ci);
  }
  return true;
}

std::vector<std::optional<ConnectFailure>> SshPool::Impl::connect_all(
    const std::vector<int>& per_host) {
  resolve_hosts();
  for (size_t h = 0; h < hosts.size(); ++h)
    for (int k = 0; k < std::max(1, per_host.at(h)); ++k) conns.push_back(Conn{.host = h});
  std::vector<std::optional<ConnectFailure>> failed(hosts.size());
  size_t next = 0;
  int in_flight = 0;
  std::vector<int> pending(hosts.size(), 0);  // connections of each host not ready yet
  for (const Conn& c : conns) ++pending[c.host];
  auto report = [this](size_t host, bool ok) {
    if (settings.on_connect_progress) settings.on_connect_progress(host, ok);
  };
  // Handshakes through one jump host in flight at once, at most settings.jump_fanout: its sshd
  // drops the unauthenticated connections above its MaxStartups (10 by default), and each of
  // ours is one until the host behind it answers (its banner came back through the jump).
  struct JumpGate {
    int active = 0;              // in flight through it, not answered yet
    int answered = 0;            // connections whose host answered through it
    std::deque<size_t> waiting;  // held back while it was full, in the host file's order
  };
  std::vector<JumpGate> gates;
  std::vector<int> gate_of(conns.size(), -1);
  {
    std::vector<std::string> jumps;
    for (size_t ci = 0; ci < conns.size(); ++ci) {
      std::string jump = jump_of(conns[ci].host);
      if (jump.empty()) continue;
      auto it = std::find(jumps.begin(), jumps.end(), jump);
      gate_of[ci] = static_cast<int>(it - jumps.begin());
      if (it == jumps.end()) jumps.push_back(std::move(jump)), gates.emplace_back();
    }
  }
  std::vector<char> gated(conns.size(), 0);  // holds a place in its jump host's gate
  auto leave_gate = [&](size_t ci) {
    if (gated[ci]) gated[ci] = 0, --gates[gate_of[ci]].active;
  };
  auto answered = [&](size_t ci) {
    if (gated[ci]) ++gates[gate_of[ci]].answered, leave_gate(ci);
  };
  struct MaybeDropped {
    size_t host;
    int gate;
    int others;  // in flight through the same jump host then
  };
  std::vector<MaybeDropped> maybe_dropped;
  auto fail = [&](size_t ci, ConnectFailure why) {
    if (gated[ci]) {
      JumpGate& gate = gates[gate_of[ci]];
      size_t h = conns[ci].host;
      if (conns[ci].session && ssh_get_serverbanner(conns[ci].session))
        ++gate.answered;  // its host answered through the jump, then failed
      else if (gate.active > 1 && !failed[h])
        // Before the answer, while others of ours went through the same jump host: maybe
        // dropped there (said at the end, if the jump host let others through).
        maybe_dropped.push_back({h, gate_of[ci], gate.active - 1});
    }
    leave_gate(ci);
    drop_conn(ci, ConnState::kFailed);
    size_t h = conns[ci].host;
    if (!failed[h]) {
      failed[h] = std::move(why);
      report(h, false);
    }
    --in_flight;
  };
  auto ready = [&](size_t ci) {
    answered(ci);
    // Not watched until every host is done: what it sends now (sshd's host keys after the login)
    // waits for the event loop, and would otherwise wake this one each millisecond.
    Conn& c = conns[ci];
    if (c.fd >= 0 && c.mask != 0) epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr), c.mask = 0;
    forget_proxy_log(c.proxy_log);
    --in_flight;
    size_t h = conns[ci].host;
    if (--pending[h] == 0 && !failed[h]) report(h, true);
  };
  // Started and maybe not ended yet: what the timeout scan visits (at most --fanout of them once
  // the ended are swept out, not every host each turn).
  std::vector<size_t> flying;
  auto start = [&](size_t ci) {
    ++in_flight;
    flying.push_back(ci);
    if (gate_of[ci] >= 0) gated[ci] = 1, ++gates[gate_of[ci]].active;
    ConnectFailure error;
    if (!start_connect(ci, error))
      fail(ci, error);
    else if (conns[ci].state == ConnState::kReady)
      ready(ci);
  };
  auto room = [&] { return in_flight < std::max(1, settings.fanout); };
  auto gate_room = [&](int g) { return gates[g].active < std::max(1, settings.jump_fanout); };
  std::vector<epoll_event> evs(256);
  while (true) {
    for (size_t g = 0; g < gates.size(); ++g)  // those a full gate held back come first
      while (room() && !gates[g].waiting.empty() && gate_room(static_cast<int>(g))) {
        size_t ci = gates[g].waiting.front();
        gates[g].waiting.pop_front();
        start(ci);
      }
    while (next < conns.size() && room()) {
      size_t ci = next++;
      if (gate_of[ci] >= 0 && !gate_room(gate_of[ci]))
        gates[gate_of[ci]].waiting.push_back(ci);
      else
        start(ci);
    }
    bool waiting = std::any_of(gates.begin(), gates.end(),
                               [](const JumpGate& g) { return !g.waiting.empty(); });
    if (in_flight == 0 && next == conns.size() && !waiting) break;
    double now = monotonic_ms();
    double soonest = now + 1000;
    std::erase_if(flying, [&](size_t ci) {
      return conns[ci].state != ConnState::kConnecting && conns[ci].state != ConnState::kAuth;
    });
    for (size_t ci : flying) {
      Conn& c = conns[ci];
      if (c.deadline <= now) {
        bool answered = c.state == ConnState::kAuth;
        fail(ci, {answered ? ConnectError::kAuthTimedOut : ConnectError::kTimedOut,
                  fmt::format("timed out after {:g} s ({}){}", connect_timeout_s(c.host),
                              answered ? "during authentication" : "no answer",
                              answered || ssh_get_serverbanner(c.session) ? "" : proxy_hint(ci))});
      } else {
        soonest = std::min(soonest, c.deadline);
      }
    }
    if (in_flight == 0) continue;
    report(std::string::npos, false);
    int n = wait(evs, static_cast<int>(std::ceil(soonest - now)));
    for (int i = 0; i < n; ++i) {
      size_t ci = evs[i].data.u64;
      Conn& c = conns[ci];
      if (c.state != ConnState::kConnecting && c.state != ConnState::kAuth) continue;
      ConnectFailure error;
      if (!advance(ci, error))
        fail(ci, error);
      else if (c.state == ConnState::kReady)
        ready(ci);
      else if (gated[ci] && (c.state != ConnState::kConnecting || ssh_get_serverbanner(c.session)))
        answered(ci);
    }
  }
  for (const MaybeDropped& d : maybe_dropped) {
    if (gates[d.gate].answered == 0) continue;  // none got through: the jump host itself failed
    std::string note = fmt::format(
        "{} other handshake{} went through the same jump host then, which let others through: "
        "its sshd drops those above its MaxStartups, 10 by default, and --jump_fanout sets how "
        "many go at once",
        d.others, d.others == 1 ? "" : "s");
    std::string& reason = failed[d.host]->reason;
    if (reason.ends_with(')'))  // inside the proxy's hint
      reason.insert(reason.size() - 1, "; " + note);
    else
      reason += " (" + note + ")";
  }
  // A host is ready only when every connection it needs is: the others of a failed host close.
  std::vector<size_t> others;
  for (size_t ci = 0; ci < conns.size(); ++ci)
    if (failed[conns[ci].host] && conns[ci].session) others.push_back(ci);
  end_proxies(others, 0);  // a failed host's: no grace, and not one after another
  for (size_t ci : others) drop_conn(ci, ConnState::kClosed);
  for (size_t ci = 0; ci < conns.size(); ++ci)  // watched again, for the event loop
    if (conns[ci].state == ConnState::kReady) update_epoll(ci);
  agent_filter.reset();  // every session is authenticated or failed: none asks the agent again
  return failed;
}

SshPool::SshPool(std::vector<SshEndpoint> hosts, SshSettings settings)
    : impl_(std::make_unique<Impl>(std::move(hosts), std::move(settings))) {}

SshPool::~SshPool() = default;

std::vector<std::optional<ConnectFailure>> SshPool::connect_all(
    const std::vector<int>& connections) {
  return impl_->connect_all(connections);
}

const std::vector<ConnectWarning>& SshPool::warnings() const { return impl_->warnings; }

}  // namespace msrun_ssh
