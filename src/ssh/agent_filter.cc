// The user's ssh agent, its keys in ssh's order (AgentFilter, ssh.h). The agent protocol
// (draft-miller-ssh-agent): each message is a 32-bit big-endian length and that many bytes, the
// first of them its type; a client asks one thing at a time and reads its answer. The filter
// reads one whole request from libssh, passes it to the agent, reads the agent's whole answer and
// passes it back, its list of keys ordered (and cut) as ssh orders it when the request was for
// that list, and a request to sign with a CertificateFile's certificate made one to sign with the
// key it certifies.
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/ssh.h"

namespace msrun_ssh {
namespace {

constexpr uint8_t kRequestIdentities = 11;    // SSH_AGENTC_REQUEST_IDENTITIES
constexpr uint8_t kIdentitiesAnswer = 12;     // SSH_AGENT_IDENTITIES_ANSWER
constexpr uint8_t kSignRequest = 13;          // SSH_AGENTC_SIGN_REQUEST
constexpr uint32_t kMaxMessage = 256 * 1024;  // ssh-agent's own bound on a message
constexpr int kWriteWaitMs = 10000;           // a peer that takes nothing for that long is gone

bool take_u32(std::string_view& in, uint32_t& v) {
  if (in.size() < 4) return false;
  v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  in.remove_prefix(4);
  return true;
}

bool take_string(std::string_view& in, std::string_view& s) {
  uint32_t n = 0;
  if (!take_u32(in, n) || in.size() < n) return false;
  s = in.substr(0, n);
  in.remove_prefix(n);
  return true;
}

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}

void put_string(std::string& out, std::string_view s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out += s;
}

// The length of the whole message at the front of `buf` (its length field included), 0 when it
// has not all come yet, SIZE_MAX when its length is beyond the protocol's bound.
size_t whole_message(const std::string& buf) {
  std::string_view in = buf;
  uint32_t n = 0;
  if (!take_u32(in, n)) return 0;
  if (n == 0 || n > kMaxMessage) return SIZE_MAX;
  return in.size() >= n ? 4 + size_t{n} : 0;
}

// Writes all of `data` to the non-blocking socket `fd`, waiting for room at most kWriteWaitMs.
bool send_all(int fd, std::string data) {
  while (send_some(fd, data) && !data.empty()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, kWriteWaitMs) <= 0) return false;
  }
  return data.empty();
}

}  // namespace

void AgentHeld::set(std::vector<std::string> blobs) {
  std::lock_guard lock(m_);
  blobs_ = std::move(blobs);
}

bool AgentHeld::holds(std::string_view blob) const {
  std::lock_guard lock(m_);
  return std::find(blobs_.begin(), blobs_.end(), blob) != blobs_.end();
}

std::optional<std::string> filter_agent_identities(
    std::string_view body, const AgentView& view, std::vector<std::string>* held,
    std::vector<std::pair<std::string, std::string>>* signers) {
  if (body.empty() || static_cast<uint8_t>(body[0]) != kIdentitiesAnswer) return std::nullopt;
  std::string_view in = body.substr(1);
  uint32_t count = 0;
  if (!take_u32(in, count)) return std::nullopt;
  std::vector<std::pair<std::string_view, std::string_view>> keys;  // blob, comment
  for (uint32_t i = 0; i < count; ++i) {
    std::string_view blob, comment;
    if (!take_string(in, blob) || !take_string(in, comment)) return std::nullopt;
    keys.emplace_back(blob, comment);
  }
  if (!in.empty()) return std::nullopt;
  std::vector<size_t> order;  // the agent's keys shown, in ssh's order
  std::vector<bool> taken(keys.size(), false);
  if (held) held->clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<std::string>& listed = view.listed;
    bool is_listed = std::find(listed.begin(), listed.end(), keys[i].first) != listed.end();
    bool first = std::none_of(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(i),
                              [&](const auto& k) { return k.first == keys[i].first; });
    if (!is_listed || !first) continue;
    order.push_back(i);
    taken[i] = true;
    if (held) held->emplace_back(keys[i].first);
  }
  if (view.others_too)
    for (size_t i = 0; i < keys.size(); ++i)
      if (!taken[i]) order.push_back(i);
  std::string kept;
  uint32_t kept_count = 0;
  auto keep = [&](std::string_view blob, std::string_view comment) {
    put_string(kept, blob);
    put_string(kept, comment);
    ++kept_count;
  };
  // ssh's preferred list begins with the CertificateFiles' certificates; each is signed by the
  // first key after them it certifies (sign_and_send_pubkey), and is not offered without one.
  if (signers) signers->clear();
  for (const std::string& certificate : view.certificates) {
    auto signer = std::find_if(order.begin(), order.end(), [&](size_t i) {
      return certificate_is_of(certificate, keys[i].first);
    });
    if (signer == order.end()) continue;
    keep(certificate, keys[*signer].second);
    if (signers) signers->emplace_back(certificate, keys[*signer].first);
  }
  for (size_t i : order) keep(keys[i].first, keys[i].second);
  std::string out(1, static_cast<char>(kIdentitiesAnswer));
  put_u32(out, kept_count);
  return out + kept;
}

bool user_certificate(std::string_view certificate) {
  // The certified key's fields after the nonce, by the certificate's type (PROTOCOL.certkeys).
  static constexpr std::pair<std::string_view, int> kFields[] = {
      {"ssh-ed25519-cert-v01@openssh.com", 1},
      {"ssh-rsa-cert-v01@openssh.com", 2},
      {"ecdsa-sha2-nistp256-cert-v01@openssh.com", 2},
      {"ecdsa-sha2-nistp384-cert-v01@openssh.com", 2},
      {"ecdsa-sha2-nistp521-cert-v01@openssh.com", 2},
      {"sk-ssh-ed25519-cert-v01@openssh.com", 2},
      {"sk-ecdsa-sha2-nistp256-cert-v01@openssh.com", 3},
      {"ssh-dss-cert-v01@openssh.com", 4}};
  std::string_view in = certificate, type, field;
  if (!take_string(in, type) || !take_string(in, field)) return false;  // the nonce
  const auto* known = std::find_if(std::begin(kFields), std::end(kFields),
                                   [&](const auto& k) { return k.first == type; });
  if (known == std::end(kFields)) return false;
  for (int i = 0; i < known->second; ++i)
    if (!take_string(in, field)) return false;
  uint32_t serial_high = 0, serial_low = 0, kind = 0;
  return take_u32(in, serial_high) && take_u32(in, serial_low) && take_u32(in, kind) &&
         kind == 1;  // SSH2_CERT_TYPE_USER
}

namespace {

// `request` (a whole message, its length first) with the key of a signing request for one of
// `signers`' certificates replaced by the key that certificate certifies; as it came otherwise.
std::string sign_with_certified_key(
    std::string request, const std::vector<std::pair<std::string, std::string>>& signers) {
  std::string_view in = std::string_view(request).substr(4);
  std::string_view key;
  if (in.empty() || static_cast<uint8_t>(in[0]) != kSignRequest || signers.empty()) return request;
  in.remove_prefix(1);
  if (!take_string(in, key)) return request;
  auto it =
      std::find_if(signers.begin(), signers.end(), [&](const auto& s) { return s.first == key; });
  if (it == signers.end()) return request;
  std::string body(1, static_cast<char>(kSignRequest));
  put_string(body, it->second);
  body += in;  // the data to sign and the flags, as they came
  std::string out;
  put_string(out, body);
  return out;
}

}  // namespace

bool certificate_is_of(std::string_view certificate, std::string_view key) {
  std::string_view type, nonce, key_type;
  if (!take_string(certificate, type) || !type.ends_with("-cert-v01@openssh.com") ||
      !take_string(certificate, nonce) || !take_string(key, key_type) || key.empty())
    return false;
  return certificate.starts_with(key);
}

struct AgentFilter::Impl {
  // One session's socket and its agent connection.
  struct Link {
    int session = -1;  // the filter's end of the session's socket
    int agent = -1;    // the user's agent
    AgentView view;
    std::shared_ptr<AgentHeld> held;  // told which listed keys the agent holds, when given
    std::vector<std::pair<std::string, std::string>> signers;  // certificate shown -> its key
    std::string request;  // from the session: the request being read
    std::string answer;   // from the agent: its answer being read
    bool asked = false;   // a request went to the agent: its answer is awaited
    bool asked_for_keys = false;
  };

  std::mutex m;
  std::vector<Link> handed;  // opened, not yet taken by the thread
  bool stopping = false;
  bool over = false;  // the thread has ended: nothing is handed to it any more
  int wake = -1;      // an eventfd: something handed, or stopping
  std::thread thread;
  std::vector<Link> links;  // the thread's

  ~Impl() {
    if (thread.joinable()) {
      {
        std::lock_guard lock(m);
        stopping = true;
      }
      uint64_t one = 1;
      (void)!::write(wake, &one, sizeof one);
      thread.join();
    }
    for (auto* list : {&handed, &links})
      for (Link& l : *list) close_link(l);
    if (wake >= 0) ::close(wake);
  }

  static void close_link(Link& l) {
    for (int* fd : {&l.session, &l.agent}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  // Moves `l` as far as the bytes that came allow; false when it is over (either side gone, or
  // a message beyond the protocol).
  static bool step(Link& l) {
    while (true) {
      std::string& buf = l.asked ? l.answer : l.request;
      size_t size = whole_message(buf);
      if (size == SIZE_MAX) return false;
      if (size == 0) return true;
      std::string message = buf.substr(0, size);
      buf.erase(0, size);
      if (!l.asked) {
        l.asked_for_keys = static_cast<uint8_t>(message[4]) == kRequestIdentities;
        if (!send_all(l.agent, sign_with_certified_key(std::move(message), l.signers)))
          return false;
        l.asked = true;
        continue;
      }
      if (l.asked_for_keys) {
        std::vector<std::string> held;
        if (auto cut = filter_agent_identities(std::string_view(message).substr(4), l.view, &held,
                                               &l.signers)) {
          message.clear();
          put_string(message, *cut);
          if (l.held) l.held->set(std::move(held));
        }
      }
      if (!send_all(l.session, std::move(message))) return false;
      l.asked = false;
    }
  }

  // Starts the thread, which takes no signal: they stay with the launcher's loop (signalfd).
  // Under the lock; throws std::system_error when it cannot.
  void start() {
    if (wake < 0) wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
      thread = std::thread([this] { run(); });
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      throw;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }

  // The thread. Whatever ends it (the filter going, a failed poll, no memory), every socket it
  // holds or was handed is closed, so no session waits for an answer that would never come (libssh
  // waits for the agent without a time limit), and no socket is handed to it any more.
  void run() {
    try {
      serve();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the sockets are closed below
    }
    std::lock_guard lock(m);
    over = true;
    for (auto* list : {&links, &handed}) {
      for (Link& l : *list) close_link(l);
      list->clear();
    }
  }

  void serve() {
    std::vector<pollfd> fds;
    while (true) {
      {
        std::lock_guard lock(m);
        if (stopping) return;
        for (Link& l : handed) links.push_back(std::move(l));
        handed.clear();
      }
      fds.assign(1, pollfd{wake, POLLIN, 0});
      for (const Link& l : links) fds.push_back({l.asked ? l.agent : l.session, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) {
        uint64_t count = 0;
        (void)!::read(wake, &count, sizeof count);
      }
      for (size_t i = 0; i < links.size(); ++i) {
        if (!fds[i + 1].revents) continue;
        Link& l = links[i];
        bool open = recv_some(fds[i + 1].fd, l.asked ? l.answer : l.request) && step(l);
        if (!open) close_link(l);
      }
      std::erase_if(links, [](const Link& l) { return l.session < 0; });
    }
  }
};

AgentFilter::AgentFilter() : impl_(std::make_unique<Impl>()) {}

AgentFilter::~AgentFilter() = default;

int AgentFilter::open(const std::string& agent_path, AgentView view,
                      std::shared_ptr<AgentHeld> held) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (agent_path.empty() || agent_path.size() >= sizeof addr.sun_path) {
    errno = agent_path.empty() ? ENOENT : ENAMETOOLONG;
    return -1;
  }
  std::memcpy(addr.sun_path, agent_path.data(), agent_path.size());
  Impl::Link link;
  link.view = std::move(view);
  link.held = std::move(held);
  link.agent = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (link.agent < 0) return -1;
  int pair[2];
  if (::connect(link.agent, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    int saved = errno;
    ::close(link.agent);
    errno = saved;
    return -1;
  }
  link.session = pair[1];
  set_nonblocking(link.agent);
  set_nonblocking(link.session);
  try {
    std::lock_guard lock(impl_->m);
    if (impl_->over) throw std::system_error(EPIPE, std::generic_category(), "filter ended");
    if (!impl_->thread.joinable()) impl_->start();
    impl_->handed.push_back(std::move(link));
  } catch (const std::exception& e) {  // nothing handed: the sockets are closed here
    auto* failure = dynamic_cast<const std::system_error*>(&e);
    Impl::close_link(link);
    ::close(pair[0]);
    errno = failure ? failure->code().value() : ENOMEM;
    return -1;
  }
  uint64_t one = 1;
  (void)!::write(impl_->wake, &one, sizeof one);
  return pair[0];
}

}  // namespace msrun_ssh
