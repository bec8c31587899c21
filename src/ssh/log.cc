// libssh's own log messages, away from the terminal (see set_ssh_log in ssh.h).
#include <libssh/callbacks.h>
#include <libssh/libssh.h>

#include "msrun_ssh/ssh.h"

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

}  // namespace msrun_ssh
