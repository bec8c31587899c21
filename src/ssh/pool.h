// The SSH pool's insides, shared by its two halves (private to src/ssh/): connect.cc is phase one
// (connecting, host keys, authentication), channels.cc phase two (channels) and the epoll loop
// both phases wait in.
#pragma once

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <sys/epoll.h>
#include <time.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "msrun_ssh/ssh.h"
#include "msrun_ssh/ssh_config.h"

namespace msrun_ssh {

// The session's last error in libssh's words.
inline std::string describe_error(ssh_session s) {
  std::string e = ssh_get_error(s);
  if (e.empty()) return "connection failed";
  return e;
}

// Why a ready connection ended, for the user: libssh's words with a damaged packet named
// (name_damage), or "connection closed" when libssh gave none.
inline std::string describe_loss(ssh_session s) {
  std::string why = name_damage(describe_error(s));
  return why == "connection failed" ? "connection closed" : why;
}

struct KeyDeleter {
  void operator()(ssh_key k) const { ssh_key_free(k); }
};
using KeyPtr = std::unique_ptr<std::remove_pointer_t<ssh_key>, KeyDeleter>;

struct SshPool::Impl {
  enum class ConnState { kQueued, kConnecting, kAuth, kReady, kFailed, kClosed };
  struct Conn {
    size_t host = 0;
    ssh_session session = nullptr;
    ssh_event event = nullptr;
    ConnState state = ConnState::kQueued;
    double deadline = 0;
    int fd = -1;
    uint32_t mask = 0;
    int channels = 0;
    std::string known_hosts;           // the user known_hosts file, as the user knows it
    std::string global_known_hosts;    // and the global one
    std::vector<int> known_hosts_fds;  // the narrowed copies libssh reads (memfds)
    size_t auth_step = 0;              // with OpenSSH's settings: the next identity to offer
    std::vector<std::string> offered;  // the identity files offered so far (for the error)
    bool agent_settled = false;        // the agent's socket was settled (filter_agent)
    int agent_fd = -1;  // the agent filter's socket libssh holds, until authenticated
    std::shared_ptr<AgentHeld> agent_held;  // the listed keys the agent holds (the filter's)
    bool proxied = false;  // through a ProxyCommand / ProxyJump libssh forks (proxies.cc)
    pid_t proxy = 0;       // its pid (and process group), once its child said so
    int proxy_fd = -1;     // its pidfd
    int proxy_log = -1;    // its proxy writes its messages here (a memfd): -E, 2>>
  };
  enum class ChanState { kNew, kOpening, kExec, kRunning, kClosed };
  struct Chan {
    Impl* pool = nullptr;
    ChannelId id = 0;
    size_t conn = 0;
    ssh_channel channel = nullptr;
    ChanState state = ChanState::kNew;
    std::string command;
    SendQueue out;       // stdin bytes not yet accepted by libssh (static ones not copied)
    size_t written = 0;  // stdin bytes libssh accepted
    bool eof_wanted = false;
    bool eof_sent = false;
    bool exited = false;
    bool exec_sent = false;     // the exec request left: the command may run
    bool cancelled = false;     // a teardown came before the exec request: never send it
    int open_retries = 0;       // opens sshd refused and sent again (kOpenRetries)
    std::string signal_wanted;  // an SSH "signal" request to send ("KILL")
    ssh_channel_callbacks_struct callbacks{};
  };

  std::vector<SshEndpoint> hosts;
  SshSettings settings;
  std::vector<Conn> conns;
  std::map<ChannelId, std::unique_ptr<Chan>> chans;
  std::set<ChannelId> unsettled;  // channels with an open / exec / stdin / EOF step to take
  std::vector<ChannelId> ended;   // closed channels, freed outside libssh's callbacks
  double last_wake_ms = 0;
  // No channel will be opened any more (no_more_channels): an ended channel is not answered
  // with a close of its own (one packet per channel less); ssh_disconnect closes and frees it.
  bool linger = false;
  bool busy = false;  // the last wake-up read a stream of output: do not pause
  std::set<size_t> lost_hosts;
  std::map<std::string, KeyPtr> keys;            // identity file -> key, loaded once
  // identity file -> key with its FILE-cert, or null; identity file NUL CertificateFile -> its key
  // with that certificate, or null
  std::map<std::string, KeyPtr> certified_keys;
  // identity file -> its public key blob, to put its key first among the agent's (public_blob)
  std::map<std::string, std::optional<std::string>> public_blobs;
  // The agent's keys in ssh's order (AgentFilter): made when first needed, ended once every
  // connection is authenticated (its thread would not survive the keeper's fork).
  std::unique_ptr<AgentFilter> agent_filter;
  std::set<int> watched;
  // Watched fds epoll refuses (a regular file, /dev/null: EPERM): always readable, so each poll
  // reports them without waiting (Transport::watch_fd's contract holds for every fd).
  std::set<int> always_ready;
  std::vector<ConnectWarning> warnings;
  const EventHandler* handler = nullptr;
  // Events that came while a libssh call was on the stack (inside its callbacks, or a channel
  // step that reads packets): they are held, their bytes copied, and handed to the handler only
  // once libssh has returned. A handler may tear a host down (drop_host frees its session and
  // channels); doing that under libssh's own frames freed what libssh was still walking.
  int in_libssh = 0;
  // Above 0 while the pool frees channels and sessions it tears down. Closing a channel makes
  // libssh flush the session, and a flush that has to wait reads: the other channels' data it
  // reads then belongs to what is being torn down, and is not handed over (no event comes after
  // drop_host or disconnect_all, not even from inside a handler that called them).
  int tearing_down = 0;
  struct Held {
    TransportEvent event;  // its data empty: the bytes are held_bytes[offset, offset + size)
    size_t offset = 0;
    size_t size = 0;
    bool dropped = false;  // its host was dropped (or every connection closed) after it came
  };
  std::vector<Held> held;
  std::string held_bytes;
  ChannelId next_id = 1;
  int epfd = -1;
  std::string home_dir;  // of the user, from the password database, looked up once
  std::string ssh_dir;   // home_dir/.ssh
  std::map<std::string, std::unique_ptr<KnownHostsIndex>> known_hosts_files;  // read once each
  std::map<std::tuple<std::string, std::string, int>, std::string> known_hosts_lines_of;
  // (KRL, host key blob) -> `ssh-keygen -Q`'s exit status: asked once per key, not per
  // connection (a run that could not be made is not kept: the next connection asks again).
  std::map<std::pair<std::string, std::string>, int> krl_verdicts;
  bool narrowing = false;  // known_hosts narrowing possible (/proc mounted)

  std::vector<std::pair<ChannelId, size_t>> pending_failures;  // exec with no live connection
  // Each host's settings as OpenSSH's `ssh -G` gives them (ssh_config.h); empty when no ssh client
  // is installed: then libssh reads the ssh config itself, per session. Hosts whose settings
  // differ only in HostName (the nodes under one Host block) share one copy, its hostname empty,
  // beside their own HostName: a copy per host was ~1.9 KB of the launcher's memory per host.
  // No settings (`shared` null): no answer, resolve_failures says why.
  std::vector<SharedHostConfig> openssh;
  bool has_openssh(size_t host) const { return host < openssh.size() && openssh[host].shared; }
  SshHostConfig openssh_of(size_t host) const { return openssh[host].whole(); }
  // The tokens for `host`, whose settings (has_openssh) stand in the shared copy.
  SshTokens openssh_tokens(size_t host) const {
    SshTokens t = tokens;
    t.original_host = hosts[host].address;
    t.host = openssh[host].shared.get();
    t.hostname = &openssh[host].hostname;
    return t;
  }
  std::vector<std::optional<ConnectFailure>> resolve_failures;  // where openssh has no answer
  SshTokens tokens;  // what IdentityFile's tokens stand for, but the host's own

  Impl(std::vector<SshEndpoint> h, SshSettings s);  // connect.cc
  ~Impl();

  // --- the loop and the descriptors (channels.cc) ---------------------------------------------

  // A launch is hundreds of small exchanges (handshake steps, channel confirmations, heartbeat
  // echoes) that arrive one by one. Waking up for each costs an epoll_wait plus a poll and a read
  // per ready socket, which made up a large share of the launcher's CPU time. After a wake-up that
  // read only messages the loop pauses until kCoalesceMs have passed since it, so that the next
  // wake-up finds several hosts ready. Streams of output (a connection that still had more to
  // read after a first read) are never delayed, and the pause never outlasts the caller's timeout.
  static constexpr double kCoalesceMs = 1.0;
  // libssh reads at most 4 KB from the socket per poll. While a connection has more waiting (a
  // process flooding output), keep reading it here rather than going back through epoll_wait and
  // the whole loop for every 4 KB; bounded, so that one busy host cannot starve the others.
  static constexpr int kMaxPumpRounds = 16;  // 64 KB per connection per wake-up
  // A channel's first kSmallPacketsFor stdin bytes go in packets of at most kSmallPacket: libssh's
  // send buffers grow to twice a packet (the payload with its header and MAC) and stay so, per host
  // (1 KB packets: 4 KB per host; 512 B: 2 KB).
  static constexpr size_t kSmallPacket = 512;
  static constexpr size_t kSmallPacketsFor = 32768;
  // Times a channel's open refused by the server (SSH_REQUEST_DENIED) is sent again while its
  // connection has room by the launcher's count (a session freed there only just now).
  static constexpr int kOpenRetries = 3;
  static constexpr uint64_t kFdKey = 1ULL << 40;  // epoll keys from here on: watched descriptors

  // --- proxies (proxies.cc) ---------------------------------------------------------------------
  // libssh forks a connection's proxy in ssh_connect and, at its end, sends it SIGTERM and waits
  // for it. The child says its pid over proxy_reports; end_proxies ends the proxies of `conns`
  // (SIGTERM, at most `grace_ms`, then SIGKILL; at once with 0) before libssh waits for them.
  int proxy_reports[2] = {-1, -1};
  int connect_forking_a_proxy(size_t ci);
  std::string proxy_hint(size_t ci) const;      // for a failure before the server answered
  std::string proxy_said(const Conn& c) const;  // the last lines of c.proxy_log ("" none)
  std::string jump_of(size_t host) const;       // what its handshakes share on the way (connect.cc)
  // How messages name a host's proxy: "ProxyJump HOPS" or "its ProxyCommand".
  static std::string proxy_named(const SshHostConfig& h) {
    return h.proxy_jump.empty() ? "its ProxyCommand" : "ProxyJump " + h.proxy_jump;
  }
  SshQuery query_of(size_t host) const {
    const SshEndpoint& e = hosts[host];
    return {e.address, e.user, e.port, e.identity_file, e.known_hosts};
  }
  void learn_proxies();
  void end_proxies(const std::vector<size_t>& conns, double grace_ms);
  static constexpr double kProxyGraceMs = 2000;

  int wait(std::vector<epoll_event>& evs, int timeout_ms);
  void update_epoll(size_t ci);
  void drop_conn(size_t ci, ConnState state);
  void free_channel(Chan& ch);
  void close_all();
  void poll(int timeout_ms, const EventHandler& h);
  void pump(size_t ci);
  void check_conn(size_t ci);
  void watch_fd(int fd);
  void unwatch_fd(int fd);
  void emit(const TransportEvent& e);
  void deliver_held();
  void drop_held(std::optional<size_t> host);  // of one host, or of all

  // --- phase one: connect, verify, authenticate (connect.cc) ----------------------------------

  std::vector<std::optional<ConnectFailure>> connect_all(const std::vector<int>& per_host);
  // Asks `ssh -G` for every host's settings; a host it has no answer for fails with why.
  void resolve_hosts();
  bool apply_libssh_config(Conn& c, const SshEndpoint& ep, ConnectFailure& error);
  bool start_connect(size_t ci, ConnectFailure& error);
  void apply_openssh(Conn& c, const SshHostConfig& h);
  bool authenticate_openssh(size_t ci, int& rc, ConnectFailure& error);
  std::optional<std::string> public_blob(const std::string& path);
  bool held_by_agent(const Conn& c, const std::vector<std::string>& files, size_t k);
  std::vector<std::string> listed_blobs(const std::vector<std::string>& files, bool beside);
  void release_agent(Conn& c);
  bool filter_agent(Conn& c, const std::string& socket, bool identities_only,
                    const std::vector<std::string>& files,
                    const std::vector<std::string>& certificates);
  HostKeyPolicy host_key_policy(size_t host) const;
  double connect_timeout_s(size_t host) const;
  bool advance(size_t ci, ConnectFailure& error);
  bool verify_host_key(size_t ci, ConnectFailure& error);
  bool record_host_key(Conn& c, const std::string& name, bool hashed);
  std::string revoked_because(Conn& c, const SshHostConfig* h, const std::string& name);
  ssh_key identity(const std::string& path, ConnectFailure& error);
  ssh_key certified_identity(const std::string& path);
  ssh_key certified_by_file(const std::string& key_path, const std::string& cert_path);
  std::string certificate_signer(const std::string& cert_path,
                                 const std::vector<std::string>& files);
  ssh_key file_certified(const std::string& cert_path, const std::vector<std::string>& files,
                         std::string* signer = nullptr);
  std::string expand_path(const std::string& value) const;
  const std::string& known_hosts_lines(const std::string& path, const std::string& host, int port);
  const KnownHostsIndex& known_hosts_index(const std::string& path);
  void narrow_known_hosts(Conn& c);
  void narrow_openssh_known_hosts(Conn& c);
  bool hand_known_hosts(Conn& c, const std::string& user_lines, const std::string& global_lines);
  void close_known_hosts(Conn& c);

  // --- phase two: channels (channels.cc) -------------------------------------------------------

  ChannelId exec(size_t host, const std::string& command);
  void step(Chan* ch);
  bool needs_step(const Chan& ch) const;
  void step_all();
  void step_unsettled();
  void free_ended();
  void report_pending_failures();
  static int on_data(ssh_session, ssh_channel, void* data, uint32_t len, int is_stderr, void* user);
  static void on_exit_status(ssh_session, ssh_channel, int status, void* user);
  static void on_exit_signal(ssh_session, ssh_channel, const char* sig, int, const char*,
                             const char*, void* user);
  static void on_close(ssh_session, ssh_channel, void* user);
  void report_exit(Chan* ch, int status, const std::string& signal);
  void close_chan(Chan* ch);
  void open_failed(Chan* ch, const std::string& why);
  void host_lost(size_t ci, const std::string& why);
};

}  // namespace msrun_ssh
