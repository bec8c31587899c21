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
//
// FLOOR_COMMAND=CMD: the start-up floor of any launcher over libssh instead (bench.py's launch and
// login suites). Every host at once, a thread each (the memory figure then counts the threads'
// stacks: not a memory floor), runs CMD on one channel and waits for its exit status: one SSH
// connection, one authentication, one session channel, one exec (the user's shell runs CMD, and
// with it the host's rc) per host, and nothing else. Exit 1 when a host cannot be connected or CMD
// did not exit 0 on it.
#include <libssh/libssh.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

long status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  return -1;
}

ssh_session new_session(const char* address, const char* known_hosts) {
  ssh_session s = ssh_new();
  int port = 22;
  ssh_options_set(s, SSH_OPTIONS_HOST, address);
  ssh_options_set(s, SSH_OPTIONS_USER, "root");
  ssh_options_set(s, SSH_OPTIONS_PORT, &port);
  ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, known_hosts);
  bool no_config = false;
  ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no_config);
  return s;
}

// Connects, authenticates and runs `command` on a new channel; nullptr (the error printed) when a
// step failed.
ssh_channel start(ssh_session s, const char* address, ssh_key key, const std::string& command) {
  ssh_channel c = nullptr;
  if (ssh_connect(s) != SSH_OK || ssh_session_is_known_server(s) != SSH_KNOWN_HOSTS_OK ||
      ssh_userauth_publickey(s, nullptr, key) != SSH_AUTH_SUCCESS || !(c = ssh_channel_new(s)) ||
      ssh_channel_open_session(c) != SSH_OK ||
      ssh_channel_request_exec(c, command.c_str()) != SSH_OK) {
    std::fprintf(stderr, "libssh_floor: %s: %s\n", address, ssh_get_error(s));
    if (c) ssh_channel_free(c);
    return nullptr;
  }
  return c;
}

// FLOOR_COMMAND: one thread per host runs `command` there and waits for its end (see the top).
int run_everywhere(int count, char** addresses, const char* known_hosts, ssh_key key,
                   const std::string& command) {
  std::vector<int> ok(count, 0);
  std::vector<std::thread> threads;
  threads.reserve(count);
  for (int i = 0; i < count; ++i)
    threads.emplace_back([&, i] {
      ssh_session s = new_session(addresses[i], known_hosts);
      if (ssh_channel c = start(s, addresses[i], key, command)) {
        char buf[4096];
        while (ssh_channel_read(c, buf, sizeof buf, 0) > 0) {
        }
        int status = ssh_channel_get_exit_status(c);
        ok[i] = status == 0;
        if (!ok[i]) std::fprintf(stderr, "libssh_floor: %s: exit %d\n", addresses[i], status);
        ssh_channel_close(c);
        ssh_channel_free(c);
      }
      ssh_disconnect(s);
      ssh_free(s);
    });
  for (auto& t : threads) t.join();
  int failed = 0;
  for (int v : ok) failed += !v;
  std::printf("hosts %d failed %d vmhwm_kb %ld\n", count, failed, status_kb("VmHWM:"));
  return failed ? 1 : 0;
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
  if (const char* run = std::getenv("FLOOR_COMMAND")) {
    int rc = run_everywhere(argc - 4, argv + 4, known_hosts, key, run);
    ssh_key_free(key);
    return rc;
  }
  std::vector<ssh_session> sessions;
  std::vector<ssh_channel> channels;
  for (int i = 4; i < argc; ++i) {
    ssh_session s = new_session(argv[i], known_hosts);
    ssh_channel c = start(s, argv[i], key, command);
    if (!c) return 1;
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
