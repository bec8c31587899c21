// A host's SSH settings exactly as OpenSSH's client would use them: its own answer,
// `ssh -G -o BatchMode=no [-F FILE] [-l USER] [-p PORT] [-o UserKnownHostsFile=FILE] NAME`,
// asked once per host name (in parallel) and parsed here. Every corner of ssh_config(5) — Host
// patterns (case-sensitive), Match with every criterion (exec, originalhost, ...), Include, tokens
// in HostName, CanonicalizeHostname — is OpenSSH's own. Where no `ssh` client is installed, the
// pool falls back to libssh's config parser (docs/ssh.md says what that one misses).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/ssh.h"

namespace msrun_ssh {

// The options of `ssh -G`'s answer that change where, as whom, how or through what a connection
// is made and verified.
struct SshHostConfig {
  std::string hostname;  // where it connects (HostName, its tokens expanded by ssh)
  int port = 22;
  std::string user;
  std::vector<std::string> identity_files;  // in the order ssh tries them, tokens NOT expanded
  bool identities_only = false;
  std::string identity_agent;                       // "" (SSH_AUTH_SOCK), "none", or a socket path
  std::vector<std::string> certificate_files;       // in ssh's order, tokens NOT expanded
  std::string proxy_jump;                           // "[user@]host[:port],..." or ""
  std::string proxy_command;                        // tokens not expanded; "" when none
  std::vector<std::string> user_known_hosts_files;  // all of them, in order
  std::vector<std::string> global_known_hosts_files;
  std::string host_key_alias;     // "" when none
  std::string revoked_host_keys;  // RevokedHostKeys as ssh -G gives it ("~" not expanded), or ""
  bool hash_known_hosts = false;
  // StrictHostKeyChecking: yes and ask (there is no one to ask) refuse an unknown key.
  HostKeyPolicy strict_host_key_checking = HostKeyPolicy::kYes;
  std::optional<double> connect_timeout_s;  // ConnectTimeout; none: the launcher's own
  bool canonicalize_hostname = false;       // CanonicalizeHostname other than no
  int server_alive_interval_s = 0;
  int server_alive_count_max = 3;
  bool operator==(const SshHostConfig&) const = default;
};

// The agent socket ssh uses for IdentityAgent `value` (as ssh -G gives it): nullopt for none
// ("none"; "$NAME" or the default with that variable unset), "" for the default ($SSH_AUTH_SOCK,
// which libssh reads itself), else the socket's path (a path, or "$NAME"'s value: ssh's older
// form, which ssh -G does not expand).
std::optional<std::string> identity_agent_socket(
    const std::string& value, const std::function<const char*(const char*)>& getenv_fn = ::getenv);

// Parses the text `ssh -G` prints ("keyword value" lines, keywords in lower case). Throws
// std::runtime_error naming the line when one holds no keyword, or a number or yes/no that is not
// one; keywords it does not use are skipped.
SshHostConfig parse_ssh_g(std::string_view text);

// What the tokens of an IdentityFile, CertificateFile or IdentityAgent value stand for
// (ssh_config(5), TOKENS).
struct SshTokens {
  std::string home;                     // %d, and a leading ~
  std::string local_user;               // %u
  std::string uid;                      // %i
  std::string local_host;               // %l (and %L, up to its first dot)
  std::string original_host;            // %n: the name as the host file gives it
  const SshHostConfig* host = nullptr;  // %h %p %r %k
  // %h (and %k without a HostKeyAlias) when `host` is a copy shared by several hosts
  // (SharedHostConfig): the host's own HostName. Null: host->hostname.
  const std::string* hostname = nullptr;
};

// `value` (an IdentityFile, which ssh -G leaves as written) with its tokens, ${NAME}s (the
// launcher's environment) and a leading "~/" or "~user/" expanded, as ssh does. Throws
// std::runtime_error for an unknown token ("%x"), a lone "%" at the end, an unset variable or an
// unknown user.
std::string expand_ssh_tokens(std::string_view value, const SshTokens& tokens);

// ssh -G's ProxyCommand (its tokens left as they are) as libssh must be given it: %h, %k (the
// HostKeyAlias, else the name as given), %n, %p, %r and %% expanded as ssh expands them, every
// '%' of the result doubled. Throws std::runtime_error for a token ssh refuses there.
std::string proxy_command_for_libssh(std::string_view command, const std::string& hostname,
                                     int port, const std::string& user,
                                     const std::string& original_host,
                                     const std::string& host_key_alias = "");

// The ProxyCommand OpenSSH itself makes of `ProxyJump HOPS` (HOPS not "none"): an `ssh` to the
// last hop, through the ones before it (-J), forwarding stdio to the target (-W '[%h]:%p'), with
// the same config file (-F) when one was named, and BatchMode (no prompt can be answered). Throws
// std::runtime_error for a hop that is not [user@]host[:port]. With `log_file`, its messages go
// there (-E, at LogLevel INFO whatever the config says: a bounded few lines, never DEBUG's).
std::string proxy_jump_command(std::string_view hops, const std::string& config_file,
                               const std::string& log_file = "");

// A Match line's arguments split as OpenSSH 9.2 splits them (blanks, and "..." around a word with
// blanks: the quotes dropped); nullopt for what this reading does not follow (a backslash, a
// single quote, a double quote elsewhere than around a word), where names are then asked one by
// one.
std::optional<std::vector<std::string>> match_words(std::string_view args);

// A host name as the host file gives it, with what the host file sets for it (ssh -l, -p and
// -o UserKnownHostsFile; its identity file is put first in the answer's list, as ssh -i does): what
// `ssh -G` is asked.
struct SshQuery {
  std::string name;
  std::string user;
  std::optional<int> port;
  std::string identity_file;
  std::string known_hosts;
};

// The shell command line that reaches `q` as the launcher does (the host file's user, port,
// identity file and known_hosts as ssh's options): ssh OPTIONS [-F config_file] ... -- NAME
// REMOTE, each word quoted where the shell needs it. For the remedies said to the user.
std::string ssh_command_line(const SshQuery& q, const std::string& config_file,
                             const std::vector<std::string>& options, const std::string& remote);

// The `ssh` argument vector that asks for `q`'s settings: ssh -G -o BatchMode=no [-F config_file]
// ... NAME.
std::vector<std::string> ssh_g_command(const SshQuery& q, const std::string& config_file);

// Whether the host file's identity file is there as ssh's -i sees it (stat: ssh -i takes a file
// only then, and ssh -G lists it in place of ssh's default files).
bool identity_file_exists(const std::string& path);

// The answer for one query: the settings, or why there are none (ssh's own error message).
struct SshResolution {
  std::optional<SshHostConfig> config;
  std::string error;
  std::string text;      // ssh -G's answer as it printed it (only while resolve_with_openssh runs)
  bool refused = false;  // ssh -G itself refused the host (its config, name or user): `error`
};

// A host's settings kept as its HostName beside a copy of the others shared with every host that
// has the same (the nodes under one Host block): a copy per host was ~2 KB of the launcher's
// memory per host, twice (the pool's and the answers kept for the run).
struct SharedHostConfig {
  std::shared_ptr<const SshHostConfig> shared;  // its hostname empty; null: none
  std::string hostname;
  SshHostConfig whole() const;  // a copy with the hostname back
};

// Makes SharedHostConfigs, sharing a copy among configs that differ only in HostName (the last
// few distinct ones are looked at: hosts come in the host file's order, nodes of one block
// together).
class HostConfigSharer {
 public:
  SharedHostConfig share(SshHostConfig config);

 private:
  std::vector<std::shared_ptr<const SshHostConfig>> recent_;
};

// Whether an `ssh` client is on PATH (else libssh reads the ssh config).
bool ssh_client_installed();

// Without an ssh client: throws InputError naming the file, line and keyword of the first line of
// the ssh config libssh is given (`config_file`, "": ~/.ssh/config), or of what it includes, that
// libssh reads otherwise than OpenSSH (or not at all) where that changes where, as whom, how or
// through what a connection is made and verified — Match, IdentityFile, ProxyJump other than none,
// HostKeyAlias, tokens, capitals in Host patterns, ... (docs/ssh.md lists them) — and for a host
// name in `names` with capitals (libssh lower-cases it before matching). Where no config file is
// named, /etc/ssh/ssh_config, which ssh reads and libssh is not given, may hold only what changes
// nothing.
void refuse_what_libssh_misreads(const std::string& config_file,
                                 const std::vector<std::string>& names);

// Asks `ssh -G` for each query, at most `parallel` at a time, each within `timeout_s`. Names that
// the same `Host` lines of the configs match (with the same user, port and known_hosts) are asked
// once, and the answer stands for the others with their own name as hostname, unless it holds the
// name anywhere else (a token, a HostName built from it), the host name is canonicalized, or the
// configs hold a Match line with a criterion other than `all`, `originalhost` and `host` (the
// last only before any HostName line), an Include with tokens or quoted patterns: then each is
// asked. Returns
// nullopt when no `ssh` client can be run at all (the caller falls back).
std::optional<std::vector<SshResolution>> resolve_with_openssh(const std::vector<SshQuery>& queries,
                                                               const std::string& config_file,
                                                               int parallel, double timeout_s);

}  // namespace msrun_ssh
