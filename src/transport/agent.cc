#include "msrun_ssh/agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

#include "msrun_ssh/command.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

constexpr size_t kHead = 9;                       // op, id, length
constexpr size_t kNoiseKept = size_t{64} * 1024;  // of what the login rc printed before the hello
constexpr size_t kStderrKept = size_t{2} * 1024;  // of the agent's own stderr, for error messages

uint32_t get_u32(std::string_view s, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

void put_u32(std::string& s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xff));
}

// A frame's head: its op, channel and payload size.
std::string frame_head(char op, uint32_t id, size_t payload_size) {
  std::string s;
  s.push_back(op);
  put_u32(s, id);
  put_u32(s, static_cast<uint32_t>(payload_size));
  return s;
}
}  // namespace

std::string agent_frame(char op, uint32_t id, std::string_view payload) {
  std::string s = frame_head(op, id, payload.size());
  s.append(payload);
  return s;
}

void AgentReader::feed(std::string_view data, const NoiseHandler& on_noise,
                       const FrameHandler& on_frame) {
  if (broken_) return;
  buf_.append(data);
  if (!hello_) {
    size_t at = buf_.find(kAgentHello);
    if (at == std::string::npos) {
      // Keep what may be the start of the hello, and at most kNoiseKept of noise before it.
      if (buf_.size() > kNoiseKept + kAgentHello.size()) {
        size_t cut = buf_.size() - kNoiseKept - kAgentHello.size();
        noise_dropped_ += cut;
        buf_.erase(0, cut);
      }
      return;
    }
    hello_ = true;
    if (at > 0 || noise_dropped_ > 0) on_noise(std::string_view(buf_).substr(0, at));
    buf_.erase(0, at + kAgentHello.size());
  }
  frames(on_frame);
}

void AgentReader::frames(const FrameHandler& on_frame) {
  size_t at = 0;
  while (buf_.size() - at >= kHead) {
    uint32_t size = get_u32(buf_, at + 5);
    if (size > kAgentMaxPayload) {
      broken_ = true;
      buf_.clear();
      return;
    }
    if (buf_.size() - at < kHead + size) break;
    AgentFrame f{buf_[at], get_u32(buf_, at + 1), buf_.substr(at + kHead, size)};
    at += kHead + size;
    on_frame(std::move(f));
  }
  buf_.erase(0, at);
}

std::string agent_command(double idle_s) {
  // The loader reads exactly the program's bytes from stdin (raw whatever PERL_UNICODE says,
  // unbuffered: what follows them is the agent's frames) and runs it; stdin's end before that
  // ends it quietly, and so does the idle limit (+1 s) without the whole program: a host cut off
  // while the program was still on its way would otherwise wait for it as long as sshd keeps
  // the dead connection (the launcher sends it right behind the exec request, during the rc).
  std::string loader = fmt::format(
      "binmode STDIN; $SIG{{ALRM}} = sub {{ exit 0 }}; alarm(1 + int($ARGV[0] || 0)); "
      "my $n = {}; my $c = ''; while (length $c < $n) {{ sysread(STDIN, $c, $n - length $c, "
      "length $c) or exit 0 }} alarm(0); $SIG{{ALRM}} = 'DEFAULT'; eval $c; die $@ if $@;",
      remote::kAgentPl.size());
  // Run by the login shell itself (agent.sh): no sh in between.
  return fmt::format("set -- {} {:.3f}\n{}", shell_quote(loader), idle_s, remote::kAgentSh);
}

std::string_view agent_program() { return remote::kAgentPl; }

bool parse_agent_exit(std::string_view payload, int& status, std::string& signal) {
  size_t space = payload.find(' ');
  std::string_view number = payload.substr(0, space);
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), status);
  if (ec != std::errc() || end != number.data() + number.size() || status < 0 || status > 255)
    return false;
  signal = space == std::string_view::npos ? "" : std::string(payload.substr(space + 1));
  return space == std::string_view::npos || !signal.empty();
}

namespace {

// Each word of `words` behind a NUL, at the end of `out`.
void append_words(std::string& out, const std::vector<std::string>& words) {
  for (const auto& w : words) {
    out += '\0';
    out += w;
  }
}

// A P frame's payload up to its argv (agent_launch_payload): the workdir, the flags, the number of
// environment words and those words. Each argv word follows behind a NUL.
std::string launch_head(std::string_view workdir, std::string_view flags,
                        const std::vector<std::string>& env) {
  std::string out = fmt::format("{}{}{}{}{}", workdir, '\0', flags, '\0', env.size());
  append_words(out, env);
  return out;
}

}  // namespace

std::string agent_launch_payload(const ProcessLaunch& launch) {
  std::string flags = std::string(launch.stack_site ? "s" : "") + (launch.stdin_null ? "n" : "");
  std::string out = launch_head(launch.workdir, flags, launch.env);
  append_words(out, launch.argv);
  return out;
}

AgentTransport::AgentTransport(Transport& inner, size_t hosts, std::string command,
                               double keep_alive_s)
    : inner_(inner),
      command_(std::move(command)),
      hosts_(hosts),
      keep_alive_ms_(std::max(keep_alive_s, 0.0) * 1000) {}

ChannelId AgentTransport::exec(size_t host, const std::string& command) {
  auto id = static_cast<ChannelId>(chans_.size());
  // The hosts' commands are often the same text (the watchdog's): waiting for their agents, they
  // share one copy.
  if (!last_command_ || *last_command_ != command)
    last_command_ = std::make_shared<const std::string>(command);
  chans_.push_back(Chan{.host = host, .command = last_command_});
  Host& h = hosts_[host];
  ++h.open;
  switch (h.mode) {
    case Mode::kIdle:
      h.agent = inner_.exec(host, command_);
      inner_.write_stable(h.agent, agent_program());
      agent_host_[h.agent] = host;
      h.mode = Mode::kStarting;
      h.queued.push_back(id);
      break;
    case Mode::kStarting:
      h.queued.push_back(id);
      break;
    case Mode::kReady:
      chans_[id].state = State::kAgent;
      send_to_agent(host, id, chans_[id]);
      break;
    case Mode::kDirect:
      chans_[id].state = State::kDirect;
      chans_[id].command.reset();
      chans_[id].real = inner_.exec(host, command);
      direct_of_[chans_[id].real] = id;
      break;
    case Mode::kGone:
      unqueue(id, fmt::format("not started: {}", agent_trouble(h)));
      break;
  }
  return id;
}

// A command's spawn frame, with the stdin it was given while it waited.
// The command's text is not kept once sent.
void AgentTransport::send_to_agent(size_t host, ChannelId id, Chan& c) {
  const Host& h = hosts_[host];
  auto wire = static_cast<uint32_t>(id);
  const std::string& command = *c.command;
  std::string out;
  if (std::optional<WatchdogArgs> args = watchdog_args_of(command)) {
    // The watchdog: the agent is it (no process of its own on the host). Its arguments, each
    // followed by a NUL, then the stack-dump directory's sitecustomize.py, sent without a copy.
    std::string words;
    for (const auto& word : watchdog_words(*args)) words += word + '\0';
    std::string_view site = watchdog_stack_site();
    inner_.write(h.agent, frame_head('W', wire, words.size() + site.size()) + words);
    inner_.write_stable(h.agent, site);
    hosts_[host].watchdog = id;
  } else if (std::optional<std::string> words = sampler_words_of(command)) {
    // The sampler: the agent runs its program itself (no fork, no Perl start on the host). Its
    // arguments, then the program, the same static text for every host: sent without a copy.
    std::string_view program = sampler_program();
    inner_.write(h.agent, frame_head('M', wire, words->size() + program.size()) + *words);
    inner_.write_stable(h.agent, program);
  } else if (std::optional<ProcessLaunch> launch = process_launch_of(command)) {
    // A process: the agent starts it itself, with no shell in between.
    out = agent_frame('P', wire, agent_launch_payload(*launch));
  } else {
    out = agent_frame('S', wire, command);
  }
  if (!c.stdin_buf.empty()) out += agent_frame('I', wire, c.stdin_buf);
  if (hosts_[host].watchdog != id) c.untaken = c.stdin_buf.size();
  if (c.eof) out += agent_frame('E', wire);
  inner_.write(h.agent, out);
  c.command.reset();
  std::string().swap(c.stdin_buf);
}

void AgentTransport::write(ChannelId channel, std::string_view data) {
  if (channel < 0 || static_cast<size_t>(channel) >= chans_.size() || data.empty()) return;
  Chan& c = chans_[static_cast<size_t>(channel)];
  if (c.state == State::kQueued) c.stdin_buf.append(data);
  if (c.state == State::kDirect) inner_.write(c.real, data);
  if (c.state == State::kAgent) {
    inner_.write(hosts_[c.host].agent, agent_frame('I', static_cast<uint32_t>(channel), data));
    if (hosts_[c.host].watchdog != channel) c.untaken += data.size();
  }
}

void AgentTransport::send_eof(ChannelId channel) {
  if (channel < 0 || static_cast<size_t>(channel) >= chans_.size()) return;
  Chan& c = chans_[static_cast<size_t>(channel)];
  if (c.state == State::kQueued) c.eof = true;
  if (c.state == State::kDirect) inner_.send_eof(c.real);
  if (c.state == State::kAgent)
    inner_.write(hosts_[c.host].agent, agent_frame('E', static_cast<uint32_t>(channel)));
}

size_t AgentTransport::unsent(ChannelId channel) const {
  if (channel < 0 || static_cast<size_t>(channel) >= chans_.size()) return 0;
  const Chan& c = chans_[static_cast<size_t>(channel)];
  if (c.state == State::kQueued) return c.stdin_buf.size();
  if (c.state == State::kDirect) return inner_.unsent(c.real);
  // Not yet in the command's stdin pipe: the agent says what it has taken (a frames), so that a
  // sender that keeps unsent() bounded (the sync) bounds what the agent holds of its stream too.
  if (c.state == State::kAgent) return static_cast<size_t>(c.untaken);
  return 0;
}

// A command not handed to the agent yet never will be. When nothing else waits for this host's
// agent while its login rc still runs, the rc is ended too (SSH signal to its process group).
void AgentTransport::cancel(ChannelId channel) {
  if (channel < 0 || static_cast<size_t>(channel) >= chans_.size()) return;
  Chan& c = chans_[static_cast<size_t>(channel)];
  if (c.state == State::kDirect) return inner_.cancel(c.real);
  if (c.state != State::kQueued) return;
  Host& h = hosts_[c.host];
  h.queued.erase(std::remove(h.queued.begin(), h.queued.end(), channel), h.queued.end());
  unqueue(channel, "not started: the job is being torn down");
  if (h.mode == Mode::kStarting && h.open == 0) inner_.kill(h.agent, "KILL");
}

void AgentTransport::kill(ChannelId channel, const char* signal) {
  if (channel < 0 || static_cast<size_t>(channel) >= chans_.size()) return;
  Chan& c = chans_[static_cast<size_t>(channel)];
  if (c.state == State::kQueued) return cancel(channel);
  if (c.state == State::kDirect) return inner_.kill(c.real, signal);
  if (c.state == State::kAgent)
    inner_.write(hosts_[c.host].agent, agent_frame('K', static_cast<uint32_t>(channel), signal));
}

void AgentTransport::no_more_channels() {
  no_more_ = true;
  inner_.no_more_channels();
  for (size_t h = 0; h < hosts_.size(); ++h) maybe_end(h);
}

void AgentTransport::drop_host(size_t host) {
  Host& h = hosts_[host];
  h.dropped = true;
  h.mode = Mode::kGone;
  h.queued.clear();
  for (auto& c : chans_)
    if (c.host == host) c.state = State::kDone;
  h.open = 0;
  inner_.drop_host(host);
}

std::vector<size_t> AgentTransport::direct_hosts() const {
  std::vector<size_t> out;
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (hosts_[h].mode == Mode::kDirect) out.push_back(h);
  return out;
}

// Every keep_alive_ms_, an N frame (channel id 2^32 - 1: none) to each agent that is up and not the
// job's watchdog yet; `timeout_ms` shortened to the next round.
void AgentTransport::keep_alive(int& timeout_ms) {
  if (keep_alive_ms_ <= 0) return;
  bool any = false;
  double now = inner_.now_ms();
  bool due = now >= next_keep_alive_ms_;
  if (due) next_keep_alive_ms_ = now + keep_alive_ms_;
  for (const Host& h : hosts_) {
    if (h.mode != Mode::kReady || h.watchdog >= 0 || h.eof_sent) continue;
    any = true;
    if (due) inner_.write(h.agent, agent_frame('N', UINT32_MAX));
  }
  auto wait = static_cast<int>(std::ceil(next_keep_alive_ms_ - now));
  if (any && (timeout_ms < 0 || timeout_ms > wait)) timeout_ms = wait;
}

void AgentTransport::poll(int timeout_ms, const EventHandler& handler) {
  keep_alive(timeout_ms);
  if (!pending_.empty()) {
    auto pending = std::move(pending_);
    pending_.clear();
    for (auto& p : pending) {
      p.event.data = p.data;
      handler(p.event);
    }
    timeout_ms = 0;
  }
  inner_.poll(timeout_ms, [&](const TransportEvent& e) { on_inner(e, handler); });
}

void AgentTransport::on_inner(const TransportEvent& e, const EventHandler& handler) {
  if (e.kind == TransportEvent::Kind::kFdReady) return handler(e);
  if (e.kind == TransportEvent::Kind::kHostLost) {
    if (e.host < hosts_.size() && !hosts_[e.host].dropped) handler(e);
    return;
  }
  if (auto it = agent_host_.find(e.channel); it != agent_host_.end())
    return on_agent(it->second, e, handler);
  auto it = direct_of_.find(e.channel);
  if (it == direct_of_.end() || chans_[static_cast<size_t>(it->second)].state == State::kDone)
    return;
  TransportEvent mine = e;
  mine.channel = it->second;
  if (e.kind == TransportEvent::Kind::kClosed || e.kind == TransportEvent::Kind::kOpenFailed)
    finish(it->second);
  handler(mine);
}

void AgentTransport::on_agent(size_t host, const TransportEvent& e, const EventHandler& handler) {
  Host& h = hosts_[host];
  if (h.dropped) return;
  switch (e.kind) {
    case TransportEvent::Kind::kData:
      if (e.is_stderr) {
        h.last_stderr.append(e.data);
        if (h.last_stderr.size() > kStderrKept)
          h.last_stderr.erase(0, h.last_stderr.size() - kStderrKept);
        break;
      }
      h.reader.feed(
          e.data, [](std::string_view) {},
          [&](AgentFrame&& f) { on_frame(host, std::move(f), handler); });
      if (h.mode == Mode::kStarting && h.reader.hello()) release_queued(host, Mode::kReady);
      if (h.reader.broken()) {
        h.last_stderr = "its output is garbled";
        agent_ended(host, handler);
      }
      break;
    case TransportEvent::Kind::kExit:
      h.exit_status = e.status;
      if (h.mode == Mode::kStarting && e.status == kAgentNoPerl)
        release_queued(host, Mode::kDirect);
      break;
    case TransportEvent::Kind::kOpenFailed:
      h.last_stderr = std::string(e.data);
      agent_ended(host, handler);
      break;
    case TransportEvent::Kind::kClosed:
      agent_ended(host, handler);
      break;
    default:
      break;
  }
}

// The commands that waited for the host's agent go to it (kReady), or each to a channel of its own
// (kDirect: no perl there), with the stdin they were given meanwhile.
void AgentTransport::release_queued(size_t host, Mode mode) {
  Host& h = hosts_[host];
  h.mode = mode;
  for (ChannelId id : h.queued) {
    Chan& c = chans_[static_cast<size_t>(id)];
    if (mode == Mode::kReady) {
      c.state = State::kAgent;
      send_to_agent(host, id, c);
    } else {
      c.state = State::kDirect;
      c.real = inner_.exec(host, *c.command);
      direct_of_[c.real] = id;
      if (!c.stdin_buf.empty()) inner_.write(c.real, c.stdin_buf);
      if (c.eof) inner_.send_eof(c.real);
      c.command.reset();
      std::string().swap(c.stdin_buf);
    }
    c.stdin_buf.clear();
  }
  std::vector<ChannelId>().swap(h.queued);
}

void AgentTransport::on_frame(size_t host, AgentFrame&& f, const EventHandler& handler) {
  auto id = static_cast<ChannelId>(f.id);
  if (f.id >= chans_.size() || chans_[f.id].host != host || chans_[f.id].state != State::kAgent)
    return;
  TransportEvent e;
  e.channel = id;
  e.host = host;
  switch (f.op) {
    case 'o':
    case 'e':
      e.kind = TransportEvent::Kind::kData;
      e.is_stderr = f.op == 'e';
      e.data = f.payload;
      return handler(e);
    case 'a': {
      uint64_t taken = 0;
      auto [end, ec] =
          std::from_chars(f.payload.data(), f.payload.data() + f.payload.size(), taken);
      if (ec == std::errc() && end == f.payload.data() + f.payload.size())
        chans_[f.id].untaken -= std::min(taken, chans_[f.id].untaken);
      return;
    }
    case 'x':
      e.kind = TransportEvent::Kind::kExit;
      if (!parse_agent_exit(f.payload, e.status, e.signal)) return;
      return handler(e);
    case 'c':
    case 'f':
      e.kind = f.op == 'c' ? TransportEvent::Kind::kClosed : TransportEvent::Kind::kOpenFailed;
      e.data = f.payload;
      finish(id);
      handler(e);
      return maybe_end(host);
    default:
      return;
  }
}

// The agent's channel ended. Commands that waited for it fail to start; while commands of its
// host still run, the host is lost, unless the agent was the job's watchdog there (see the top):
// then its channel closes first, and the host's later commands get channels of their own.
void AgentTransport::agent_ended(size_t host, const EventHandler& handler) {
  Host& h = hosts_[host];
  if (h.mode == Mode::kDirect || h.mode == Mode::kGone) return;
  bool was_ready = h.mode == Mode::kReady;
  ChannelId dog = h.watchdog;
  bool dog_open = was_ready && dog >= 0 && chans_[static_cast<size_t>(dog)].state == State::kAgent;
  h.mode = dog_open ? Mode::kDirect : Mode::kGone;
  std::string why = agent_trouble(h);
  auto queued = std::move(h.queued);
  h.queued.clear();
  for (ChannelId id : queued) unqueue(id, fmt::format("not started: {}", why));
  if (!was_ready || h.open == 0) return;
  if (dog_open) {
    TransportEvent said;
    said.kind = TransportEvent::Kind::kData;
    said.channel = dog;
    said.host = host;
    said.is_stderr = true;
    said.data = why;
    handler(said);
    TransportEvent closed;
    closed.kind = TransportEvent::Kind::kClosed;
    closed.channel = dog;
    closed.host = host;
    finish(dog);
    handler(closed);
    for (size_t id = 0; id < chans_.size(); ++id) {
      if (chans_[id].host != host || chans_[id].state != State::kAgent) continue;
      closed.channel = static_cast<ChannelId>(id);
      finish(closed.channel);
      handler(closed);
    }
    return;
  }
  TransportEvent lost;
  lost.kind = TransportEvent::Kind::kHostLost;
  lost.host = host;
  lost.data = why;
  handler(lost);
  if (h.dropped) return;
  for (size_t id = 0; id < chans_.size(); ++id) {
    if (chans_[id].host != host || chans_[id].state != State::kAgent) continue;
    TransportEvent closed;
    closed.kind = TransportEvent::Kind::kClosed;
    closed.channel = static_cast<ChannelId>(id);
    closed.host = host;
    finish(static_cast<ChannelId>(id));
    handler(closed);
  }
}

std::string AgentTransport::agent_trouble(const Host& h) const {
  std::string status = h.exit_status >= 0 ? fmt::format(" (exit {})", h.exit_status) : "";
  std::string line = last_line(h.last_stderr);
  return fmt::format("the launch agent ended{}{}{}", status, line.empty() ? "" : ": ", line);
}

void AgentTransport::finish(ChannelId id) {
  Chan& c = chans_[static_cast<size_t>(id)];
  if (c.state == State::kDone) return;
  c.state = State::kDone;
  if (hosts_[c.host].open > 0) --hosts_[c.host].open;
}

// Once no command will come and every one has ended, the agent's stdin ends, and so does it.
void AgentTransport::maybe_end(size_t host) {
  Host& h = hosts_[host];
  if (!no_more_ || h.open > 0 || h.mode != Mode::kReady || h.eof_sent) return;
  h.eof_sent = true;
  inner_.send_eof(h.agent);
}

// A queued command that will never start: its kOpenFailed comes with the next poll.
void AgentTransport::unqueue(ChannelId id, const std::string& why) {
  Chan& c = chans_[static_cast<size_t>(id)];
  finish(id);
  Pending p;
  p.event.kind = TransportEvent::Kind::kOpenFailed;
  p.event.channel = id;
  p.event.host = c.host;
  p.data = why;
  pending_.push_back(std::move(p));
}

}  // namespace msrun_ssh
