// Output (docs/output.md): bytes of every process -> whole lines -> raw per-rank log
// files and prefixed console lines, plus the end-of-job summary.
//
// Each process has two streams (stdout, stderr), each framed into lines separately, so a stderr
// line never splits a stdout line in the merged log. Log files get the bytes exactly as written
// (a final line without newline included); the console gets every line once, prefixed with rank
// and host, stderr lines marked (and coloured on a terminal), and only for the ranks being tailed.
// Nothing here blocks on the network; all writes go to local files.
#pragma once

#include <spdlog/logger.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace msrun_ssh {

class StatusLine;
class ConsoleSink;

// Splits one byte stream into lines. A line of more than `max_line` bytes (its newline left out)
// is handed out in pieces of that size, the last ending with its newline, wherever the chunks fed
// happened to be cut: a line of exactly `max_line` bytes and its newline is one piece (not a
// piece and a lone newline, an empty line on the console).
class LineFramer {
 public:
  explicit LineFramer(size_t max_line = 1 << 20) : max_line_(max_line > 0 ? max_line : 1) {}

  // Feeds bytes; calls on_line(bytes) for every complete line, newline included.
  template <typename F>
  void feed(std::string_view data, F&& on_line);

  // Hands out what is left (a last line without newline), if anything.
  template <typename F>
  void finish(F&& on_line);

  size_t pending() const { return partial_.size(); }
  // The bytes of the line begun but not ended yet.
  std::string_view partial() const { return partial_; }

 private:
  size_t max_line_;
  std::string partial_;
};

template <typename F>
void LineFramer::feed(std::string_view data, F&& on_line) {
  while (!data.empty()) {
    size_t room = max_line_ - partial_.size();
    // A newline right after `room` bytes still ends this piece; one further on, a later piece.
    size_t nl = data.substr(0, room + 1).find('\n');
    if (nl == std::string_view::npos) {
      if (data.size() <= room) {  // a full piece waits for the next byte: its newline, or not
        partial_.append(data);
        return;
      }
      partial_.append(data.substr(0, room));
      on_line(std::string_view(partial_));
      partial_.clear();
      data.remove_prefix(room);
      continue;
    }
    std::string_view line = data.substr(0, nl + 1);
    if (partial_.empty()) {
      on_line(line);
    } else {
      partial_.append(line);
      on_line(std::string_view(partial_));
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

template <typename F>
void LineFramer::finish(F&& on_line) {
  if (partial_.empty()) return;
  on_line(std::string_view(partial_));
  partial_.clear();
}

// --contract torch: the error file of a rank whose main raised under
// torch.distributed.elastic's @record (its TORCHELASTIC_ERROR_FILE), which src/remote/stack_site.py
// relays on the rank's stderr at exit as one line: kErrorFileLine, then the file's JSON
// ({"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}, or
// an older {"message": "...", "timestamp": N}). That line goes neither to the console nor to the
// log; the summary shows the file instead of the traceback it caught.
inline constexpr std::string_view kErrorFileLine = "msrun-ssh: error file: ";
struct ErrorFile {
  std::string message;                 // "ValueError: ..."
  std::vector<std::string> traceback;  // py_callstack, line by line
  long long timestamp = 0;             // seconds since the epoch on the rank's host (0: none)
};
// The error file in `json`; nullopt when it is not one.
std::optional<ErrorFile> parse_error_file(std::string_view json);

// Keeps the last Python traceback a process printed: from "Traceback (most recent call last):"
// (also at the end of a line, after an unfinished progress bar's redraws) through the exception
// line and the lines after it, up to kMessageLines of them (an exception's message may span lines:
// MindSpore's "- Ascend Error Message:" sections, NCCL's "Last error:"), with the chained ones
// before it ("During handling of the above exception, another exception occurred:", "The above
// exception was the direct cause of the following exception:"). A traceback cut by the end of the
// output is kept as far as it got (cut() says so). At most kMaxLines lines are kept: the first
// kHeadLines and the last ones (the innermost frames and the exception), the lines between counted
// in one line, as Python keeps the innermost frames of a deep recursion.
class TracebackCatcher {
 public:
  static constexpr size_t kMaxLines = 200;
  static constexpr size_t kHeadLines = 20;
  static constexpr size_t kMessageLines = 20;

  // One line of the process's output, without its newline.
  void feed(std::string_view line);

  // The last traceback (empty: none), its trailing blank lines left out, and whether the output
  // ended inside it.
  std::vector<std::string> lines() const;
  bool cut() const { return state_ == State::kFrames; }

 private:
  enum class State { kIdle, kFrames, kMessage, kChained };
  void push(std::string_view line);
  State state_ = State::kIdle;
  std::vector<std::string> head_;
  std::deque<std::string> tail_;
  size_t left_out_ = 0;
  size_t message_lines_ = 0;
  bool last_blank_ = false;
};

// Keeps the stacks Python's faulthandler prints when the process gets SIGABRT (with
// PYTHONFAULTHANDLER=1, which --timeout and --hang_timeout set): the lines after "Fatal Python
// error: Aborted", every thread ("Thread 0x... (most recent call first):", its "  File ..."
// frames), up to the first line that is none of these. At most TracebackCatcher::kMaxLines lines.
class StackCatcher {
 public:
  void feed(std::string_view line);
  const std::vector<std::string>& lines() const { return stack_; }

 private:
  bool capturing_ = false;
  std::vector<std::string> stack_;
};

// ISO 8601, UTC, with milliseconds: "2026-11-30T23:26:11.499Z".
std::string format_timestamp(std::chrono::system_clock::time_point t);

// What the console shows of a line that redraws itself with '\r' (a progress bar such as
// tqdm's): its last non-empty part. A line without '\r' is shown whole.
std::string_view console_text(std::string_view line);

// The newest complete redraw of a line still being written ("\r 10%|#\r 20%|##\r 3" -> " 20%|##":
// the part after the last '\r' may still be cut). Empty when the line has no complete redraw.
std::string_view latest_redraw(std::string_view partial);

// --output gather: identical console lines of several processes, each arriving within `window_ms`
// of the first, are printed once under the rank set and host set of all of them
// ("[0-7@node[01-02]] Epoch 3 done", stderr lines "[... err]"); a line only one process printed
// keeps that process's own prefix. The lines of each stream of a process stay in the order it
// printed them (a line joins an earlier group only if the stream has nothing pending after it;
// stdout and stderr go to different consoles and are ordered separately). At most kMaxPending
// lines wait; past that the oldest goes out early.
//
// Cost: each line is hashed once (`hash`; lines with equal hashes are still compared whole, so a
// collision never merges different lines). Nothing is allocated per line once the gatherer has
// held as many lines and texts as it ever holds at once: lines that went out leave their storage
// to the next ones, up to kKeptTextBytes of text each (longer texts give theirs back).
class Gatherer {
 public:
  static constexpr size_t kMaxPending = 4096;
  static constexpr size_t kKeptTextBytes = 4096;
  using Hash = size_t (*)(std::string_view);

  Gatherer(double window_ms, bool color, Hash hash = &hash_text)
      : window_ms_(window_ms), color_(color), hash_(hash) {}

  // A process: `rank` (-1: the scheduler), its host, what follows the host in its prefix (" a2"),
  // and its own prefixes for stdout and stderr lines. Returns its source number.
  int add_source(int rank, std::string host, std::string suffix, std::string own_out,
                 std::string own_err);

  // A console line (without newline) of `source`, received at `now_ms`; `stamp` ("" or a
  // timestamp and a space) goes in front of it if it opens a group.
  void add(int source, bool is_stderr, std::string_view text, double now_ms,
           const std::string& stamp);

  // Appends every line whose window has passed (every line with `all`), prefixed and ended with
  // '\n', oldest first, to `out` (stdout lines) or `err` (stderr lines).
  void take(double now_ms, bool all, std::string& out, std::string& err);

  size_t pending() const { return count_; }
  // When the oldest pending line is due, in the clock of add() (< 0: nothing pending).
  double due_ms() const { return count_ == 0 ? -1 : entry(0).first_ms + window_ms_; }
  // Texts held with their storage: pending ones and ones kept for reuse.
  size_t texts_held() const { return open_[0].size() + open_[1].size() + spare_.size(); }

  // The default `hash`: std::hash of the text.
  static size_t hash_text(std::string_view text) { return std::hash<std::string_view>{}(text); }

 private:
  struct Source {
    int rank;
    std::string host, suffix, own[2];
  };
  // A text with pending lines in one stream: the text, and the seqs of those lines, oldest first
  // (the ones from `head` on; the ones before it went out). seqs[i] is the text's line number
  // base + i.
  struct Open {
    std::string text;
    size_t hash = 0;
    std::vector<uint64_t> seqs;
    size_t head = 0;
    uint64_t base = 0;
  };
  // A map key: views the text of its Open (map nodes stay in place), compared whole.
  struct Key {
    std::string_view text;
    size_t hash;
    bool operator==(const Key& o) const { return hash == o.hash && text == o.text; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return k.hash; }
  };
  using OpenMap = std::unordered_map<Key, Open, KeyHash>;
  struct Entry {
    uint64_t seq;
    bool is_stderr;
    Open* open;    // its text
    uint64_t pos;  // its line number among the lines of that text (Open::base)
    std::string stamp;
    double first_ms;
    std::vector<int> sources;
  };
  Entry& entry(size_t i) { return ring_[(head_ + i) & (ring_.size() - 1)]; }
  const Entry& entry(size_t i) const { return ring_[(head_ + i) & (ring_.size() - 1)]; }
  size_t first_after(const Open& open, const Entry* last) const;
  bool join(Open& open, int source, size_t slot, const Entry* last, double now_ms);
  Open* find_text(int stream, std::string_view text, const Entry* last, size_t& hash);
  Open& open_text(int stream, std::string_view text, size_t hash);
  Entry& push_entry();
  void pop_entry();
  void append_line(const Entry& e, std::string& to);
  const std::string& label_of(const Entry& e);
  double window_ms_;
  bool color_;
  Hash hash_;
  std::vector<Source> sources_;
  std::vector<uint64_t> last_seq_;  // per source and stream: its newest pending line (0: none)
  // The pending lines in order of arrival, a ring of a power-of-two size: entry(i) has seq
  // front seq + i. The entries of lines gone out keep their storage for the next ones.
  std::vector<Entry> ring_;
  size_t head_ = 0;
  size_t count_ = 0;
  OpenMap open_[2];                        // per stream: the texts with pending lines
  std::vector<OpenMap::node_type> spare_;  // texts no line has any more, for reuse
  // "[ranks@hosts]" of each set of sources a group had, for stdout and stderr lines.
  std::map<std::vector<int>, std::string> labels_[2];
  uint64_t next_seq_ = 1;
};

// A log file the launcher could not write all of (a full disk, a quota, an I/O error, a removed
// directory). The job goes on and the console keeps every line; writing the log goes on as soon as
// it can, after a line in the file saying how many bytes are missing there.
// Half the descriptors this process may open (RLIMIT_NOFILE's soft limit), at least 16: the
// default of OutputConfig::max_open_logs.
size_t default_max_open_logs();

struct LogGap {
  std::string path;
  size_t written = 0;  // bytes the file holds
  size_t missing = 0;  // bytes that could not be written (0: none)
  std::string error;   // why the first write failed
  // Why closing the file failed ("" when it did not): a network file system (NFS) reports there
  // that writes it had accepted did not reach the server, so the file may miss bytes no write
  // counted.
  std::string close_error;
};

struct OutputConfig {
  std::string log_dir;
  int console_out = 1;  // where prefixed stdout lines go
  int console_err = 2;  // where prefixed stderr lines and launcher messages go
  bool color = false;
  size_t keep_last_lines = 10;
  std::shared_ptr<spdlog::logger> launcher_log;  // gets every message(); may be null
  bool timestamps = false;      // --timestamps: console lines start with their receive time
  bool log_timestamps = false;  // --log_timestamps: so does every line of the per-rank logs
  bool gather = false;          // --output gather (see Gatherer)
  double gather_window_s = 1;
  // A line being redrawn with '\r' shows its newest redraw on the console at most this often.
  double redraw_interval_s = 1;
  // The receive time of output (tests set a fake one); default: the system clock.
  std::function<std::chrono::system_clock::time_point()> clock;
  // The terminal's status row (status_line.h), erased around every console write; may be null.
  StatusLine* status = nullptr;
  // Where console bytes go (console_sink.h): a run hands in the process's sink, so that a stopped
  // terminal or a paused pipe never blocks the launcher. Null: written at once (blocking).
  ConsoleSink* sink = nullptr;
  // Called when writing a log file starts failing (after it is said on the console), e.g. for the
  // events stream; may be empty.
  std::function<void(const LogGap&)> on_log_error;
  // How log bytes are written: ::write unless a test puts a failing one here.
  std::function<ssize_t(int, const void*, size_t)> write_log;
  // How a log file is closed: ::close unless a test puts a failing one here.
  std::function<int(int)> close_log;
  // At most this many log files are open at once; the others are opened again (appending) when
  // they have bytes to write. Default: half the descriptors the process may open.
  size_t max_open_logs = default_max_open_logs();
};

class Output {
 public:
  explicit Output(OutputConfig config);
  ~Output();
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  // Creates `log_dir` (mode 0700 for every directory created). Throws InputError naming the
  // directory when it cannot.
  static void make_log_dir(const std::string& log_dir);

  // Registers a process: opens (truncates) its log file 0600 (an empty `log_name`: no log file, its
  // lines only reach the console). `prefix` is e.g. "3@198.18.1.11" (process_prefix);
  // `rank` (-1: the scheduler) and `host` are what --output gather folds into rank and host sets
  // (an empty host: the prefix stands for itself). Throws std::runtime_error naming the file when
  // it cannot be opened.
  int add_process(const std::string& prefix, const std::string& log_name, bool on_console,
                  int rank = -1, const std::string& host = {});

  // Process `proc` reads the launcher's stdin (--tail_worker_log): an unfinished line of its that
  // stays so for half a second (a prompt: pdb's "(Pdb) ", input("...? ")) is shown on the console
  // as it is, and the rest of that line when it ends.
  void show_prompts(int proc);

  // Bytes from a process's stdout or stderr.
  void data(int proc, bool is_stderr, std::string_view bytes);

  // The process's streams ended: hands out partial last lines.
  void finish(int proc);

  // The process is started again and its output goes on in the same log: finish(), then the line
  // `text` in its log file only (with --log_timestamps, stamped as the others), on a line of its
  // own: a last line that came without its newline gets one there.
  void separate(int proc, std::string_view text);

  // Writes what is buffered to the console and the log files; gathered lines go out once their
  // window has passed, redraws of progress bars at most every redraw_interval_s.
  void flush();

  // flush(), and every gathered line now: the end of the output, or a message must follow it.
  void drain();

  // Closes every open log file (a later write opens it again, appending), saying so when closing
  // one fails (LogGap::close_error): at the end of a run, before its summary.
  void close_logs();

  // Milliseconds until flush() has something to write that is not there yet (< 0: nothing).
  int due_in_ms();

  // Waits at most `timeout_ms` until the console took what is queued for it (console_sink.h).
  void settle_console(double timeout_ms);

  // A message of the launcher itself ("msrun-ssh: ..."), on the error console.
  void message(const std::string& text);

  // A line in the launcher's log only.
  void log_only(const std::string& text);

  // A report of the launcher of several lines (stack dumps), as it is, on the error console and
  // in the launcher's log.
  void report(const std::string& text);

  // The last lines the process printed (both streams), oldest first.
  std::deque<std::string> last_lines(int proc) const;

  // The last Python traceback the process printed (both streams), whole.
  const TracebackCatcher& traceback(int proc) const;

  // The stacks faulthandler printed when the process was aborted (empty: none).
  const std::vector<std::string>& stacks(int proc) const;

  // The process's error file (--contract torch), when it relayed one.
  const std::optional<ErrorFile>& error_file(int proc) const;

  // Bytes written to the log file of `proc` so far.
  size_t log_bytes(int proc) const;
  // Lines `proc` printed so far (both streams; a line cut at the framer's limit counts per piece).
  uint64_t lines(int proc) const;

  // What could not be written to the log of `proc` so far (missing 0: nothing).
  LogGap log_gap(int proc) const;

 private:
  struct Proc;
  void line(Proc& p, bool is_stderr, std::string_view text);
  void console_line(Proc& p, bool is_stderr, std::string_view text);
  void write_log(Proc& p);
  void touch(Proc& p);
  bool open_log(Proc& p, int flags);
  void close_log(Proc& p);
  static LogGap log_gap_of(const Proc& p);
  size_t write_some_log(Proc& p, std::string_view data);
  void say_log_notes();
  void show_redraws();
  void write_console();
  // `own`: the launcher's message, never dropped by the sink; else the processes' lines.
  void console_write(int fd, std::string_view text, bool own = false);
  double now_ms();
  const std::string& stamp();
  OutputConfig config_;
  Gatherer gatherer_;
  double now_ms_ = 0;  // the receive time of what data() is handling
  double stamp_ms_ = -1;
  std::string stamp_;
  std::vector<Proc*> procs_;
  std::vector<Proc*> touched_;       // touch()
  std::vector<Proc*> prompt_procs_;  // show_prompts()
  std::deque<Proc*> open_logs_;      // the procs whose log is open, oldest first (open_log)
  std::string out_buf_;
  std::string err_buf_;
  std::vector<std::string> log_notes_;  // what write_log has to say, said by say_log_notes
};

// The console prefix of a process: "3@HOST" for rank 3, "sched@HOST" for the scheduler (rank < 0).
std::string process_prefix(int rank, std::string_view host);

// One row of the end-of-job summary.
struct SummaryRow {
  std::string host;
  std::string process;  // "scheduler", "rank 3"
  std::string status;   // "exit 0", "exit 7", "killed by teardown (SIGTERM)", "host lost"
  double seconds = 0;
  bool failed = false;
  std::vector<std::string> last_lines;  // shown for failed processes
  std::vector<std::string> traceback;   // the last Python traceback, whole (failed processes)
  int rank = -1;                        // global rank of a worker; -1 for the scheduler
  bool root_cause = false;              // the first failure: what started the teardown
  bool torn_down = false;               // ended by the teardown (counted, not listed)
  std::vector<std::string> stacks;      // Python stacks printed at a --timeout / --hang_timeout
  std::string error_message;            // from the error file (--contract torch), else empty
  long long error_time = 0;             // the error file's timestamp (0: none)
  int exit_code = 0;                    // torch's exitcode: the status, or -N when killed by N
  LogGap log_gap;                       // what its log file misses (log_gap.missing 0: nothing)
};

// torchrun's "first observed failure": when the root cause of `rows` (the first failure the
// launcher saw) has an error file, the failed process whose error file is the earliest (by its
// timestamp, to the second; the first seen on a tie) becomes the root cause instead.
void follow_error_files(std::vector<SummaryRow>& rows);

// What torchrun writes to its own TORCHELASTIC_ERROR_FILE (the launcher's environment's: TorchX
// and other schedulers read it) when its job fails: the root cause's error file with its
// "errorCode" (the rank's exitcode), or, for a root cause without one, a ChildFailedError naming
// it, at `now` (seconds since the epoch). Empty when `rows` has no root cause.
std::string torchelastic_error(const std::vector<SummaryRow>& rows, long long now);

// Renders the summary table (header, one line per process), then the failure report: the root
// cause first (its traceback, else its last lines), then the other failed processes grouped by
// what they printed (identical after numbers in messages are blurred; "File ..., line N" kept),
// each group once under its rank set ("ranks 0-2,4 (4 processes), e.g. rank 0 on HOST"), then
// the number of processes the teardown ended. Stacks printed at a time limit come last, grouped the
// same way (thread ids blurred too), so that the one rank stuck elsewhere stands out.
std::string format_summary(const std::vector<SummaryRow>& rows);

// The first log of `rows` that misses bytes or whose close failed, null when none: a log that
// failed only as the job ended (its last bytes, its close) still fails a job that ended well under
// --on_log_error=stop.
const LogGap* first_incomplete_log(const std::vector<SummaryRow>& rows);

// Just the grouped Python stacks of format_summary ("" when no process printed any).
std::string format_stacks(const std::vector<SummaryRow>& rows);

// The rows that have stacks, grouped by them (identical once thread ids, "0x" addresses and LWP
// numbers are blurred), each group once in the order its first row came: a line
// "--- TITLE of LABEL ---" (LABEL as in the failure report: "rank 3 on HOST", or "ranks 0-2,4 (4
// processes), e.g. rank 0 on HOST") and the first row's stack lines. "" when no row has any.
std::string format_stack_groups(const std::vector<SummaryRow>& rows, std::string_view title);

// Ranks in node-set-like notation: {0,1,2,4} -> "ranks 0-2,4 (4 processes)", {3} -> "rank 3";
// the scheduler (-1) is named first; a rank given more than once (processes of one rank) is
// named once and counted as often: {-1,-1,3,3} -> "scheduler, rank 3 (4 processes)".
std::string describe_ranks(std::vector<int> ranks);

}  // namespace msrun_ssh
