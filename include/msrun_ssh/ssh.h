// The SSH pool: every connection of a job, on libssh, driven by one epoll loop in one thread.
//
// Phase one (connect_all) connects, verifies and authenticates every host with at most `fanout`
// handshakes in flight and a deadline per host kept by the pool itself (libssh ignores its own
// timeout in non-blocking mode). Identity keys are loaded once per file. Each session has its own
// ssh_event, so a dying socket is pinned to its host. Phase two is the Transport interface:
// channels opened on demand, spread over as many connections per host as MaxSessions requires.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/transport.h"

struct ssh_session_struct;

namespace msrun_ssh {

// How host keys not in known_hosts are treated (StrictHostKeyChecking yes / accept-new / no).
enum class HostKeyPolicy { kYes, kAcceptNew, kNo };

// How to reach one host; empty fields fall back to the ssh config, then to libssh's defaults.
struct SshEndpoint {
  std::string address;  // host file address: the ssh config's Host alias or a name / IP
  std::string user;
  std::optional<int> port;
  std::string identity_file;
  std::string known_hosts;
};

struct SshSettings {
  std::string ssh_config;  // "" : ~/.ssh/config when it exists
  int fanout = 64;
  // Of those, at most this many through one jump host (the first hop of a ProxyJump, or one
  // ProxyCommand), until the host behind it answers: its sshd's MaxStartups is 10 by default.
  int jump_fanout = 8;
  double connect_timeout_s = 10;
  bool connect_timeout_given = false;            // false: a ConnectTimeout of the ssh config wins
  std::optional<HostKeyPolicy> host_key_policy;  // unset: ssh config, else yes
  // Each host's settings from OpenSSH's own `ssh -G` (ssh_config.h) when an ssh client is
  // installed; false (or no client): libssh parses the ssh config itself.
  bool openssh_config = true;
  // Progress of connect_all (for the terminal's status row): called once per host when all its
  // connections are ready (true) or one failed (false), and at least once a second (host = npos).
  std::function<void(size_t host, bool ok)> on_connect_progress;
};

// What kept a host from being connected. Each kind belongs to one step of the connection: reaching
// the SSH server, verifying its host key, authenticating.
enum class ConnectError {
  // Reaching the SSH server.
  kUnreachable,  // the name does not resolve, or there is no route to the address
  kRefused,      // nothing listens on the port
  kTimedOut,     // no SSH answer within the connect timeout
  kOther,        // anything else: unreadable ssh config, protocol error, connection dropped, ...
  // Its host key.
  kHostKeyUnknown,       // not in known_hosts, and the policy does not accept it
  kHostKeyChanged,       // differs from the one in known_hosts (or is of another type)
  kHostKeyUnverifiable,  // cannot be checked or added, or no host key algorithm in common
  // Authentication.
  kIdentityUnreadable,  // the identity file cannot be loaded
  kAuthDenied,          // the server accepted none of the keys
  kAuthTimedOut,        // authentication did not finish within the connect timeout
};

struct ConnectFailure {
  ConnectError kind = ConnectError::kOther;
  std::string reason;  // for the user: "Connection refused", "timed out after 10 s (no answer)"
};

// Something the user should know about a host that did connect.
enum class ConnectWarningKind {
  kHostKeyNotVerified,  // not in known_hosts, accepted unverified (StrictHostKeyChecking no)
  kHostKeyAdded,        // not in known_hosts, added to it (accept-new)
};

struct ConnectWarning {
  size_t host = 0;
  ConnectWarningKind kind = ConnectWarningKind::kHostKeyNotVerified;
  std::string message;  // for the user, without the host: "new host key added to ~/.ssh/..."
};

// The kind of a connection failure libssh describes in `message` (ssh_get_error's words: an errno
// text such as "Connection refused", "Failed to resolve hostname ...", a key exchange error).
ConnectError classify_libssh_error(std::string_view message);

// libssh's words for a failed or ended connection (ssh_get_error), for the user: words that say
// a packet arrived damaged (its MAC or AEAD tag did not match, its length or padding cannot be)
// get what they mean, that something on the way changed its bytes past TCP's checksum; others
// are kept as they are.
std::string name_damage(std::string message);

// sshd's default MaxSessions: channels per connection before another connection is opened.
inline constexpr int kChannelsPerConnection = 10;

// libssh's own log messages (libssh writes them to stderr by default, at the level an ssh config's
// LogLevel sets): they never reach the terminal. Every message at or below `verbosity` (libssh's
// SSH_LOG_NOLOG 0 .. SSH_LOG_FUNCTIONS 4) goes to `sink`; with no sink, nowhere. Sessions get this
// verbosity after their ssh config was read (apply_ssh_log_verbosity), so a LogLevel there does not
// change it. One thread (libssh keeps the callback and level per thread).
using SshLogSink = std::function<void(std::string_view message)>;
void set_ssh_log(int verbosity, SshLogSink sink);
void apply_ssh_log_verbosity(ssh_session_struct* session);

// The verbosity that keeps every libssh message out (libssh's SSH_LOG_NOLOG).
inline constexpr int kSshLogOff = 0;

// The host an ssh config's `Host NAME` entry points to (its HostName), or `name` itself when the
// config (`ssh_config`, else ~/.ssh/config if it exists) has none or cannot be read: OpenSSH's
// answer (ssh -G, ssh_config.h), else libssh's reading where no ssh client is installed. Opens no
// connection.
std::string ssh_config_hostname(const std::string& name, const std::string& ssh_config);

// The user's ssh agent as ssh uses it: of the agent's keys, those of the identity files the
// config lists come first, then (unless `IdentitiesOnly yes`) the others, each part in the
// agent's order (ssh's pubkey_prepare). libssh 0.10 offers an agent's keys in the agent's order
// only, and all of them (its one call for a single key takes RSA and DSA keys only): with many
// keys in the agent, sshd's MaxAuthTries ends the login before the listed key's turn, and under
// IdentitiesOnly a passphrase-protected file loaded with ssh-add could not be used at all. So a
// session is given a socket of ours instead of the agent's (ssh_set_agent_socket): a thread
// passes each request on to the agent and each answer back, the list of keys put in ssh's order.
// Signing stays the agent's.
// Which of a session's listed keys its agent held when the session asked it for its keys
// (AgentFilter): ssh offers such a key once, through the agent, never again from its file
// (pubkey_prepare matches each file's key with the agent's). The filter's thread writes it, the
// session's reads it.
class AgentHeld {
 public:
  void set(std::vector<std::string> blobs);
  bool holds(std::string_view blob) const;

 private:
  mutable std::mutex m_;
  std::vector<std::string> blobs_;
};

// What a session's agent is to show it (AgentFilter, filter_agent_identities): the public key
// blobs of the listed identity files' offers (`listed`), whether the agent's other keys follow
// them (`others_too`: no IdentitiesOnly), and the certificates of the config's CertificateFiles
// the agent is to sign with the keys they certify (`certificates`, in the config's order).
struct AgentView {
  std::vector<std::string> listed;
  bool others_too = false;
  std::vector<std::string> certificates;
};

class AgentFilter {
 public:
  AgentFilter();
  ~AgentFilter();  // ends the thread and closes every socket it holds
  AgentFilter(const AgentFilter&) = delete;
  AgentFilter& operator=(const AgentFilter&) = delete;
  // A socket (close-on-exec) for libssh, which closes it: the agent listening at `agent_path`,
  // its keys ordered by filter_agent_identities(view), and those of `view.listed` it holds told
  // to `held` (when given) before the session sees them; a signing request for one of the
  // certificates shown goes to the agent as one for the key it certifies (ssh signs a
  // CertificateFile's certificate with the agent's copy of its key, the agent need not hold the
  // certificate). -1 with errno set when that agent cannot be reached.
  int open(const std::string& agent_path, AgentView view,
           std::shared_ptr<AgentHeld> held = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The body of an agent's answer to a request for its keys (SSH_AGENT_IDENTITIES_ANSWER, its type
// byte first) with its keys put in ssh's order (its pubkey_prepare): first each of
// `view.certificates` that certifies one of the keys shown after it (ssh's signer for it: the
// first such key), then those whose public key blobs are in `view.listed` (each blob once), then,
// when `view.others_too`, every other one; each part in the answer's order, each key with the
// agent's comment. `held` (when given) gets the blobs of `listed` the answer holds, each once;
// `signers` (when given) each certificate shown and the blob of the key it certifies. nullopt
// when `body` is not a well-formed answer of that type (it is then passed on as it came, for
// libssh to judge).
std::optional<std::string> filter_agent_identities(
    std::string_view body, const AgentView& view, std::vector<std::string>* held = nullptr,
    std::vector<std::pair<std::string, std::string>>* signers = nullptr);

// Whether the OpenSSH certificate blob `certificate` (its type, its nonce, then the certified
// key's own fields) certifies the key whose public key blob is `key` (its type, then those fields),
// as ssh checks before it offers a certificate with a private key.
bool certificate_is_of(std::string_view certificate, std::string_view key);

// Whether the OpenSSH certificate blob `certificate` is a user's (not a host's) of a key type ssh
// knows: ssh offers no other as a CertificateFile.
bool user_certificate(std::string_view certificate);

// One known_hosts file, read once per launch. libssh reads a session's known_hosts files whole,
// twice per connection (to order the host key algorithms, then to verify the key), and decodes
// and HMACs every hashed line ("|1|salt|hash", HashKnownHosts yes) on each read: for N hosts and
// M lines, 2·N·M line parses. The pool instead hands each session only lines_for(its host), and
// libssh still verifies the key against them: a line wrongly left out could only make a host look
// unknown (refused), never let a wrong key in.
class KnownHostsIndex {
 public:
  explicit KnownHostsIndex(std::string_view text);

  // The lines (each ending in '\n', in file order) that may concern `host` on `port`. libssh
  // looks the host up as "host" (port 22) or "[host]:port", lower-cased: handed are plain lines
  // naming either spelling (case aside), hashed lines whose HMAC-SHA1 is that of the name libssh
  // looks up, the pattern lines (wildcards, negations) that match that name as ssh matches them
  // (known_hosts_patterns_match: libssh would read each name of the list alone), and every line
  // this index does not judge — markers (@revoked, @cert-authority), malformed lines. Comments
  // and blank lines are dropped; tabs become spaces (libssh splits fields at spaces only).
  // `named_only` (a HostKeyAlias, which libssh does not know: the lines are renamed for it): the
  // lines that name the host (plain or hashed) and the pattern lines that match it, none of the
  // others.
  std::string lines_for(std::string_view host, int port, bool named_only = false) const;

  // The line (1-based, in the file) that revokes the key whose base64 blob is `blob` for `name` as
  // ssh looks it up ("@revoked HOSTS TYPE BLOB", HOSTS plain, hashed or patterns), 0 when none.
  // libssh skips marker lines: the pool checks them itself.
  size_t revoking_line(std::string_view name, std::string_view blob) const;

 private:
  struct Hashed {
    std::string salt, hash;  // decoded
    size_t line;
  };
  std::vector<std::string> lines_;
  std::vector<size_t> always_;
  struct Revoked {
    size_t number;  // in the file, 1-based
    std::string hosts, blob;
  };
  std::vector<std::pair<size_t, std::string>> patterned_;  // line, its host patterns
  std::vector<Revoked> revoked_;
  std::map<std::string, std::vector<size_t>> plain_;  // lower-cased name -> lines
  std::vector<Hashed> hashed_;
};

// KnownHostsIndex(text).revoking_line(name, blob).
size_t revoking_line(std::string_view text, std::string_view name, std::string_view blob);

// Whether a RevokedHostKeys file's text that is not a KRL (a list of public keys, one a line)
// lists the key whose base64 blob is `blob`.
bool key_listed(std::string_view text, std::string_view blob);

// Whether a known_hosts line's host field `patterns` ("*.cluster,!bad.cluster") matches `name`
// (lower-cased) as ssh matches it: some pattern matches ("*" any run, "?" one character, case
// aside) and no negated one ("!") does.
bool known_hosts_patterns_match(std::string_view patterns, std::string_view name);

// The name a known_hosts line gives `host` on `port`: "host" (port 22) or "[host]:port",
// lower-cased.
std::string known_hosts_name(std::string_view host, int port);

// `name` as a hashed known_hosts name ("|1|salt|HMAC-SHA1", HashKnownHosts yes), with a new salt.
std::string hash_known_hosts_name(std::string_view name);

// known_hosts `lines` with each line's host field replaced by `name` (a marker kept): the lines
// found under a HostKeyAlias, made to name the host libssh looks up.
std::string renamed_known_hosts_lines(std::string_view lines, std::string_view name);

// What a start needs from the transport that reaches the hosts: phase one, its warnings, and the
// end. SshPool over SSH; inside a Slurm allocation SrunTransport (process.h).
class HostTransport : public Transport {
 public:
  // Reaches every host (`connections[i]`: how many connections host i needs, where that means
  // something). One entry per host: nullopt when it is ready, else why not; the others stay ready.
  virtual std::vector<std::optional<ConnectFailure>> connect_all(
      const std::vector<int>& connections) = 0;
  // What connect_all warned about, in the order it came.
  virtual const std::vector<ConnectWarning>& warnings() const = 0;
  // Ends every channel and connection.
  virtual void disconnect_all() = 0;
};

class SshPool : public HostTransport {
 public:
  SshPool(std::vector<SshEndpoint> hosts, SshSettings settings);
  ~SshPool() override;
  SshPool(const SshPool&) = delete;
  SshPool& operator=(const SshPool&) = delete;

  // Connects `connections[i]` sessions to host i (at least 1) and verifies + authenticates each.
  // Returns one entry per host: nullopt when all its sessions are ready, else why not; a failed
  // host's sessions are closed, the other hosts stay connected (a caller that needs every host,
  // as the two-phase start does, disconnects them).
  std::vector<std::optional<ConnectFailure>> connect_all(
      const std::vector<int>& connections) override;

  // Warnings collected during connect_all (e.g. StrictHostKeyChecking=no), in the order they came.
  const std::vector<ConnectWarning>& warnings() const override;

  ChannelId exec(size_t host, const std::string& command) override;
  void write(ChannelId channel, std::string_view data) override;
  void write_stable(ChannelId channel, std::string_view data) override;
  void send_eof(ChannelId channel) override;
  size_t unsent(ChannelId channel) const override;
  void no_more_channels() override;
  void cancel(ChannelId channel) override;
  void kill(ChannelId channel, const char* signal) override;
  void watch_fd(int fd) override;
  void unwatch_fd(int fd) override;
  void drop_host(size_t host) override;
  std::optional<double> tcp_ack_age_ms(size_t host) const override;
  // From OpenSSH's answer for the host (ssh -G); nullopt under libssh's own config parser.
  std::optional<ServerAlive> server_alive(size_t host) const override;
  void poll(int timeout_ms, const EventHandler& handler) override;
  double now_ms() const override;

  // Closes every channel and session.
  void disconnect_all() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace msrun_ssh
