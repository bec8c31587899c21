// Sync: make a directory tree on every host identical to the launcher's before a job starts
// (`--sync`, `msrun-ssh sync`, `check --sync`; docs/sync.md).
//
// Per host, over the job's own channels (Transport::exec), never SFTP: one channel, one program
// (src/remote/sync.sh, then sync.pl with perl, or sync.py with python3 on a host without perl), up
// to three steps on it:
//  1. the manifest: the host walks DEST and prints one JSON line per entry, the marker token it
//     found in DEST/.msrun-sync-id and, when asked to, writes a fresh token of its own there;
//  2. once every host has listed its tree, a request when needed (sync_hosts): read the marker
//     again (for the shared-directory test) and hash the paths the launcher lists; the host
//     answers in one go;
//  3. once every host has answered, on the channel of one host per group of hosts that share
//     DEST, and only where something differs: a stream of records (encode_record) that the
//     program applies; every file is written to a temporary name in its directory and renamed
//     over the target; a final line tells what was done. Every other host gets EOF instead, and
//     its program ends.
//
// Shared directories: every host writes its own fresh random token into the marker during step 1
// (atomically, by rename); once every host has done so, each reads the marker back. Hosts that
// read the same token see the same directory: the group is synced once, through its first host.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "msrun_ssh/options.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

// ---- excludes (gitignore syntax) ----------------------------------------------------------------

// Rules in gitignore syntax, matched against paths relative to the synced directory ("a/b.py",
// '/'-separated, no leading "./"): `*`, `?`, `[...]` within a component, `**` across components,
// a leading or inner `/` anchors to the top, a trailing `/` matches directories only, `!`
// negates, `#` starts a comment, `\#` and `\!` are literal, trailing blanks are dropped unless
// escaped. The last rule that matches wins; a path inside an excluded directory is excluded
// whatever the rules say of it (as git: a negation cannot re-include it).
class IgnoreRules {
 public:
  // Adds one line; returns false when it holds no rule (blank, comment, a lone "!" or "/").
  bool add(std::string_view line);
  // Adds every line of `text`.
  void add_text(std::string_view text);

  // Whether `path` itself is excluded by the rules (its parents not considered).
  bool matches(std::string_view path, bool is_dir) const;
  // Whether `path` is excluded: it, or one of its parent directories.
  bool excluded(std::string_view path, bool is_dir) const;

  size_t size() const { return rules_.size(); }

 private:
  struct Rule {
    std::vector<std::string> parts;  // anchored: the pattern's components ("**" kept)
    std::string name;                // not anchored: matched against the last component
    bool anchored = false;
    bool dir_only = false;
    bool negated = false;
  };
  std::vector<Rule> rules_;
};

// Always left out of a sync, on both sides: "__pycache__/", ".git/", "*.pyc".
inline constexpr const char* kDefaultExcludes[] = {"__pycache__/", ".git/", "*.pyc"};
// The file at the top of the synced directory whose lines are rules.
inline constexpr const char* kIgnoreFile = ".msrunignore";
// Sync's own files in DEST: the marker and the temporary names of files being written. They are
// never listed, compared nor deleted.
inline constexpr const char* kMarkerFile = ".msrun-sync-id";
inline constexpr const char* kTempPrefix = ".msrun-sync.tmp.";

// The default excludes, `first` (launcher_file_rules), the ignore file's rules (when `dir` has
// one), then `extra` (--sync_exclude): a later rule wins, so the ignore file and --sync_exclude can
// bring back what `first` leaves out. Throws InputError when the ignore file exists but cannot be
// read.
IgnoreRules sync_rules(const std::string& dir, const std::vector<std::string>& extra,
                       const std::vector<std::string>& first = {});

// ---- manifests ----------------------------------------------------------------------------------

enum class EntryType : char { kFile = 'f', kDir = 'd', kSymlink = 'l' };

struct Entry {
  EntryType type = EntryType::kFile;
  uint32_t mode = 0;  // permission bits (07777)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string target;  // symlinks: the link's text
  bool operator==(const Entry&) const = default;
};

// Path (relative, '/'-separated) -> entry; sorted, so a directory comes before what it holds.
using Manifest = std::map<std::string, Entry>;

// The launcher's tree: `dir` walked without following symlinks, minus what `rules` exclude and
// sync's own files. Other file types (sockets, fifos, devices) are left out and named in
// `skipped`. Throws InputError when `dir` is not a readable directory, or for a symlink whose
// target is absolute or leads out of `dir` (naming it).
Manifest local_manifest(const std::string& dir, const IgnoreRules& rules,
                        std::vector<std::string>* skipped = nullptr);

// What a host's program printed in step 1.
struct RemoteManifest {
  Manifest entries;       // minus sync's own files and what the rules exclude
  std::string marker;     // the token found in DEST/.msrun-sync-id ("" when none)
  std::string error;      // not empty: the program failed (its "error" line)
  bool complete = false;  // the "end" line came
};

// Parses step 1's JSON lines, up to its first end line ({"t","m","s","n","p","l"} per entry,
// {"marker"}, {"error"}, {"end"}); lines that are not JSON objects are ignored (a login script
// may print), entries with a path that is not relative and inside DEST are dropped, and so is
// what `rules` exclude, and so is an {"error", "p"} line naming a directory they exclude (one the
// host could not list). The usual entry line (plain_entry_line) is read without the JSON parser,
// to the same result (plain_lines = false: with it, for tests and the fuzz target).
RemoteManifest parse_remote_manifest(std::string_view output, const IgnoreRules& rules,
                                     bool plain_lines = true);

// The entry line both host programs print for most entries, {"t": "f" or "d", "m": M, "s": S,
// "n": N, "p": "P"} exactly, with P of printable ASCII that needs no escape: its path and entry as
// the JSON parser would read them. nullopt for any other line.
std::optional<std::pair<std::string, Entry>> plain_entry_line(std::string_view line);

// The answer to the request (step 2): {"marker": TOKEN} and {"h": SHA-256 hex, "p": PATH} lines.
struct RemoteAnswer {
  std::string marker;
  std::map<std::string, std::string> hashes;  // path -> hex ("": the host could not read it)
  bool complete = false;                      // its "end" line came
};
RemoteAnswer parse_remote_answer(std::string_view output);

// ---- the difference -----------------------------------------------------------------------------

enum class RecordType : char {
  kDelete = 'X',   // remove the path (a directory only when empty)
  kDir = 'D',      // create the directory (or keep it), set its mode
  kFile = 'F',     // write the file's bytes (temporary name, rename), set mode and mtime
  kSymlink = 'L',  // create the symlink (replacing what is there)
  kAttrs = 'A',    // set mode and mtime of the file that is there
  kEnd = 'E',      // the stream ended cleanly
};

struct Action {
  RecordType type = RecordType::kFile;
  std::string path;
};

// What one host needs, in the order to apply it: deletions deepest first, then directories
// parents first, then files, symlinks and attribute updates.
struct SyncPlan {
  std::vector<Action> actions;
  std::vector<std::string> to_hash;  // files of equal size but other mtime: compare by content
  size_t files = 0;                  // files and symlinks to write
  uint64_t bytes = 0;                // the files' bytes
  size_t deletions = 0;
  bool up_to_date() const { return actions.empty(); }
};

// The difference between the launcher's tree and a host's. Files of equal size and other mtime
// are decided by content when both hashes are known (`remote_hashes`: the host's SHA-256 of paths
// in to_hash, `local_hashes`: the launcher's), else left in to_hash and counted as differing.
using Hashes = std::map<std::string, std::string>;  // path -> SHA-256 hex
SyncPlan diff_manifests(const Manifest& local, const Manifest& remote,
                        const Hashes* remote_hashes = nullptr,
                        const Hashes* local_hashes = nullptr);

// ---- the record stream --------------------------------------------------------------------------
//
// Every record: a 25-byte header, big-endian: type (1 byte, RecordType), mode (u32), mtime_ns
// (i64), size (u64: the bytes that follow the path), path length (u32); then the path's bytes,
// then `size` bytes of data (a file's content, a symlink's target). kEnd has no path nor data.

inline constexpr size_t kRecordHeaderSize = 25;

std::string encode_record_header(RecordType type, uint32_t mode, int64_t mtime_ns, uint64_t size,
                                 std::string_view path);

// Turns one host's actions into the stream, a piece at a time: files are read as they are sent,
// from DIR; a file whose size changed since the manifest is sent as it is now.
class RecordStream {
 public:
  RecordStream(std::string dir, const Manifest& local, std::vector<Action> actions);
  ~RecordStream();
  RecordStream(const RecordStream&) = delete;
  RecordStream& operator=(const RecordStream&) = delete;

  // Up to about `max` next bytes of the stream ("" once the kEnd record was returned). Throws
  // std::runtime_error when a file cannot be read (naming it).
  std::string next(size_t max);
  bool done() const { return done_; }
  uint64_t data_bytes() const { return data_bytes_; }  // file bytes produced so far
  size_t files() const { return files_; }              // files and symlinks started so far

 private:
  std::string start(const Action& a);

  std::string dir_;
  const Manifest& local_;
  std::vector<Action> actions_;
  size_t next_action_ = 0;
  int fd_ = -1;
  uint64_t left_ = 0;  // bytes of the open file still to send
  std::string path_;   // of the open file
  bool done_ = false;
  uint64_t data_bytes_ = 0;
  size_t files_ = 0;
};

// The last line of step 3: "msrun-sync: done FILES BYTES DELETED".
struct ApplySummary {
  size_t files = 0;
  uint64_t bytes = 0;
  size_t deleted = 0;
};
std::optional<ApplySummary> parse_apply_summary(std::string_view output);

// ---- the commands -------------------------------------------------------------------------------

// The program on DEST (created when missing once something is written there). `token`: written to
// the marker after the walk ("" : nothing is written, as `check` does); kTokenFromStdin: the
// program reads it from its stdin's first line before it does anything (a command that can be
// started ahead and wait: may_start_ahead). The host runs sync.pl with perl when it has perl, else
// sync.py with python3 (`program` limits the choice, for tests).
enum class SyncProgram { kPerlOrPython, kPerl, kPython };
inline constexpr const char* kTokenFromStdin = "-";
std::string sync_command(const std::string& dest, const std::string& token,
                         SyncProgram program = SyncProgram::kPerlOrPython);
// Whether `command` is a sync_command with kTokenFromStdin: it does nothing before its stdin's
// first line, so a kept connection may start it before a command asks for it (mux.h).
bool may_start_ahead(const std::string& command);
// The request (step 2): read the marker again, hash `paths`; one JSON line per path. The program
// tells it from a stream by its first byte, '{'.
std::string manifest_request(const std::vector<std::string>& paths);

// A fresh random token (hex).
std::string new_sync_token();

// ---- on the hosts -------------------------------------------------------------------------------

// What a sync is asked to do: DIR here, DEST per host.
struct SyncSource {
  std::string dir;                 // on the launcher
  std::vector<std::string> dests;  // one per host of the transport
  IgnoreRules rules;
  Manifest local;
};

// One host's outcome.
struct SyncHostResult {
  std::string error;              // not empty: the sync failed on this host (why)
  size_t shared_with = SIZE_MAX;  // the host that wrote for this one (it shares its DEST)
  std::vector<size_t> sharers;    // hosts this one wrote for
  size_t files = 0;               // written (files and symlinks), as the host confirmed
  uint64_t bytes = 0;             // file bytes sent
  size_t deleted = 0;
  size_t differ = 0;  // entries that differ (check: what a sync would change)
};

struct SyncSettings {
  bool apply = true;              // false: compare only (check), nothing is written on the hosts
  double timeout_s = 120;         // no byte from or to a host for that long: it failed
  std::FILE* progress = nullptr;  // a terminal for the redrawn progress line, or nullptr
  // Asked as the sync goes (at least once a second): true ends it there, every host not done
  // failing "interrupted" (a signal to the launcher).
  std::function<bool()> stop;
};

// Syncs `source` to every host of `transport` (0..dests.size()-1) at once (a batch: run it when
// nothing else is open on the transport). One result per host.
std::vector<SyncHostResult> sync_hosts(Transport& transport, const SyncSource& source,
                                       const SyncSettings& settings);

// "sync: HOST: 3 files, 1200 bytes sent, 1 deleted (shared with B, C)", "sync: HOST: up to date",
// "sync: HOST: shared with A", "sync: HOST: failed: WHY" (no newline).
std::string sync_result_line(const std::vector<std::string>& addresses,
                             const std::vector<SyncHostResult>& results, size_t host);

// ---- where ------------------------------------------------------------------------------------

// The synced directory and each host's DEST (docs/sync.md): DIR (relative to `cwd`, else the
// task script's directory) goes to `dest` when given (relative: to each workdir), else to each
// host's workdir joined with DIR's path relative to `cwd` — where the job, which runs in the
// workdir, finds the script as it is named on the command line. Throws InputError when DIR is not
// inside `cwd` and no `dest` is given, or when the task script is absolute and no `dest` given.
struct SyncWhere {
  std::string dir;
  std::vector<std::string> dests;
};
SyncWhere sync_where(const std::string& cwd, const std::string& dir, const std::string& dest,
                     const std::string& task_script, const std::vector<std::string>& workdirs);

// ---- for the commands ---------------------------------------------------------------------------

// The launcher's own files, as rules for a sync of `sync_dir`: every detached job's state
// directory (.msrun-ssh/), and, when --log_dir lies inside `sync_dir`, the logs, summary and
// stack dumps the launcher writes there (msrun-ssh.log, summary.json, scheduler*.log,
// <worker_log_name>_*.log, stacks-*.txt). Neither side's copies are sent, compared or deleted: a
// sync from a project directory that holds the logs (--log_dir's default ".") deleted a detached
// job's logs and state on its hosts, and sent the last run's logs to every host.
std::vector<std::string> launcher_file_rules(const std::string& sync_dir, const Options& options);

// The sync `options` ask for (--sync, `msrun-ssh sync`, `check --sync`) to hosts with these
// workdirs: where (sync_where), the rules (sync_rules) and the launcher's manifest. Warns on
// stderr about each entry of a type that cannot be synced. Throws InputError.
SyncSource make_sync_source(const Options& options, const std::vector<std::string>& workdirs);

// Syncs (sync_hosts; the progress line on stderr when it is a terminal; SyncSettings::stop) and
// prints one sync_result_line per host to `out`. Returns whether every host succeeded.
bool sync_and_report(Transport& transport, const SyncSource& source,
                     const std::vector<std::string>& addresses, std::FILE* out,
                     const std::function<bool()>& stop = nullptr);

}  // namespace msrun_ssh
