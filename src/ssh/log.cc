// libssh's own log messages, away from the terminal (see set_ssh_log in ssh.h).
#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <unistd.h>

#include <cstdlib>

#include "msrun_ssh/ssh.h"
#include "msrun_ssh/ssh_config.h"

namespace msrun_ssh {
namespace {

struct SshLog {
  int verbosity = SSH_LOG_NOLOG;
  SshLogSink sink;
};

SshLog& ssh_log() {
  static SshLog log;
  return log;
}

void to_sink(int, const char* function, const char* buffer, void*) {
  const SshLog& log = ssh_log();
  if (!log.sink) return;
  std::string line = function && *function ? std::string(function) + ": " : std::string();
  log.sink(line + (buffer ? buffer : ""));
}

}  // namespace

static_assert(kSshLogOff == SSH_LOG_NOLOG);

void set_ssh_log(int verbosity, SshLogSink sink) {
  ssh_log() = SshLog{verbosity, std::move(sink)};
  // Installed once and for good: from now on libssh never writes to stderr.
  ssh_set_log_callback(&to_sink);
  ssh_set_log_level(verbosity);
}

void apply_ssh_log_verbosity(ssh_session session) {
  int v = ssh_log().verbosity;
  ssh_options_set(session, SSH_OPTIONS_LOG_VERBOSITY, &v);
}

std::string ssh_config_hostname(const std::string& name, const std::string& ssh_config) {
  // OpenSSH's own answer where an ssh client is installed (ssh_config.h).
  if (auto answers = resolve_with_openssh({SshQuery{name, "", {}, "", ""}}, ssh_config, 1, 10)) {
    const SshResolution& r = answers->front();
    return r.config ? r.config->hostname : name;
  }
  std::string config = ssh_config;
  if (config.empty()) {
    const char* home = std::getenv("HOME");
    config = std::string(home ? home : "") + "/.ssh/config";
    if (access(config.c_str(), R_OK) != 0) return name;
  }
  ssh_session s = ssh_new();
  if (!s) return name;
  std::string out = name;
  ssh_options_set(s, SSH_OPTIONS_HOST, name.c_str());
  bool parsed = ssh_options_parse_config(s, config.c_str()) == SSH_OK;
  apply_ssh_log_verbosity(s);
  if (parsed) {
    char* host = nullptr;
    if (ssh_options_get(s, SSH_OPTIONS_HOST, &host) == SSH_OK && host) out = host;
    ssh_string_free_char(host);
  }
  ssh_free(s);
  return out;
}

}  // namespace msrun_ssh
