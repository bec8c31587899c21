// A batch: short commands run at once on a set of hosts through any Transport, each one's output
// and end collected apart, until all have ended or a deadline passes — the start-up probes of a
// run, a detached start, `stop`, and the checks of `msrun-ssh check`. (The job itself is the
// Runner's: runner.h.) What is still open when the wait ends is killed (wait, wait_or_tell).
//
// While a batch waits, the transport's events of channels that are not its own are handed to
// nobody: run a batch when no other command is open on the transport. A batch may instead ride
// on somebody else's poll (the Runner's stack dumps): offer() it every event, abandon() it at the
// end, and never call wait().
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/transport.h"

namespace msrun_ssh {

struct BatchCommand {
  size_t host = 0;
  std::string command;
};

// What went wrong around a command of a batch, beyond its own exit status.
enum class BatchFailure {
  kNone,
  kOpenFailed,  // it could not be started (`why`: the transport's reason); it is closed
  kHostLost,    // the connection to its host broke (`why`), before or after the command ended
  kTimedOut,    // still open when the wait ended; it was killed
};

struct BatchResult {
  size_t host = 0;
  std::string out;            // everything it printed on stdout
  std::string err;            // and on stderr
  std::optional<int> status;  // its exit status (128+N after signal N), when one came
  std::string signal;         // the signal that ended it, without "SIG" ("KILL"), or ""
  bool closed = false;        // its channel ended: the command is over, or never started
  BatchFailure failure = BatchFailure::kNone;
  std::string why;  // for kOpenFailed and kHostLost
};

// Why a command gave no complete answer, for messages: the failure around it ("connection lost:
// WHY", `timed_out` for kTimedOut), else its exit status with the last line it printed on stderr,
// else that line alone, else "closed without an answer".
std::string batch_trouble(const BatchResult& r, std::string_view timed_out);

class Batch {
 public:
  // Called for every event of one of the batch's commands, after the batch recorded it, inside
  // the transport's poll; `index` is the command's (see start).
  using EventHook = std::function<void(size_t index, const TransportEvent& event)>;

  explicit Batch(Transport& transport, EventHook on_event = nullptr);

  // Starts `command` on `host`; returns its index in results().
  size_t start(size_t host, const std::string& command);

  // The command's stdin (Transport::write and send_eof).
  void write(size_t index, std::string_view data);
  void send_eof(size_t index);
  // Bytes written to the command's stdin that the transport still holds (Transport::unsent).
  size_t unsent(size_t index) const;

  // Gives up on `host` (it stopped answering): its commands become kHostLost with `why` and are
  // closed for the batch, and the transport drops the host (Transport::drop_host) without waiting
  // for a goodbye it would never get.
  void drop_host(size_t host, std::string_view why);

  // The hosts of the commands still open, once each.
  std::vector<size_t> open_hosts() const;

  // Waits until every command started so far has closed, the transport's clock reaches
  // `deadline_ms`, or `keep_waiting` returns false. `keep_waiting` is called after every wake-up,
  // outside the transport's callbacks, and may start commands and write to them; the wait wakes
  // up at least once a second. Then every command still open is marked kTimedOut and killed
  // (Transport::kill with "KILL", the requests sent at once); nothing more is recorded for it.
  void wait(double deadline_ms, const std::function<bool()>& keep_waiting = nullptr);
  // The same wait without its end: true when every command has closed; the commands still open
  // when the deadline passed or `keep_waiting` returned false stay open.
  bool wait_open(double deadline_ms, const std::function<bool()>& keep_waiting = nullptr);
  // wait(), except that when `keep_waiting` returns false before the deadline, each command still
  // open is first written `word` (`stop`'s "K": end the grace at once) and waited for up to
  // `last_ms` more (never past the deadline). True when the wait was cut short so.
  bool wait_or_tell(double deadline_ms, const std::function<bool()>& keep_waiting,
                    std::string_view word, double last_ms);

  // Records `event` when it concerns the batch: an event of one of its commands (then true), or a
  // lost host (recorded for its commands; false, so that the owner of the poll sees it too).
  bool offer(const TransportEvent& event);

  // Gives up on every command still open, as wait() does at its end, without polling: the kills
  // go out at the transport's next poll, whoever calls it.
  void abandon();

  const std::vector<BatchResult>& results() const { return results_; }
  const BatchResult& result(size_t index) const { return results_.at(index); }
  // Commands started and neither closed nor given up yet.
  size_t open() const { return open_; }

 private:
  void host_lost(size_t host, std::string_view why);

  Transport& t_;
  EventHook on_event_;
  std::vector<BatchResult> results_;
  std::vector<ChannelId> channels_;       // index -> channel
  std::map<ChannelId, size_t> index_of_;  // channel -> index, while the batch waits for it
  size_t open_ = 0;
};

// Starts every command, then waits for them until `timeout_s` has passed or `keep_waiting` returns
// false (Batch::wait).
std::vector<BatchResult> run_batch(Transport& transport, const std::vector<BatchCommand>& commands,
                                   double timeout_s,
                                   const std::function<bool()>& keep_waiting = nullptr);
// The same command on each of `hosts`, in that order.
std::vector<BatchResult> run_batch(Transport& transport, const std::vector<size_t>& hosts,
                                   const std::string& command, double timeout_s,
                                   const std::function<bool()>& keep_waiting = nullptr);

// The stdout of each command that reported an exit status (whatever the status); nullopt for
// the others (not started, host lost before the end, timed out, closed without a status).
std::vector<std::optional<std::string>> exited_output(const std::vector<BatchResult>& results);

}  // namespace msrun_ssh
