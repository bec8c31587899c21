// The memory floor of libssh itself: one authenticated session per host, each with one open channel
// running a command, and nothing else. Its peak RSS at 64 and at 512 farm hosts gives the bytes
// per host that any libssh launcher pays; bench/memory_floor.sh sets it beside msrun-ssh's.
//
//   cmake --build build --target libssh_floor        # not part of `all`
//   build/bench/libssh_floor IDENTITY KNOWN_HOSTS HOLD_S ADDRESS...
//
// Connects every address (user root, port 22) one after the other, opens a channel on each that
// runs `sleep HOLD_S`, then prints "hosts N vmhwm_kb K vmrss_kb R" and closes everything. Exit 1
// when a host cannot be connected.
#include <libssh/libssh.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

long status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: libssh_floor IDENTITY KNOWN_HOSTS HOLD_S ADDRESS...\n");
    return 2;
  }
  const char* identity = argv[1];
  const char* known_hosts = argv[2];
  std::string command = std::string("sleep ") + argv[3];
  // FLOOR_PAD=N: the command carries N more bytes (a comment), as a launcher's bigger commands do.
  if (const char* pad = std::getenv("FLOOR_PAD"))
    command += " #" + std::string(std::atoi(pad), 'x');
  ssh_key key = nullptr;
  if (ssh_pki_import_privkey_file(identity, nullptr, nullptr, nullptr, &key) != SSH_OK) {
    std::fprintf(stderr, "libssh_floor: cannot read %s\n", identity);
    return 1;
  }
  std::vector<ssh_session> sessions;
  std::vector<ssh_channel> channels;
  for (int i = 4; i < argc; ++i) {
    ssh_session s = ssh_new();
    int port = 22;
    ssh_options_set(s, SSH_OPTIONS_HOST, argv[i]);
    ssh_options_set(s, SSH_OPTIONS_USER, "root");
    ssh_options_set(s, SSH_OPTIONS_PORT, &port);
    ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, known_hosts);
    bool no_config = false;
    ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no_config);
    ssh_channel c = nullptr;
    if (ssh_connect(s) != SSH_OK || ssh_session_is_known_server(s) != SSH_KNOWN_HOSTS_OK ||
        ssh_userauth_publickey(s, nullptr, key) != SSH_AUTH_SUCCESS || !(c = ssh_channel_new(s)) ||
        ssh_channel_open_session(c) != SSH_OK ||
        ssh_channel_request_exec(c, command.c_str()) != SSH_OK) {
      std::fprintf(stderr, "libssh_floor: %s: %s\n", argv[i], ssh_get_error(s));
      return 1;
    }
    sessions.push_back(s);
    channels.push_back(c);
  }
  std::printf("hosts %zu vmhwm_kb %ld vmrss_kb %ld\n", sessions.size(), status_kb("VmHWM:"),
              status_kb("VmRSS:"));
  std::fflush(stdout);
  for (size_t i = 0; i < sessions.size(); ++i) {
    ssh_channel_close(channels[i]);
    ssh_channel_free(channels[i]);
    ssh_disconnect(sessions[i]);
    ssh_free(sessions[i]);
  }
  ssh_key_free(key);
  return 0;
}
