// The ground floor: small helpers that every room may use, each defined once here. It includes
// nothing of the project, and no room's header is needed to use it (docs/architecture.md,
// "Layers"; .ci/layers.py checks it).
#pragma once

#include <time.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace msrun_ssh {

// ---- strings ------------------------------------------------------------------------------------

// `s` without the leading and trailing characters in `blanks` (default: space and tab).
std::string_view trim(std::string_view s, std::string_view blanks = " \t");

// The lines of `text` without their newlines: a last line without one counts; "" has none.
std::vector<std::string_view> split_lines(std::string_view text);
// The last line of `text` without its line end, after dropping the line ends at its end ("" when
// none is left): what a command said last on stderr.
std::string last_line(std::string_view text);

// The words of `text` that `blanks` (default: space and tab) separate; none when it is all blank.
std::vector<std::string_view> split_words(std::string_view text, std::string_view blanks = " \t");
// split_words's words as strings of their own.
std::vector<std::string> owned_words(std::string_view text);

// `s` with its ASCII letters in lower case.
std::string to_lower(std::string_view s);

// `s` as a message quotes what the user wrote: between `quote` characters, with \n \r \t \\ and
// the quote escaped, other control characters as \xNN (C1 ones as \u00NN), bytes that are not
// UTF-8 as \xNN, and the rest as written. fmt's `{:?}` would do the same, but fmt 9 asserts on
// bytes that are not UTF-8 (its debug builds abort), and a file may hold any bytes.
std::string in_quotes(std::string_view s, char quote = '"');
// in_quotes of the first `max` bytes of `s` at most, "..." after the quote when it was cut: for a
// value that may be megabytes long (a host file's node set).
std::string in_quotes_cut(std::string_view s, size_t max = 64);

// `s` without what a terminal would act on: as in_quotes escapes it, but without quotes, and with
// its newlines, tabs and backslashes as they are. For whole messages that may hold what the user
// gave (an error names the value it refuses).
std::string printable(std::string_view s);

// ---- the shell ----------------------------------------------------------------------------------

// Quotes one word for a POSIX shell: 'it'\''s' style. The empty string becomes ''.
std::string shell_quote(std::string_view word);

// ---- files ------------------------------------------------------------------------------------

// Writes all of `data` to `fd`, again after EINTR, and once it takes more when it is non-blocking
// and full; gives up silently on any other error or on a write of nothing (a closed console must
// not stop the job).
void write_fully(int fd, std::string_view data);

// ---- sockets ----------------------------------------------------------------------------------

// Sets O_NONBLOCK on `fd` (its other flags kept).
void set_nonblocking(int fd);
// Sends what it can of `out` without blocking (and without SIGPIPE), erasing what went; false
// when the peer is gone.
bool send_some(int fd, std::string& out);
// Reads what the socket `fd` has onto `in` without blocking; false at EOF or an error.
bool recv_some(int fd, std::string& in);

// The whole of the file at `path`; nullopt when it cannot be read or is a directory.
std::optional<std::string> read_whole_file(const std::string& path);
// The same, but nullopt also past `max_bytes` (/dev/zero, a file given by mistake), with `why`
// set: strerror's text ("No such file or directory", "Is a directory", ...) or "larger than N
// bytes".
std::optional<std::string> read_whole_file(const std::string& path, size_t max_bytes,
                                           std::string& why);

// Writes `text` to the file `path` (created or truncated); false, with a warning on stderr naming
// the file and the error, when it cannot.
bool write_text_file(const std::string& path, std::string_view text);

// Replaces the file `path` by `text`: written in full under a name of its own in the same
// directory (PATH.<pid>.tmp), then renamed over it, so a reader sees the old file or the whole
// new one, and a failed write (a full disk) leaves no temporary file behind. Returns "" or why it
// could not (strerror); says nothing itself. `durable`: the file and its name are on the disk
// before it returns (fsync of the file and of its directory: a job's record, which a crash of the
// launcher's machine right after the start must not leave empty).
std::string replace_file(const std::string& path, std::string_view text, bool durable = false);

// ---- numbers ----------------------------------------------------------------------------------

// The upper median (of two values the larger; 0 of none): one slow value of two does not make it
// slow. The check's verdicts compare hosts with it.
double upper_median(std::vector<double> values);

// `v` as the integer type `Int`: NaN as 0, and values beyond the type's range at its nearest bound.
// A number another program printed may be anything, and converting it unchecked is undefined.
template <class Int>
Int saturate(double v) {
  if (std::isnan(v)) return 0;
  // The bounds as doubles: the upper one rounds up to 2^63 (or 2^31), itself out of range.
  constexpr double lo = static_cast<double>(std::numeric_limits<Int>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<Int>::max());
  if (v <= lo) return std::numeric_limits<Int>::min();
  if (v >= hi) return std::numeric_limits<Int>::max();
  return static_cast<Int>(v);
}

// ---- descriptors ------------------------------------------------------------------------------

// Notes the descriptors above 2 this process was started with (what its caller left open: a CI
// runner's pipe, a shell's), each with the file it was then: called once, first thing in main.
void note_inherited_fds();
// Closes those still open on the file they were (one closed since whose number was taken again is
// left): a process that outlives its command (the --persist keeper) holds none of its caller's.
void close_inherited_fds();

// ---- signals ----------------------------------------------------------------------------------

// Blocks `signals` (their default actions no longer run; they wait to be read) and returns a
// non-blocking, close-on-exec signalfd that reads them; -1 with the signal mask as it was when no
// signalfd can be made (no descriptor left): a Ctrl-C then ends the launcher, or reaches the
// signalfd made before this one, rather than waiting unread. SIGPIPE is ignored as well: a reader
// gone is a write error, never the launcher's death. A signal ignored when it is called (the
// launcher started under nohup, or with & by a shell without job control) stays ignored.
int signal_fd(std::initializer_list<int> signals);

// The next signal waiting on the signalfd `fd`, or 0 when none is.
int next_signal(int fd);
// The exit status of the next signal waiting on `fd` (128+N, error.h), or 0 when none is.
int signal_status(int fd);

// Whether `fd` (a pipe's or socket's writing end) has no reader left: what a write would meet as
// EPIPE, seen without writing (`logs --follow | head` ends once head has).
bool reader_gone(int fd);

// Whether terminal `fd`'s foreground is another process group than this process's: it runs in
// the background (`&`, `bg`). False when `fd` is no terminal or is no longer this one's.
bool in_background_of(int fd);

// ---- hashing and base64 (OpenSSL's libcrypto) ---------------------------------------------------

std::string sha256_hex(std::string_view data);
// Strict base64 (with padding) to bytes; nullopt for anything else.
std::optional<std::string> decode_base64(std::string_view text);
// SHA-1 in hex: what ssh's %C token is (of %l%h%p%r); never for security.
std::string sha1_hex(std::string_view data);
// The file's SHA-256 in hex, or nullopt with `error` set ("cannot open X: No such file...").
std::optional<std::string> sha256_file(const std::string& path, std::string& error);

// ---- paths --------------------------------------------------------------------------------------

// `path` made absolute against `cwd` (unchanged when it already is, or when `cwd` is empty).
std::string absolute_path(const std::string& path, const std::string& cwd);

// ---- bytes to send ------------------------------------------------------------------------------

// Bytes waiting to go out, in order: copies (append) and views of static storage
// (append_stable: the remote programs' texts, the same for every host), which are never copied.
// Its memory is given back once it is empty. A launcher writes to every host before it sends to
// any, so what waits here is counted once per host at its peak.
class SendQueue {
 public:
  void append(std::string_view data);
  void append_stable(std::string_view data);
  // The next bytes that follow each other in memory: "" when empty.
  std::string_view front() const;
  // Takes `n` bytes (at most front().size()) off the front.
  void consume(size_t n);
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

 private:
  struct Piece {
    std::string owned;        // a copy, read from `at`
    std::string_view stable;  // or a view of static storage (then `owned` is empty)
    size_t at = 0;
  };
  std::vector<Piece> pieces_;
  size_t size_ = 0;
};

// ---- the clock ----------------------------------------------------------------------------------

// Milliseconds of CLOCK_MONOTONIC: every deadline of the launcher is on this clock.
inline double monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

}  // namespace msrun_ssh
