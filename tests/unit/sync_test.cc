// Sync (src/sync/, src/remote/sync.pl and sync.py): the gitignore matcher, the launcher's manifest,
// the difference, the record stream — applied by each real host program (sync.pl with the local
// perl, sync.py with the local python3, run as the launcher runs them: through sync.sh) into
// temporary directories, and read back by it —, where a sync goes, and the orchestration over
// ReplyTransport (shared directories written once, one channel per host) and over local processes
// running the real program.
#include "msrun_ssh/sync.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "local_transport.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/check.h"
#include "msrun_ssh/command.h"
#include "remote/programs.h"
#include "reply_transport.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

namespace fs = std::filesystem;
using test::Case;

// ---- the matcher --------------------------------------------------------------------------------

struct IgnoreCase {
  std::vector<std::string> rules;
  std::string path;
  bool is_dir;
  bool excluded;
};

TEST(SyncIgnore, GitignoreSyntax) {
  std::vector<IgnoreCase> cases = {
      {{"*.log"}, "a.log", false, true},
      {{"*.log"}, "deep/er/a.log", false, true},
      {{"*.log"}, "a.logx", false, false},
      {{"/data"}, "data", true, true},
      {{"/data"}, "sub/data", true, false},  // a leading '/' anchors
      {{"data/"}, "data", false, false},     // a trailing '/': directories only
      {{"data/"}, "sub/data", true, true},
      {{"a/*.py"}, "a/x.py", false, true},
      {{"a/*.py"}, "b/a/x.py", false, false},  // an inner '/' anchors too
      {{"a/*.py"}, "a/b/x.py", false, false},  // '*' never crosses '/'
      {{"**/ckpt"}, "x/y/ckpt", true, true},
      {{"**/ckpt"}, "ckpt", true, true},
      {{"a/**/b"}, "a/b", false, true},
      {{"a/**/b"}, "a/x/y/b", false, true},
      {{"a/**"}, "a/x/y", false, true},
      {{"a/**"}, "a", true, false},
      {{"?.txt"}, "a.txt", false, true},
      {{"?.txt"}, "ab.txt", false, false},
      {{"[ab].txt"}, "b.txt", false, true},
      {{"[!ab].txt"}, "b.txt", false, false},
      {{"*.log", "!keep.log"}, "keep.log", false, false},
      {{"!keep.log", "*.log"}, "keep.log", false, true},  // the last match wins
      {{"\\#x"}, "#x", false, true},
      {{"#x"}, "#x", false, false},  // a comment
      {{"\\!x"}, "!x", false, true},
      {{"x\\ "}, "x ", false, true},  // an escaped trailing blank stays
      {{"x  "}, "x", false, true},
      {{"data/", "!data/keep"}, "data/keep", false, true},  // no re-including from an excluded dir
      {{"data/*", "!data/keep"}, "data/keep", false, false},
      {{"data"}, "data/in/file", false, true},  // inside an excluded directory
  };
  for (const auto& c : cases) {
    IgnoreRules r;
    for (const auto& line : c.rules) r.add(line);
    SCOPED_TRACE(testing::PrintToString(c.rules) + " " + c.path);
    EXPECT_EQ(r.excluded(c.path, c.is_dir), c.excluded);
  }
}

TEST(SyncIgnore, LinesWithoutRules) {
  IgnoreRules r;
  for (const char* line : {"", "   ", "# comment", "!", "/"}) EXPECT_FALSE(r.add(line)) << line;
  r.add_text("a\n\n# c\nb/\r\n");
  EXPECT_EQ(r.size(), 2u);
  EXPECT_TRUE(r.excluded("b", true));
}

// ---- the launcher's tree ------------------------------------------------------------------------

class SyncTree : public test::TempDirTest {
 protected:
  std::string src_ = dir_ + "/src";
  std::string dest_ = dir_ + "/dest";

  void SetUp() override {
    fs::create_directories(src_ + "/sub dir/ünï");
    put("train.py", "print('hi')\n");
    put("sub dir/it's \"quoted\".txt", "q\n");
    put("sub dir/ünï/data.bin", std::string(300000, 'x'));
    put("run.sh", "#!/bin/sh\n");
    chmod((src_ + "/run.sh").c_str(), 0755);
    fs::create_symlink("train.py", src_ + "/link.py");
    fs::create_directories(src_ + "/__pycache__");
    put("__pycache__/x.pyc", "c");
    put("ckpt.pt", "big");
  }

  void put(const std::string& rel, const std::string& text) const {
    std::ofstream(src_ + "/" + rel, std::ios::binary) << text;
  }

  Manifest local() const { return local_manifest(src_, sync_rules(src_, {"*.pt"})); }

  // Runs the real program on dest_ (token: written to the marker) with `in` on its stdin; its
  // stdout, and the exit status in `status`.
  std::string run(const std::string& token, const std::string& in, int* status = nullptr) const {
    std::string file = dir_ + "/stdin";
    std::ofstream(file, std::ios::binary) << in;
    return test::shell_output(
        fmt::format("({}) < '{}'", sync_command(dest_, token, program_), file), status);
  }

  // The real program on dest_ given `stream` right after its manifest (as a single host gets
  // it): what it printed after the manifest, and the exit status in `status`.
  std::string apply(const std::string& stream, int* status) const {
    std::string out = run("", stream, status);
    return out.substr(out.find(kEnd) + kEnd.size());
  }

  // The real program on dest_ (token: written to the marker), asked for `hashes`, then EOF.
  std::string manifest(const std::string& token, const std::vector<std::string>& hashes) const {
    return run(token, manifest_request(hashes));
  }

  static constexpr std::string_view kEnd = "{\"end\": true}\n";
  SyncProgram program_ = SyncProgram::kPerlOrPython;

  // Everything a sync of the launcher's tree to dest_ sends: the stream of the difference.
  std::string stream_for(const Manifest& local, const Manifest& remote) const {
    RecordStream s(src_, local, diff_manifests(local, remote).actions);
    std::string out;
    while (!s.done()) out += s.next(4096);
    return out;
  }
};

// The tests that run a host program, once with sync.pl (perl) and once with sync.py (python3).
class SyncProgramTest : public SyncTree, public testing::WithParamInterface<SyncProgram> {
 protected:
  SyncProgramTest() { program_ = GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Both, SyncProgramTest,
                         testing::Values(SyncProgram::kPerl, SyncProgram::kPython),
                         [](const testing::TestParamInfo<SyncProgram>& info) {
                           return info.param == SyncProgram::kPerl ? "Perl" : "Python";
                         });

// A symlink whose text stays inside alone, but leads out through another symlink of the tree
// (`sub/e -> d/../secret` with `sub/d -> ..`): the hosts would read outside DEST. It was synced.
TEST_F(SyncTree, ASymlinkLeadingOutThroughAnotherIsRefused) {
  fs::create_directories(src_ + "/sub");
  fs::create_symlink("..", src_ + "/sub/d");
  fs::create_symlink("d/train.py", src_ + "/sub/in.py");  // d is the top: inside
  fs::create_symlink("loop2", src_ + "/loop1");           // leads nowhere, here as on the hosts
  fs::create_symlink("loop1", src_ + "/loop2");
  fs::create_symlink("/scratch/data", src_ + "/data");      // excluded: the hosts have their own
  fs::create_symlink("data/ckpt", src_ + "/through_data");  // the hosts' own data
  IgnoreRules rules = sync_rules(src_, {"data"});
  EXPECT_NO_THROW(local_manifest(src_, rules));
  fs::create_symlink("d/../secret", src_ + "/sub/e");
  EXPECT_EQ(test::error_of([&] { local_manifest(src_, rules); }),
            "sync: " + src_ +
                "/sub/e is a symlink to d/../secret, which leads outside the tree through the "
                "tree's own symlinks: the hosts cannot have it; exclude it or point it inside");
  fs::remove(src_ + "/sub/e");
  fs::create_symlink("sub/d/sub/d/..", src_ + "/up");
  EXPECT_THAT(test::error_of([&] { local_manifest(src_, rules); }), testing::HasSubstr("/up is"));
}

// A file gone between the listing and its sending (an editor's swap file) fails the sync with a
// message that says what happened and what to do (it said "No such file or directory").
TEST_F(SyncTree, AFileThatVanishesWhileTheSyncRunsSaysSo) {
  Manifest l = local();
  fs::remove(src_ + "/train.py");
  RecordStream s(src_, l, diff_manifests(l, {}).actions);
  std::string why;
  try {
    while (!s.done()) s.next(4096);
  } catch (const std::runtime_error& e) {
    why = e.what();
  }
  EXPECT_EQ(why, "cannot read " + src_ +
                     "/train.py: it vanished while the sync ran (the tree changed meanwhile: sync "
                     "again, or exclude it)");
}

// `--sync_exclude data/` (a directory pattern, as docs/sync.md suggests) with the launcher's
// `data` a symlink to its own storage: excluded here as on the hosts (it was refused: "a symlink
// to an absolute path ... exclude it").
TEST_F(SyncTree, ADirectoryPatternExcludesASymlinkHereAsOnTheHosts) {
  fs::create_symlink("/datasets/x", src_ + "/data");
  fs::create_symlink("sub dir", src_ + "/inside");
  Manifest m;
  ASSERT_NO_THROW(m = local_manifest(src_, sync_rules(src_, {"data/", "inside/"})));
  EXPECT_EQ(m.count("data"), 0u);
  EXPECT_EQ(m.count("inside"), 0u);
  EXPECT_EQ(m.count("train.py"), 1u);
}

TEST_F(SyncTree, LocalManifestKeepsSymlinksAndLeavesOutExcludes) {
  Manifest m = local();
  EXPECT_TRUE(m.count("train.py"));
  EXPECT_EQ(m.at("link.py").type, EntryType::kSymlink);
  EXPECT_EQ(m.at("link.py").target, "train.py");
  EXPECT_EQ(m.at("run.sh").mode, 0755u);
  EXPECT_EQ(m.at("sub dir/ünï/data.bin").size, 300000u);
  EXPECT_FALSE(m.count("__pycache__"));
  EXPECT_FALSE(m.count("__pycache__/x.pyc"));
  EXPECT_FALSE(m.count("ckpt.pt"));
}

TEST_F(SyncTree, IgnoreFileAndOwnFiles) {
  put(".msrunignore", "# data\n/sub dir/\n");
  put(".msrun-sync-id", "token\n");
  put(".msrun-sync.tmp.abc", "half");
  Manifest m = local();
  EXPECT_TRUE(m.count(".msrunignore"));
  EXPECT_FALSE(m.count("sub dir"));
  EXPECT_FALSE(m.count("sub dir/ünï/data.bin"));
  EXPECT_FALSE(m.count(".msrun-sync-id"));
  EXPECT_FALSE(m.count(".msrun-sync.tmp.abc"));
}

TEST_F(SyncTree, SymlinksLeavingTheTreeAreRefused) {
  fs::create_symlink("/etc/passwd", src_ + "/abs");
  EXPECT_NE(
      test::error_of([&] { local(); }).find("abs is a symlink to /etc/passwd, an absolute path"),
      std::string::npos);
  fs::remove(src_ + "/abs");
  fs::create_symlink("../../x", src_ + "/sub dir/up");
  EXPECT_NE(test::error_of([&] { local(); }).find("outside the tree"), std::string::npos);
  fs::remove(src_ + "/sub dir/up");
  fs::create_symlink("../train.py", src_ + "/sub dir/ok");
  EXPECT_EQ(local().at("sub dir/ok").target, "../train.py");
}

// ---- the difference -----------------------------------------------------------------------------

Entry file(uint64_t size, int64_t mtime, uint32_t mode = 0644) {
  return Entry{EntryType::kFile, mode, size, mtime, ""};
}

std::string actions_of(const SyncPlan& p) {
  std::string out;
  for (const auto& a : p.actions) out += fmt::format("{}:{} ", static_cast<char>(a.type), a.path);
  return out;
}

TEST(SyncDiff, NewChangedDeletedAndSymlinks) {
  Entry dir{EntryType::kDir, 0755, 0, 0, ""};
  Manifest local{{"a", dir},
                 {"a/new.py", file(3, 1)},
                 {"a/same.py", file(5, 2)},
                 {"a/size.py", file(6, 3)},
                 {"a/mode.sh", file(7, 4, 0755)},
                 {"link", Entry{EntryType::kSymlink, 0777, 0, 0, "a/same.py"}}};
  Manifest remote{{"a", dir},
                  {"a/same.py", file(5, 2)},
                  {"a/size.py", file(9, 3)},
                  {"a/mode.sh", file(7, 4, 0644)},
                  {"a/old", dir},
                  {"a/old/gone.txt", file(1, 1)},
                  {"link", Entry{EntryType::kSymlink, 0777, 0, 0, "elsewhere"}}};
  SyncPlan p = diff_manifests(local, remote);
  EXPECT_EQ(actions_of(p), "X:a/old/gone.txt X:a/old A:a/mode.sh F:a/new.py F:a/size.py L:link ");
  EXPECT_EQ(p.files, 3u);
  EXPECT_EQ(p.bytes, 9u);
  EXPECT_EQ(p.deletions, 2u);
  EXPECT_TRUE(p.to_hash.empty());
  EXPECT_TRUE(diff_manifests(local, local).up_to_date());
}

TEST(SyncDiff, TypeChangesDeleteFirst) {
  Entry dir{EntryType::kDir, 0755, 0, 0, ""};
  SyncPlan p = diff_manifests({{"x", dir}, {"y", file(1, 1)}},
                              {{"x", file(1, 1)}, {"y", dir}, {"y/in", file(2, 2)}});
  EXPECT_EQ(actions_of(p), "X:y/in X:y X:x D:x F:y ");
}

TEST(SyncDiff, SameSizeOtherMtimeIsDecidedByContent) {
  Manifest local{{"a", file(4, 10)}, {"b", file(4, 10)}, {"c", file(4, 10)}};
  Manifest remote{{"a", file(4, 20)}, {"b", file(4, 20)}, {"c", file(4, 20)}};
  SyncPlan first = diff_manifests(local, remote);
  EXPECT_EQ(first.to_hash, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(first.up_to_date());
  Hashes mine{{"a", "11"}, {"b", "22"}, {"c", "33"}};
  Hashes theirs{{"a", "11"}, {"b", "99"}, {"c", ""}};  // c: the host could not read it
  SyncPlan p = diff_manifests(local, remote, &theirs, &mine);
  EXPECT_EQ(actions_of(p), "A:a F:b F:c ");
}

// ---- the record stream and the programs on the host ---------------------------------------------

TEST(SyncManifest, LinesWithFieldsOfTheWrongTypeAreIgnored) {
  // A host's answer with {"t": 3} made the parser throw out of the launcher (host_answers_fuzz).
  std::string out =
      "{\"marker\": \"tok\"}\n"
      "{\"t\": 3, \"n\": 1, \"p\": \"bad.py\"}\n"
      "{\"t\": \"f\", \"m\": \"rw\", \"s\": 1, \"n\": 1, \"p\": \"bad2.py\"}\n"
      "{\"t\": \"f\", \"m\": 4.2e+36, \"s\": 1, \"n\": 1, \"p\": \"bad3.py\"}\n"
      "{\"t\": \"f\", \"m\": 420, \"s\": 1.5, \"n\": 1, \"p\": \"bad4.py\"}\n"
      "{\"t\": \"f\", \"m\": 420, \"s\": 3, \"n\": 1, \"p\": \"good.py\"}\n"
      "{\"end\": 1}\n";
  RemoteManifest r = parse_remote_manifest(out, IgnoreRules());
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.marker, "tok");
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.entries.at("good.py").size, 3u);
  RemoteAnswer a = parse_remote_answer("{\"h\": 5, \"p\": \"x\"}\n{\"end\": 1}\n");
  EXPECT_TRUE(a.complete);
  EXPECT_TRUE(a.hashes.empty());
}

// The usual entry line is read without the JSON parser, to the same result; every near miss goes
// to the JSON parser, which reads it or leaves it out as before.
TEST(SyncManifest, PlainEntryLinesReadAsTheJsonParserReadsThem) {
  auto plain = plain_entry_line(
      R"({"t": "f", "m": 33188, "s": 51200, "n": 1700000000123456789, "p": "d1/f 1.py"})");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->first, "d1/f 1.py");
  EXPECT_EQ(plain->second, (Entry{EntryType::kFile, 0644, 51200, 1700000000123456789, ""}));
  plain = plain_entry_line(R"({"t": "d", "m": 493, "s": 4096, "n": -5, "p": "d1"})");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->second, (Entry{EntryType::kDir, 0755, 0, -5, ""}));
  const std::vector<std::string> lines = {
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "a"})",
      R"({"t": "d", "m": 493, "s": 0, "n": 0, "p": "dir"})",
      R"({"t": "f", "m": 0420, "s": 3, "n": 7, "p": "zero"})",
      R"({"t": "f", "m": 420, "s": 3, "n": -0, "p": "minus-zero"})",
      R"({"t": "f", "m": 420, "s": 3.0, "n": 7, "p": "fraction"})",
      R"({"t": "f", "m": 420, "s": 3e2, "n": 7, "p": "exponent"})",
      R"({"t": "f", "m": 420, "s": -3, "n": 7, "p": "negative-size"})",
      R"({"t": "d", "m": 420, "s": -3, "n": 7, "p": "dir-negative-size"})",
      R"({"t": "f", "m": 4294967716, "s": 3, "n": 7, "p": "big-mode"})",
      R"({"t": "f", "m": 420, "s": 18446744073709551616, "n": 7, "p": "big-size"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 9223372036854775808, "p": "big-mtime"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "q"uote"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "back\slash"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "ün"})",
      "{\"t\": \"f\", \"m\": 420, \"s\": 3, \"n\": 7, \"p\": \"\xc3\xbcn\"}",
      "{\"t\": \"f\", \"m\": 420, \"s\": 3, \"n\": 7, \"p\": \"bad\xff\"}",
      R"({"t": "l", "m": 511, "s": 1, "n": 7, "p": "link", "l": "a"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "a", "x": 1})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "../up"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "__pycache__/x"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": ".msrun-sync-id"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "trailing"} )",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": "x"}{"t": "f"})",
      R"({"t": "f", "m": 420, "s": 3, "n": 7, "p": ""})",
      R"({"t": "x", "m": 420, "s": 3, "n": 7, "p": "type"})",
  };
  IgnoreRules rules = sync_rules("/nonexistent", {});
  size_t read_plain = 0;
  for (const std::string& line : lines) {
    RemoteManifest fast = parse_remote_manifest(line + "\n", rules);
    RemoteManifest json = parse_remote_manifest(line + "\n", rules, false);
    EXPECT_EQ(fast.entries, json.entries) << line;
    read_plain += plain_entry_line(line).has_value();
  }
  // a, dir, ../up, __pycache__/x, .msrun-sync-id and "" (the last four then left out); the rest
  // goes to the JSON parser
  EXPECT_EQ(read_plain, 6u);
  std::string all;
  for (const std::string& line : lines) all += line + "\n";
  EXPECT_EQ(parse_remote_manifest(all, rules).entries,
            parse_remote_manifest(all, rules, false).entries);
  EXPECT_EQ(parse_remote_manifest(all, rules).entries.size(), 10u);
}

TEST(SyncStream, HeaderLayout) {
  std::string h = encode_record_header(RecordType::kFile, 0755, 0x0102030405060708, 5, "ab");
  ASSERT_EQ(h.size(), kRecordHeaderSize + 2);
  EXPECT_EQ(h.substr(0, 5), std::string("F\0\0\x01\xed", 5));
  EXPECT_EQ(h.substr(5, 8), "\x01\x02\x03\x04\x05\x06\x07\x08");
  EXPECT_EQ(h.substr(13, 8), std::string("\0\0\0\0\0\0\0\x05", 8));
  EXPECT_EQ(h.substr(21), std::string("\0\0\0\x02"
                                      "ab",
                                      6));
}

TEST_P(SyncProgramTest, ApplyWritesTheTreeAndTheManifestReadsItBack) {
  Manifest l = local();
  int status = -1;
  std::string out = apply(stream_for(l, {}), &status);
  EXPECT_EQ(status, 0) << out;
  auto summary = parse_apply_summary(out);
  ASSERT_TRUE(summary) << out;
  EXPECT_EQ(summary->files, 5u);  // 4 files and the symlink
  EXPECT_EQ(summary->bytes, 300000u + 12 + 2 + 10);
  EXPECT_EQ(test::slurp(dest_ + "/sub dir/it's \"quoted\".txt"), "q\n");
  EXPECT_EQ(fs::read_symlink(dest_ + "/link.py"), "train.py");
  struct stat st {};
  ASSERT_EQ(stat((dest_ + "/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_FALSE(fs::exists(dest_ + "/ckpt.pt"));

  // Read back by the program: nothing differs any more, and the marker is written.
  RemoteManifest r =
      parse_remote_manifest(manifest("tok1", {"train.py"}), sync_rules(src_, {"*.pt"}));
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.marker, "");
  EXPECT_TRUE(diff_manifests(l, r.entries).up_to_date())
      << actions_of(diff_manifests(l, r.entries));
  std::string again = manifest("", {"train.py"});
  EXPECT_EQ(parse_remote_manifest(again, IgnoreRules()).marker, "tok1");
  RemoteAnswer a = parse_remote_answer(again.substr(again.find("{\"end\": true}") + 14));
  EXPECT_TRUE(a.complete);
  EXPECT_EQ(a.marker, "tok1");
  EXPECT_EQ(a.hashes.at("train.py"), sha256_hex("print('hi')\n"));
}

// The launcher's own files are never synced: the next sync of a project directory holding the
// logs (--log_dir's default ".") deleted a detached job's logs and state on its hosts (only there),
// and sent the last attached run's logs to every host.
TEST(SyncManifest, TheLaunchersOwnFilesAreLeftOutOnBothSides) {
  Options o;
  o.launcher_cwd = "/proj";
  auto rules_for = [&](const std::string& log_dir, const std::string& worker_log_name) {
    o.log_dir = log_dir;
    o.worker_log_name = worker_log_name;
    return sync_rules("/nonexistent", {}, launcher_file_rules("/proj", o));
  };
  IgnoreRules top = rules_for(".", "worker");
  for (const char* p : {"msrun-ssh.log", "summary.json", "scheduler.log", "scheduler.attempt2.log",
                        "worker_0.log", "worker_12.attempt1.log", "stacks-20261207-101010.txt",
                        ".msrun-ssh/j1/0.pid", "sub/.msrun-ssh/j1/sched.exit"})
    EXPECT_TRUE(top.excluded(p, false)) << p;
  for (const char* p :
       {"train.py", "sub/worker_0.log", "sub/msrun-ssh.log", "my_worker_0.log", "worker.log"})
    EXPECT_FALSE(top.excluded(p, false)) << p;
  // Hosts list them: they are neither compared nor deleted there.
  RemoteManifest r = parse_remote_manifest(
      "{\"t\": \"f\", \"m\": 384, \"s\": 3, \"n\": 1, \"p\": \"worker_3.log\"}\n"
      "{\"t\": \"d\", \"m\": 448, \"s\": 0, \"n\": 1, \"p\": \".msrun-ssh\"}\n"
      "{\"t\": \"f\", \"m\": 420, \"s\": 3, \"n\": 1, \"p\": \"old.py\"}\n"
      "{\"end\": true}\n",
      top);
  SyncPlan d = diff_manifests({}, r.entries);
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0].path, "old.py");

  IgnoreRules sub = rules_for("logs[1]", "w_{ip}");
  EXPECT_TRUE(sub.excluded("logs[1]/w_198.18.0.1_0.log", false));
  EXPECT_TRUE(sub.excluded("logs[1]/msrun-ssh.log", false));
  EXPECT_FALSE(sub.excluded("logs1/msrun-ssh.log", false));
  EXPECT_FALSE(sub.excluded("msrun-ssh.log", false));
  // A log directory outside the synced one: only the detached jobs' state directories.
  IgnoreRules outside = rules_for("/var/log/job", "worker");
  EXPECT_FALSE(outside.excluded("worker_0.log", false));
  EXPECT_TRUE(outside.excluded(".msrun-ssh", true));
  EXPECT_EQ(rules_for("../logs", "worker").excluded("msrun-ssh.log", false), false);
  // A project's own summary.json comes back with a rule after them (.msrunignore, --sync_exclude).
  o.log_dir = ".";
  EXPECT_FALSE(sync_rules("/nonexistent", {"!/summary.json"}, launcher_file_rules("/proj", o))
                   .excluded("summary.json", false));
}

// `--sync_exclude data/` on a launcher whose data is a directory, and hosts where `data` is a
// symlink to node-local storage: the hosts' link is excluded too, so it is neither deleted nor
// compared (the dir-only pattern missed it, and the sync deleted it).
TEST(SyncManifest, AHostsSymlinkIsExcludedByADirectoryPattern) {
  IgnoreRules rules = sync_rules("/nonexistent", {"data/", "*.log"});
  RemoteManifest r = parse_remote_manifest(
      "{\"t\": \"l\", \"m\": 511, \"s\": 13, \"n\": 1, \"p\": \"data\", \"l\": "
      "\"/scratch/data\"}\n"
      "{\"t\": \"f\", \"m\": 420, \"s\": 3, \"n\": 1, \"p\": \"datafile\"}\n"
      "{\"t\": \"l\", \"m\": 511, \"s\": 1, \"n\": 1, \"p\": \"link\", \"l\": \"x\"}\n"
      "{\"end\": true}\n",
      rules);
  EXPECT_EQ(r.entries.count("data"), 0u);
  EXPECT_EQ(r.entries.count("datafile"), 1u);
  EXPECT_EQ(r.entries.count("link"), 1u);
  SyncPlan d = diff_manifests({}, r.entries);
  for (const auto& a : d.actions) EXPECT_NE(a.path, "data");
}

// A host that cannot list a directory names it; the launcher passes over it where the rules
// exclude that directory (nothing there is sent or deleted), and fails the host elsewhere.
TEST(SyncManifest, AnUnlistableDirectoryIsAnErrorOnlyWhereItIsNotExcluded) {
  IgnoreRules rules = sync_rules("/nonexistent", {"data/"});
  auto error_of = [&](const std::string& path) {
    return parse_remote_manifest("{\"error\": \"cannot list /w/" + path +
                                     ": Permission denied\", \"p\": \"" + path +
                                     "\"}\n"
                                     "{\"end\": true}\n",
                                 rules)
        .error;
  };
  EXPECT_EQ(error_of("data"), "");
  EXPECT_EQ(error_of("sub/__pycache__"), "");  // excluded by default
  EXPECT_EQ(error_of("src"), "cannot list /w/src: Permission denied");
  EXPECT_EQ(error_of("../data"), "cannot list /w/../data: Permission denied");
  EXPECT_EQ(
      parse_remote_manifest("{\"error\": \"cannot list /w: Permission denied\"}\n", rules).error,
      "cannot list /w: Permission denied");
}

// Hosts that share DEST (an NFS home) list it at once, each writing its marker by rename through
// a temporary file of its own: one saw another's temporary file, which was gone when it looked
// at it, and failed ("No such file or directory"). Sixteen of them list one directory,
// ten times (twice with python3, whose start is slow).
TEST_P(SyncProgramTest, HostsListingASharedDirectoryAtOnceDoNotFail) {
  fs::create_directories(dest_ + "/__pycache__");
  for (int i = 0; i < 20; ++i) std::ofstream(dest_ + fmt::format("/f{}.py", i)) << i;
  std::string in = dir_ + "/request";
  std::ofstream(in, std::ios::binary) << manifest_request({});
  std::string script;
  for (int i = 0; i < 16; ++i)
    script += fmt::format("({}) < '{}' > '{}/out{}' 2>&1 &\n",
                          sync_command(dest_, fmt::format("tok{}", i), program_), in, dir_, i);
  script += "wait\n";
  std::ofstream(dir_ + "/hosts.sh") << script;  // more than one exec's arguments may carry
  const int rounds = program_ == SyncProgram::kPerl ? 10 : 2;  // python3 starts slowly
  for (int round = 0; round < rounds; ++round) {
    test::shell_output(fmt::format("sh '{}/hosts.sh'", dir_));
    for (int i = 0; i < 16; ++i) {
      std::string out = test::slurp(fmt::format("{}/out{}", dir_, i));
      RemoteManifest r = parse_remote_manifest(out, IgnoreRules());
      ASSERT_TRUE(r.complete) << out;
      ASSERT_EQ(r.error, "") << "round " << round << ", host " << i;
      ASSERT_EQ(r.entries.size(), 21u) << out;  // the files and __pycache__
    }
  }
}

// A package made a module (a directory replaced by a file) on hosts where runs left Python's
// caches in it (__pycache__/, *.pyc: left out of every sync, never deleted one by one): the caches
// go with the directory (the file's rename failed with "Is a directory", and every later sync
// too). Other files the sync leaves out stop it, said as such.
TEST_P(SyncProgramTest, ADirectoryReplacedByAFileTakesItsPythonCachesAlong) {
  fs::create_directories(dest_ + "/pkg/__pycache__");
  std::ofstream(dest_ + "/pkg/a.py") << "a\n";
  std::ofstream(dest_ + "/pkg/__pycache__/a.cpython-311.pyc") << "c";
  std::ofstream(dest_ + "/pkg/old.pyc") << "c";
  const std::string end = encode_record_header(RecordType::kEnd, 0, 0, 0, "");
  auto replace = [&](const std::string& dir) {
    return encode_record_header(RecordType::kDelete, 0, 0, 0, dir + "/a.py") +
           encode_record_header(RecordType::kDelete, 0, 0, 0, dir) +
           encode_record_header(RecordType::kFile, 0644, 0, 2, dir) + "m\n" + end;
  };
  int status = -1;
  std::string out = apply(replace("pkg"), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(test::slurp(dest_ + "/pkg"), "m\n");
  fs::create_directories(dest_ + "/data/ckpt");
  std::ofstream(dest_ + "/data/a.py") << "a\n";
  std::ofstream(dest_ + "/data/ckpt/w.pt") << "weights";
  out = apply(replace("data"), &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find(dest_ + "/data: a directory holding files the sync leaves out is in the way"),
            std::string::npos)
      << out;
  EXPECT_EQ(test::slurp(dest_ + "/data/ckpt/w.pt"), "weights");
}

// A destination the host may not write (code mounted read-only on the compute nodes) is listed
// without error, so a sync with nothing to change there succeeds (the marker's write failed it);
// a destination that is a file says so (the marker's "Not a directory" took that error's place).
TEST_P(SyncProgramTest, AnUnwritableDestinationIsListedAndAFileDestinationNamed) {
  fs::create_directories(dest_);
  std::ofstream(dest_ + "/train.py") << "x\n";
  ASSERT_EQ(::chmod(dest_.c_str(), 0555), 0);
  std::string as_user;
  if (::geteuid() == 0) {
    if (test::shell_output("command -v setpriv").empty()) GTEST_SKIP() << "no setpriv";
    ASSERT_EQ(::chmod(dir_.c_str(), 0711), 0);
    as_user = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  }
  std::ofstream(dir_ + "/stdin", std::ios::binary) << manifest_request({});
  std::string out =
      test::shell_output(fmt::format("{}/bin/sh -c {} < '{}/stdin'", as_user,
                                     shell_quote(sync_command(dest_, "tok", program_)), dir_));
  RemoteManifest r = parse_remote_manifest(out, IgnoreRules());
  EXPECT_TRUE(r.complete) << out;
  EXPECT_EQ(r.error, "") << out;
  EXPECT_EQ(r.entries.count("train.py"), 1u) << out;
  for (const auto& e : fs::directory_iterator(dest_))
    EXPECT_EQ(e.path().filename().string().find(".msrun-sync-id"), std::string::npos) << e.path();
  ASSERT_EQ(::chmod(dest_.c_str(), 0755), 0);
  fs::remove_all(dest_);
  std::ofstream(dest_) << "a file\n";
  r = parse_remote_manifest(manifest("tok", {}), IgnoreRules());
  EXPECT_EQ(r.error, dest_ + " is not a directory");
}

// A directory whose mode keeps its owner out (0555) gets that mode once the stream has filled it:
// a user (not root, whom modes do not stop) could not sync a tree holding one, the file after
// its directory refused, and no later sync could either. Run as nobody when the tests are root.
TEST_P(SyncProgramTest, AReadOnlyDirectoryIsFilledAndKeepsItsMode) {
  fs::create_directories(dest_);
  std::string as_user;
  if (::geteuid() == 0) {
    if (test::shell_output("command -v setpriv").empty()) GTEST_SKIP() << "no setpriv";
    ASSERT_EQ(::chmod(dir_.c_str(), 0711), 0);
    ASSERT_EQ(::chown(dest_.c_str(), 65534, 65534), 0);
    as_user = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  }
  auto sync = [&](const std::string& stream) {
    std::ofstream(dir_ + "/stdin", std::ios::binary) << stream;
    int status = -1;
    std::string out =
        test::shell_output(fmt::format("{}/bin/sh -c {} < '{}/stdin'", as_user,
                                       shell_quote(sync_command(dest_, "", program_)), dir_),
                           &status);
    return std::pair{status, out.substr(out.find(kEnd) + kEnd.size())};
  };
  auto mode_of = [](const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 01000000u;
  };
  const std::string end = encode_record_header(RecordType::kEnd, 0, 0, 0, "");
  auto [status, out] =
      sync(encode_record_header(RecordType::kDir, 0555, 0, 0, "ro") +
           encode_record_header(RecordType::kDir, 0555, 0, 0, "ro/sub") +
           encode_record_header(RecordType::kFile, 0444, 0, 2, "ro/sub/a.py") + "a\n" + end);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "msrun-sync: done 1 2 0\n");
  EXPECT_EQ(test::slurp(dest_ + "/ro/sub/a.py"), "a\n");
  EXPECT_EQ(mode_of(dest_ + "/ro"), 0555u);
  EXPECT_EQ(mode_of(dest_ + "/ro/sub"), 0555u);
  // A later sync writes and deletes in it, its mode as it was (no D record comes again).
  std::tie(status, out) =
      sync(encode_record_header(RecordType::kFile, 0444, 0, 2, "ro/sub/b.py") + "b\n" +
           encode_record_header(RecordType::kDelete, 0, 0, 0, "ro/sub/a.py") + end);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "msrun-sync: done 1 2 1\n");
  EXPECT_TRUE(fs::exists(dest_ + "/ro/sub/b.py"));
  EXPECT_FALSE(fs::exists(dest_ + "/ro/sub/a.py"));
  EXPECT_EQ(mode_of(dest_ + "/ro/sub"), 0555u);
  // The temporary directory goes with the test.
  for (const char* d : {"/ro/sub", "/ro"}) ::chmod((dest_ + d).c_str(), 0755);
}

TEST_P(SyncProgramTest, ApplyDeletesButKeepsWhatIsExcluded) {
  fs::create_directories(dest_ + "/old/ckpt");
  std::ofstream(dest_ + "/old/ckpt/w.pt") << "w";
  std::ofstream(dest_ + "/stale.py") << "s";
  IgnoreRules rules = sync_rules(src_, {"*.pt"});
  RemoteManifest r = parse_remote_manifest(manifest("", {}), rules);
  EXPECT_FALSE(r.entries.count("old/ckpt/w.pt"));
  int status = -1;
  std::string out = apply(stream_for(local(), r.entries), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(parse_apply_summary(out)->deleted, 1u);  // stale.py; old/ckpt keeps w.pt, so old stays
  EXPECT_FALSE(fs::exists(dest_ + "/stale.py"));
  EXPECT_TRUE(fs::exists(dest_ + "/old/ckpt/w.pt"));
}

TEST_P(SyncProgramTest, ApplyRefusesPathsThatLeaveTheDirectory) {
  for (const std::string& path :
       std::vector<std::string>{"../evil", "/abs", "a/../../evil", "./x", std::string("a\0b", 3)}) {
    std::string stream = encode_record_header(RecordType::kFile, 0644, 0, 1, path) + "x" +
                         encode_record_header(RecordType::kEnd, 0, 0, 0, "");
    int status = -1;
    std::string out = apply(stream, &status);
    EXPECT_NE(out.find("msrun-sync: error: refused path"), std::string::npos) << out;
    EXPECT_NE(status, 0);
  }
  EXPECT_FALSE(fs::exists(dir_ + "/evil"));
  // A symlink on the host is never followed into.
  fs::create_directories(dest_);
  fs::create_symlink(dir_, dest_ + "/through");
  int status = -1;
  std::string out =
      apply(encode_record_header(RecordType::kFile, 0644, 0, 1, "through/evil") + "x", &status);
  EXPECT_NE(out.find("is not a directory"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_ + "/evil"));
  out = apply(encode_record_header(RecordType::kSymlink, 0, 0, 6, "l") + "../../", &status);
  EXPECT_NE(out.find("refused symlink"), std::string::npos) << out;
}

TEST_P(SyncProgramTest, AnInterruptedStreamLeavesNoPartialFileAndTheNextRunCompletes) {
  Manifest l = local();
  std::string stream = stream_for(l, {});
  size_t cut = stream.find(std::string(1000, 'x'));  // inside data.bin
  ASSERT_NE(cut, std::string::npos);
  int status = -1;
  std::string out = apply(stream.substr(0, cut + 1000), &status);
  EXPECT_NE(out.find("msrun-sync: interrupted"), std::string::npos) << out;
  EXPECT_NE(status, 0);
  EXPECT_FALSE(fs::exists(dest_ + "/sub dir/ünï/data.bin"));
  for (const auto& e : fs::recursive_directory_iterator(dest_))
    EXPECT_EQ(e.path().filename().string().find(kTempPrefix), std::string::npos) << e.path();
  RemoteManifest r = parse_remote_manifest(manifest("t", {}), IgnoreRules());
  out = apply(stream_for(l, r.entries), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(test::slurp(dest_ + "/sub dir/ünï/data.bin").size(), 300000u);
  r = parse_remote_manifest(manifest("", {}), sync_rules(src_, {"*.pt"}));
  EXPECT_TRUE(diff_manifests(l, r.entries).up_to_date());
}

// A write the file system cuts short (a disk filling up; here a file size limit of 100 KiB) fails
// the sync, and no cut file takes the real name (sync.py counted a short write whole, renamed a
// 100 KiB data.bin into place and said done).
TEST_P(SyncProgramTest, AWriteCutShortFailsTheSyncAndLeavesNoCutFile) {
  std::string stream = stream_for(local(), {});
  std::string file = dir_ + "/stdin";
  std::ofstream(file, std::ios::binary) << stream;
  int status = -1;
  std::string out = test::shell_output(fmt::format("(trap '' XFSZ; ulimit -f 200; {}) < '{}' 2>&1",
                                                   sync_command(dest_, "", program_), file),
                                       &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_FALSE(fs::exists(dest_ + "/sub dir/ünï/data.bin")) << out;
  EXPECT_EQ(out.find("msrun-sync: done"), std::string::npos) << out;
}

TEST_P(SyncProgramTest, AStaleTemporaryFileIsRemovedByTheNextManifest) {
  fs::create_directories(dest_ + "/d");
  std::ofstream(dest_ + "/d/.msrun-sync.tmp.0123") << "half";
  manifest("", {});
  EXPECT_TRUE(fs::exists(dest_ + "/d/.msrun-sync.tmp.0123"));  // check's reading writes nothing
  manifest("tok", {});
  EXPECT_FALSE(fs::exists(dest_ + "/d/.msrun-sync.tmp.0123"));
}

TEST_P(SyncProgramTest, OneProgramListsAnswersThenApplies) {
  Manifest l = local();
  std::string request = manifest_request({"train.py"});
  int status = -1;
  std::string out = run("tok", request + stream_for(l, {}), &status);
  EXPECT_EQ(status, 0) << out;
  // The manifest (DEST is new: no entry, no marker), the answer, then the apply step's line.
  size_t first = out.find(kEnd), second = out.find(kEnd, first + kEnd.size());
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_EQ(out.substr(0, first + kEnd.size()), "{\"marker\": \"\"}\n{\"end\": true}\n");
  RemoteAnswer a = parse_remote_answer(out.substr(first + kEnd.size(), second - first));
  EXPECT_TRUE(a.complete);
  EXPECT_EQ(a.marker, "tok");
  EXPECT_EQ(a.hashes.at("train.py"), "");  // not there yet
  EXPECT_EQ(out.substr(second + kEnd.size()), "msrun-sync: done 5 300024 0\n");
  EXPECT_EQ(test::slurp(dest_ + "/train.py"), "print('hi')\n");
  for (const auto& e : fs::recursive_directory_iterator(dest_))
    EXPECT_EQ(e.path().filename().string().find(kTempPrefix), std::string::npos) << e.path();
  // EOF where the request or the stream could begin: it ends at once, quietly, writing nothing.
  fs::remove(dest_ + "/train.py");
  for (const std::string& in : {std::string(), request}) {
    out = run("", in, &status);
    EXPECT_EQ(status, 0) << out;
    EXPECT_TRUE(out.ends_with(kEnd)) << out;
    EXPECT_FALSE(fs::exists(dest_ + "/train.py"));
  }
}

// Odd names (not UTF-8; a newline, a quote and a backslash) and mtimes to the nanosecond, before
// 1970 too, go there and come back exactly as sent: the launcher compares mtimes to the ns.
TEST_P(SyncProgramTest, NamesAndNanosecondMtimesComeBackExactly) {
  const std::string odd = "\xff\xfe name", quoted = "a\n\"\\b";
  const int64_t late = 1700000000123456789, early = -1500000001;
  std::string stream = encode_record_header(RecordType::kDir, 0750, 0, 0, "d") +
                       encode_record_header(RecordType::kFile, 0640, late, 3, "d/" + odd) + "abc" +
                       encode_record_header(RecordType::kFile, 0600, early, 1, quoted) + "q" +
                       encode_record_header(RecordType::kSymlink, 0, 0, 3, "d/l") + "t\xff\xfe" +
                       encode_record_header(RecordType::kEnd, 0, 0, 0, "");
  int status = -1;
  std::string out = apply(stream, &status);
  EXPECT_EQ(out, "msrun-sync: done 3 4 0\n");
  EXPECT_EQ(status, 0);
  RemoteManifest r = parse_remote_manifest(manifest("", {"d/" + odd}), IgnoreRules());
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.entries.size(), 4u) << out;
  EXPECT_EQ(r.entries["d"].type, EntryType::kDir);
  EXPECT_EQ(r.entries["d"].mode, 0750u);
  EXPECT_EQ(r.entries["d/" + odd], (Entry{EntryType::kFile, 0640, 3, late, ""}));
  EXPECT_EQ(r.entries[quoted], (Entry{EntryType::kFile, 0600, 1, early, ""}));
  EXPECT_EQ(r.entries["d/l"].type, EntryType::kSymlink);
  EXPECT_EQ(r.entries["d/l"].target, "t\xff\xfe");
  std::string again = manifest("", {"d/" + odd});
  RemoteAnswer a = parse_remote_answer(again.substr(again.find(kEnd) + kEnd.size()));
  EXPECT_EQ(a.hashes.at("d/" + odd), sha256_hex("abc"));
}

// Runs sync.pl with each `edits` pair (text, replacement) made to it, through sync.sh, on dest_
// with `in` on its stdin: its output, and the exit status in `status`.
std::string run_edited_perl(const std::string& dir, const std::string& dest,
                            const std::vector<std::pair<std::string, std::string>>& edits,
                            const std::string& in, int* status) {
  std::string program(remote::kSyncPl);
  for (const auto& [text, replacement] : edits) {
    size_t at = program.find(text);
    if (at == std::string::npos) {
      ADD_FAILURE() << "sync.pl has no " << text;
      return "";
    }
    program.replace(at, text.size(), replacement);
  }
  std::ofstream(dir + "/stdin", std::ios::binary) << in;
  return test::shell_output(fmt::format("{} < '{}'/stdin",
                                        shell_join({"/bin/sh", "-c", std::string(remote::kSyncSh),
                                                    "msrun-ssh-sync", program, "", dest, ""}),
                                        dir),
                            status);
}

// On an architecture without the system call table, sync.pl keeps mtimes through Time::HiRes: the
// copies are right and the mtimes a few nanoseconds off at most (the launcher then compares such
// files by hash: SyncDiff.SameSizeOtherMtimeIsDecidedByContent); before 1970, to the second.
TEST_F(SyncTree, PerlWithoutTheSystemCallsCopiesRightAndKeepsMtimesToAMicrosecond) {
  const std::vector<std::pair<std::string, std::string>> no_calls = {{"$^O eq 'linux'", "0"}};
  Manifest l = local();
  int status = -1;
  std::string out = run_edited_perl(dir_, dest_, no_calls, stream_for(l, {}), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("msrun-sync: done 5 300024 0"), std::string::npos) << out;
  EXPECT_EQ(test::slurp(dest_ + "/sub dir/ünï/data.bin"), std::string(300000, 'x'));
  out = run_edited_perl(dir_, dest_, no_calls,
                        encode_record_header(RecordType::kFile, 0600, -1500000001, 1, "early") +
                            "e" + encode_record_header(RecordType::kEnd, 0, 0, 0, ""),
                        &status);
  EXPECT_EQ(status, 0) << out;
  RemoteManifest r = parse_remote_manifest(run_edited_perl(dir_, dest_, no_calls, "", &status),
                                           sync_rules(src_, {"*.pt"}));
  ASSERT_TRUE(r.complete);
  ASSERT_EQ(r.entries.size(), l.size() + 1);
  for (const auto& [path, e] : l) {
    const Entry& got = r.entries.at(path);
    EXPECT_EQ(got.size, e.size) << path;
    EXPECT_EQ(got.mode, e.mode) << path;
    if (e.type == EntryType::kFile) {
      EXPECT_LE(std::abs(got.mtime_ns - e.mtime_ns), 1000) << path;
    }
  }
  EXPECT_EQ(r.entries.at("early").mtime_ns, -2000000000);
}

// perl-base (Debian's and Ubuntu's essential perl, all a minimal host may have) has neither
// Digest::SHA nor Time::HiRes: a host asked for a hash hashes with coreutils' sha256sum (it died
// with no answer), and one without the system call table keeps whole-second mtimes (it died at
// its start). Here the modules' names are changed to ones that do not exist.
TEST_F(SyncTree, PerlWithoutItsNonEssentialModulesStillSyncsAndHashes) {
  const std::vector<std::pair<std::string, std::string>> no_sha = {
      {"require Digest::SHA", "require Digest::NoSuchModule"}};
  fs::create_directories(dest_);
  std::ofstream(dest_ + "/back\\slash.py", std::ios::binary) << "print('hi')\n";
  int status = -1;
  std::string out = run_edited_perl(dir_, dest_, no_sha,
                                    manifest_request({"back\\slash.py", "missing"}), &status);
  EXPECT_EQ(status, 0) << out;
  RemoteAnswer a = parse_remote_answer(out.substr(out.find(kEnd) + kEnd.size()));
  EXPECT_TRUE(a.complete) << out;
  EXPECT_EQ(a.hashes["back\\slash.py"], sha256_hex("print('hi')\n")) << out;
  EXPECT_EQ(a.hashes["missing"], "") << out;

  const std::vector<std::pair<std::string, std::string>> no_hires = {
      {"$^O eq 'linux'", "0"}, {"require Time::HiRes", "require Time::NoSuchModule"}};
  Manifest l = local();
  out = run_edited_perl(dir_, dest_, no_hires, stream_for(l, {}), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("msrun-sync: done 5 300024 0"), std::string::npos) << out;
  EXPECT_EQ(test::slurp(dest_ + "/sub dir/ünï/data.bin"), std::string(300000, 'x'));
  RemoteManifest r = parse_remote_manifest(run_edited_perl(dir_, dest_, no_hires, "", &status),
                                           sync_rules(src_, {"*.pt"}));
  ASSERT_TRUE(r.complete);
  for (const auto& [path, e] : l)
    if (e.type == EntryType::kFile) {
      EXPECT_EQ(r.entries.at(path).mtime_ns, e.mtime_ns / 1000000000 * 1000000000) << path;
    }
}

// A host that lists or hashes for long sends a line (an empty one when it has nothing else) every
// BEAT seconds, so that the launcher, which gives a host up after 120 s without a byte, waits for
// it (a tree of millions of files on NFS, a file of tens of GB to hash): here with BEAT 0, every
// entry and every chunk sends; what the launcher reads is the same.
TEST_F(SyncTree, ALongListingOrHashingSendsSomethingEveryBeat) {
  fs::create_directories(dest_ + "/d");
  std::ofstream(dest_ + "/d/a.py") << "a";
  std::ofstream(dest_ + "/b.py") << "b";
  const std::string request = manifest_request({"b.py"});
  int status = -1;
  std::string plain = run_edited_perl(dir_, dest_, {}, request, &status);
  ASSERT_EQ(status, 0) << plain;
  std::string perl = run_edited_perl(
      dir_, dest_, {{"my ($BEAT, $SENT) = (10, time)", "my ($BEAT, $SENT) = (0, 0)"}}, request,
      &status);
  ASSERT_EQ(status, 0) << perl;
  std::string edited(remote::kSyncPy);
  size_t at = edited.find("BEAT, sent = 10,");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 16, "BEAT, sent = 0,");
  std::ofstream(dir_ + "/stdin", std::ios::binary) << request;
  std::string python =
      test::shell_output(fmt::format("python3 -I -S -c {} {} '' < '{}/stdin'", shell_quote(edited),
                                     shell_quote(dest_), dir_),
                         &status);
  ASSERT_EQ(status, 0) << python;
  for (const std::string* out : {&perl, &python}) {
    EXPECT_TRUE(out->starts_with("\n") || out->find("\n\n") != std::string::npos)
        << *out;  // the empty line of a beat
    EXPECT_EQ(parse_remote_manifest(*out, IgnoreRules()).entries,
              parse_remote_manifest(plain, IgnoreRules()).entries);
    std::string answer = out->substr(out->find(kEnd) + kEnd.size());
    EXPECT_EQ(parse_remote_answer(answer).hashes.at("b.py"), sha256_hex("b"));
  }
  EXPECT_EQ(plain.find("\n\n"), std::string::npos) << plain;
}

// Where the kernel does not name the architecture (before Linux 6.1), sync.pl asks perl's Config:
// mtimes stay exact.
TEST_F(SyncTree, PerlWithoutProcSysKernelArchKeepsMtimesExact) {
  const std::vector<std::pair<std::string, std::string>> no_proc = {
      {"/proc/sys/kernel/arch", "/proc/sys/kernel/no-such-file"}};
  const int64_t late = 1700000000123456789;
  int status = -1;
  std::string out = run_edited_perl(dir_, dest_, no_proc,
                                    encode_record_header(RecordType::kFile, 0600, late, 1, "late") +
                                        "l" + encode_record_header(RecordType::kEnd, 0, 0, 0, ""),
                                    &status);
  EXPECT_EQ(status, 0) << out;
  RemoteManifest r =
      parse_remote_manifest(run_edited_perl(dir_, dest_, no_proc, "", &status), IgnoreRules());
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.entries["late"].mtime_ns, late);
}

// Both programs list one tree alike, entry by entry.
TEST_F(SyncTree, PerlAndPythonListTheSameTree) {
  int status = -1;
  std::string out = apply(stream_for(local(), {}), &status);
  ASSERT_EQ(status, 0) << out;
  std::ofstream(dest_ + "/\xff odd \"name\"", std::ios::binary) << "x";
  fs::create_symlink("sub dir/\xfe", dest_ + "/link \\ \n");
  RemoteManifest both[2];
  for (int i : {0, 1}) {
    program_ = i ? SyncProgram::kPython : SyncProgram::kPerl;
    both[i] = parse_remote_manifest(manifest("", {}), IgnoreRules());
    EXPECT_TRUE(both[i].complete) << i;
  }
  EXPECT_EQ(both[0].entries.size(), 9u);  // the 7 sent (no __pycache__, no *.pt) and 2 more
  EXPECT_EQ(both[0].entries, both[1].entries);
}

// A host runs sync.pl with perl when it has perl, else sync.py with python3, else says it has
// neither (exit 127, and the JSON error line the launcher shows).
TEST_F(SyncTree, AHostRunsPerlElsePython3ElseSaysItHasNeither) {
  // The programs themselves, not a wrapper on PATH that needs more of PATH (a pyenv shim).
  std::string perl = test::shell_output("perl -e 'print $^X'");
  std::string python = test::shell_output(
      "python3 -c 'import os, sys; print(os.path.realpath(sys.executable), end=\"\")'");
  ASSERT_FALSE(perl.empty());
  ASSERT_FALSE(python.empty());
  std::string bin = dir_ + "/bin", ran = dir_ + "/perl-ran";
  fs::create_directories(bin);
  std::ofstream(bin + "/perl") << "#!/bin/sh\necho ran >> '" << ran << "'\nexec " << perl
                               << " \"$@\"\n";
  fs::permissions(bin + "/perl", fs::perms::owner_all);
  fs::create_symlink(python, bin + "/python3");
  auto run_with_path = [&](const std::string& path, int* status) {
    return test::shell_output(
        fmt::format("PATH='{}'; export PATH; {} </dev/null", path, sync_command(dest_, "t")),
        status);
  };
  int status = -1;
  std::string out = run_with_path(bin, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out, "{\"marker\": \"\"}\n{\"end\": true}\n");
  EXPECT_EQ(test::slurp(ran), "ran\n");  // perl first
  fs::remove(bin + "/perl");
  fs::remove(dest_ + "/.msrun-sync-id");
  out = run_with_path(bin, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out, "{\"marker\": \"\"}\n{\"end\": true}\n");  // python3, as well
  EXPECT_EQ(test::slurp(dest_ + "/.msrun-sync-id"), "t\n");
  fs::remove(bin + "/python3");
  out = run_with_path(bin, &status);
  EXPECT_EQ(WEXITSTATUS(status), 127);
  EXPECT_EQ(parse_remote_manifest(out, IgnoreRules()).error,
            "neither perl nor python3 found on the host (sync needs one)");
}

// ---- where --------------------------------------------------------------------------------------

TEST(SyncWhere, DestinationFollowsTheWorkdir) {
  auto w = sync_where("/home/u/proj", "", "", "train.py", {"/data/job", "/scratch"});
  EXPECT_EQ(w.dir, "/home/u/proj");
  EXPECT_EQ(w.dests, (std::vector<std::string>{"/data/job", "/scratch"}));
  w = sync_where("/home/u/proj", "", "", "src/train.py", {"/data/job"});
  EXPECT_EQ(w.dir, "/home/u/proj/src");
  EXPECT_EQ(w.dests, (std::vector<std::string>{"/data/job/src"}));
  w = sync_where("/home/u/proj", "/elsewhere/code/", "out", "train.py", {"/data/job"});
  EXPECT_EQ(w.dir, "/elsewhere/code");
  EXPECT_EQ(w.dests, (std::vector<std::string>{"/data/job/out"}));
  w = sync_where("/home/u/proj", "code", "/abs/dest", "", {"/data/job"});
  EXPECT_EQ(w.dests, (std::vector<std::string>{"/abs/dest"}));
}

TEST(SyncWhere, AmbiguousCasesAreRefused) {
  std::vector<Case> cases = {
      {"../other", "is not inside the current directory"},
      {"/elsewhere", "is not inside the current directory"},
  };
  for (const auto& c : cases)
    EXPECT_NE(test::error_of([&] {
                sync_where("/home/u/proj", c.input, "", "t.py", {"/w"});
              }).find(c.expected),
              std::string::npos)
        << c.input;
  EXPECT_NE(test::error_of([] {
              sync_where("/home/u/proj", "", "", "/home/u/proj/t.py", {"/w"});
            }).find("absolute path"),
            std::string::npos);
}

// ---- on the hosts (ReplyTransport) -------------------------------------------------------------

using fake::Reply;
using fake::ReplyTransport;

// Words of the program on the hosts: of its manifest step and of its apply step.
constexpr const char* kManifestWord = "def walk(";
constexpr const char* kApplyWord = "def record(";

std::string line_of(const std::string& path, const Entry& e) {
  return fmt::format(
      "{{\"t\": \"{}\", \"m\": {}, \"s\": {}, \"n\": {}, \"p\": \"{}\", \"l\": \"{}\"}}\n",
      static_cast<char>(e.type), e.mode, e.size, e.mtime_ns, path, e.target);
}

// The program on a host: it lists `entries` and the marker `old`, answers a request with the
// marker `now` and `hashes`, and prints `last` after its stdin's EOF (the apply step's line, for
// a host that gets a stream).
Reply host_reply(const Manifest& entries, const std::string& old, const std::string& now,
                 const Hashes& hashes = {}, const std::string& last = "") {
  std::string out = "motd from a login script\n";
  for (const auto& [p, e] : entries) out += line_of(p, e);
  out += fmt::format("{{\"marker\": \"{}\"}}\n{{\"end\": true}}\n", old);
  std::string answer = fmt::format("{{\"marker\": \"{}\"}}\n", now);
  for (const auto& [p, h] : hashes)
    answer += fmt::format("{{\"h\": \"{}\", \"p\": \"{}\"}}\n", h, p);
  answer += "{\"end\": true}\n";
  // Its stdin's first line is the token; a request is the second.
  Reply r{.output = {{0.001, out}}, .until_eof = true, .after_line = {{0.001, answer}}, .line = 2};
  if (!last.empty()) r.after_eof = {{0.001, last + "\n"}};
  return r;
}

// The records of a stream: "TYPE:PATH" each.
std::vector<std::string> records(const std::string& stream) {
  std::vector<std::string> out;
  size_t pos = 0;
  auto be = [&](size_t at, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = v << 8 | static_cast<unsigned char>(stream.at(at + i));
    return v;
  };
  while (pos < stream.size()) {
    char type = stream[pos];
    uint64_t size = be(pos + 13, 8), len = be(pos + 21, 4);
    out.push_back(fmt::format("{}:{}", type, stream.substr(pos + kRecordHeaderSize, len)));
    pos += kRecordHeaderSize + len + size;
  }
  return out;
}

// What was written to a host's stdin: the token line, the request line (a line that begins with
// '{'), and the record stream that follows.
struct Written {
  std::string request;
  std::string stream;
  std::string token;  // without its newline
};
Written split(const std::string& written) {
  size_t first = written.find('\n');
  if (first == std::string::npos) return {"", "", "(no token line: " + written + ")"};
  std::string token = written.substr(0, first), rest = written.substr(first + 1);
  if (!rest.starts_with("{")) return {"", rest, token};
  size_t end = rest.find('\n') + 1;
  return {rest.substr(0, end), rest.substr(end), token};
}

class SyncHosts : public SyncTree {
 protected:
  void SetUp() override {
    SyncTree::SetUp();
    source_.dir = src_;
    source_.rules = sync_rules(src_, {"*.pt", "sub dir/"});
    source_.local = local_manifest(src_, source_.rules);
    source_.dests = {"/d0", "/d1", "/d2"};
  }

  std::vector<std::string> lines(const std::vector<SyncHostResult>& results) const {
    std::vector<std::string> out;
    for (size_t h = 0; h < results.size(); ++h)
      out.push_back(sync_result_line(addresses_, results, h));
    return out;
  }

  // One channel per host, host h's the h-th, running the one program (with perl, else python3 -I
  // -S) on its DEST; every stdin closed at the end.
  void expect_one_channel_per_host() const {
    ASSERT_EQ(t_.execs.size(), source_.dests.size());
    for (size_t h = 0; h < t_.execs.size(); ++h) {
      const auto& e = t_.execs[h];
      EXPECT_EQ(e.host, h);
      EXPECT_NE(e.command.find(kManifestWord), std::string::npos);
      EXPECT_NE(e.command.find(kApplyWord), std::string::npos);
      EXPECT_NE(e.command.find("exec perl -e"), std::string::npos);
      EXPECT_NE(e.command.find("sub record {"), std::string::npos);      // sync.pl, and sync.py
      EXPECT_NE(e.command.find("python3 -I -S -c"), std::string::npos);  // isolated, fast start
      EXPECT_NE(e.command.find(source_.dests[h]), std::string::npos);
      EXPECT_GE(t_.channel(static_cast<ChannelId>(h)).eof_ms, 0) << h;
    }
  }

  Written written(size_t host) const {
    return split(t_.channel(static_cast<ChannelId>(host)).written);
  }

  ReplyTransport t_;
  SyncSource source_;
  std::vector<std::string> addresses_{"h0", "h1", "h2"};
};

TEST_F(SyncHosts, SharedDirectoriesAreWrittenOnceAndEachHostGetsOnlyItsDifference) {
  Manifest all = source_.local;
  Manifest one_changed = all;
  one_changed["train.py"].size = 1;
  t_.on(kManifestWord, host_reply({}, "", "T1", {}, "msrun-sync: done 4 24 0"), 0);
  // Reads h1's token back: shares with h0. It would say what it wrote, were it sent anything.
  t_.on(kManifestWord, host_reply({}, "", "T1", {}, "msrun-sync: done 4 24 0"), 1);
  t_.on(kManifestWord, host_reply(one_changed, "old", "T2", {}, "msrun-sync: done 1 12 0"), 2);
  auto results = sync_hosts(t_, source_, SyncSettings{});
  EXPECT_EQ(lines(results),
            (std::vector<std::string>{
                "sync: h0: 4 files, 24 bytes sent, 0 deleted (shared with h1)",
                "sync: h1: shared with h0", "sync: h2: 1 files, 12 bytes sent, 0 deleted"}));
  expect_one_channel_per_host();  // no second channel for the streams
  EXPECT_EQ(records(written(0).stream),
            (std::vector<std::string>{"L:link.py", "F:run.sh", "F:train.py", "E:"}));
  EXPECT_EQ(written(1).stream, "");  // h1 writes nothing: EOF after its answer
  EXPECT_EQ(records(written(2).stream), (std::vector<std::string>{"F:train.py", "E:"}));
  // Every host was asked for a marker read-back, and wrote a token of its own.
  for (size_t h = 0; h < 3; ++h) {
    EXPECT_EQ(written(h).request, "{\"hash\": []}\n");
    EXPECT_EQ(written(h).token.size(), 32u) << h;            // a token, on the first line
    EXPECT_TRUE(may_start_ahead(t_.execs[h].command)) << h;  // and not on the command line
  }
}

TEST_F(SyncHosts, UpToDateAndContentComparedByHash) {
  Manifest touched = source_.local;
  touched["train.py"].mtime_ns += 5;  // same size, other mtime: compared by content
  Manifest edited = touched;
  t_.on(kManifestWord, host_reply(source_.local, "a", "A"), 0);
  t_.on(kManifestWord,
        host_reply(touched, "b", "B", {{"train.py", sha256_hex("print('hi')\n")}},
                   "msrun-sync: done 0 0 0"),
        1);
  t_.on(kManifestWord,
        host_reply(edited, "c", "C", {{"train.py", sha256_hex("other\n")}},
                   "msrun-sync: done 1 12 0"),
        2);
  auto results = sync_hosts(t_, source_, SyncSettings{});
  EXPECT_EQ(lines(results)[0], "sync: h0: up to date");
  EXPECT_EQ(lines(results)[2], "sync: h2: 1 files, 12 bytes sent, 0 deleted");
  expect_one_channel_per_host();
  EXPECT_EQ(written(0).stream, "");  // up to date: nothing to apply
  EXPECT_EQ(written(1).request,
            fmt::format("{{\"hash\": [\"{}\"]}}\n", "747261696e2e7079"));  // "train.py" in hex
  EXPECT_EQ(records(written(1).stream), (std::vector<std::string>{"A:train.py", "E:"}));
  EXPECT_EQ(records(written(2).stream), (std::vector<std::string>{"F:train.py", "E:"}));
}

TEST_F(SyncHosts, FailuresNameTheHost) {
  t_.on(
      kManifestWord,
      Reply{.output = {{0.001, "{\"error\": \"python3 not found on the host (sync needs it)\"}\n"}},
            .status = 127},
      0);
  Reply refused = host_reply({}, "", "T1", {}, "msrun-sync: error: refused path 'x'");
  refused.status = 2;
  t_.on(kManifestWord, refused, 1);
  Reply hangs = host_reply({}, "", "T2");
  hangs.exit_at = -1;  // never ends, not even after its EOF: given up after the timeout
  t_.on(kManifestWord, hangs, 2);
  t_.lose(2, 0.5, "Socket error: Connection reset by peer");
  auto results = sync_hosts(t_, source_, SyncSettings{});
  EXPECT_EQ(lines(results),
            (std::vector<std::string>{
                "sync: h0: failed: python3 not found on the host (sync needs it)",
                "sync: h1: failed: refused path 'x'",
                "sync: h2: failed: connection lost: Socket error: Connection reset by peer"}));
  EXPECT_EQ(t_.execs.size(), 3u);
}

TEST_F(SyncHosts, AHostWhoseManifestFailedGetsEofAtOnce) {
  // The program lists what it can, says why it failed, and waits for its stdin like any other.
  Reply unreadable = host_reply({}, "", "T0");
  unreadable.output = {{0.001,
                        "{\"error\": \"cannot list /d0/x: Permission denied\"}\n"
                        "{\"marker\": \"\"}\n{\"end\": true}\n"}};
  t_.on(kManifestWord, unreadable, 0);
  t_.on(kManifestWord, host_reply(source_.local, "", "T1"), 1);
  t_.on(kManifestWord, host_reply(source_.local, "", "T2"), 2);
  auto results = sync_hosts(t_, source_, SyncSettings{});
  EXPECT_EQ(lines(results),
            (std::vector<std::string>{"sync: h0: failed: cannot list /d0/x: Permission denied",
                                      "sync: h1: up to date", "sync: h2: up to date"}));
  EXPECT_EQ(written(0).request, "");  // its token line and nothing else
  EXPECT_EQ(written(0).stream, "");
  EXPECT_GE(t_.channel(0).eof_ms, 0);
  EXPECT_LT(t_.now_ms(), 1000);  // not the 120 s of the timeout
  EXPECT_TRUE(t_.kills.empty());
}

TEST_F(SyncHosts, AStopEndsTheSyncThereAndTheHostsNotDoneFailInterrupted) {
  t_.on(kManifestWord, host_reply({}, "", "T0", {}, "msrun-sync: done 4 24 0"), 0);
  t_.on(kManifestWord, host_reply({}, "", "T1", {}, "msrun-sync: done 4 24 0"), 1);
  Reply hangs = host_reply({}, "", "T2");
  hangs.exit_at = -1;  // a slow host: still applying when the launcher is interrupted
  t_.on(kManifestWord, hangs, 2);
  SyncSettings settings;
  int asked = 0;
  settings.stop = [&] {
    ++asked;
    return t_.now_ms() >= 2000;  // Ctrl-C, 2 s in
  };
  auto results = sync_hosts(t_, source_, settings);
  EXPECT_EQ(lines(results), (std::vector<std::string>{"sync: h0: 4 files, 24 bytes sent, 0 deleted",
                                                      "sync: h1: 4 files, 24 bytes sent, 0 deleted",
                                                      "sync: h2: failed: interrupted"}));
  EXPECT_GE(t_.now_ms(), 2000);
  EXPECT_LT(t_.now_ms(), 3100);    // at most a second on, not the 120 s of the timeout
  EXPECT_GE(asked, 2);             // asked as it goes, not only at the end
  ASSERT_EQ(t_.kills.size(), 1u);  // what was given up on is killed
}

TEST_F(SyncHosts, ASingleHostIsAskedNothingAndGetsItsStreamAtOnce) {
  source_.dests = {"/d0"};
  t_.on(kManifestWord, host_reply({}, "", "T0", {}, "msrun-sync: done 4 24 0"), 0);
  auto results = sync_hosts(t_, source_, SyncSettings{});
  EXPECT_EQ(lines(results)[0], "sync: h0: 4 files, 24 bytes sent, 0 deleted");
  expect_one_channel_per_host();
  EXPECT_EQ(written(0).request, "");  // no marker read-back for a host alone, no hash to ask
  EXPECT_EQ(records(written(0).stream),
            (std::vector<std::string>{"L:link.py", "F:run.sh", "F:train.py", "E:"}));
}

TEST_F(SyncHosts, CheckComparesAndWritesNothing) {
  Manifest one_changed = source_.local;
  one_changed["train.py"].size = 1;
  t_.on(kManifestWord, host_reply(source_.local, "", "x"), 0);
  t_.on(kManifestWord, host_reply(one_changed, "", "x"), 1);
  t_.on(kManifestWord, host_reply({}, "", "x"), 2);
  SyncSettings settings;
  settings.apply = false;
  auto results = sync_hosts(t_, source_, settings);
  EXPECT_EQ(results[0].differ, 0u);
  EXPECT_EQ(results[1].differ, 1u);
  EXPECT_EQ(results[2].differ, source_.local.size());
  expect_one_channel_per_host();
  for (size_t h = 0; h < 3; ++h) EXPECT_EQ(written(h).stream, "") << h;  // no record anywhere
  for (size_t h = 0; h < 3; ++h) EXPECT_EQ(written(h).token, "") << h;   // no token to write
}

// ---- on local processes running the real program
// -------------------------------------------------

// LocalTransport that keeps what was written to each channel's stdin.
class WritesKept : public local::LocalTransport {
 public:
  void write(ChannelId channel, std::string_view data) override {
    written[channel] += data;
    LocalTransport::write(channel, data);
  }
  std::map<ChannelId, std::string> written;
};

TEST_F(SyncTree, RealProgramOneChannelPerHostASharedDirectoryWrittenOnce) {
  SyncSource source;
  source.dir = src_;
  source.rules = sync_rules(src_, {"*.pt"});
  source.dests = {dest_, dest_, dir_ + "/other"};  // hosts 0 and 1 share dest_
  auto sync = [&](WritesKept& t) {
    source.local = local_manifest(src_, source.rules);
    return sync_hosts(t, source, SyncSettings{});
  };
  WritesKept first;
  auto r = sync(first);
  EXPECT_EQ(first.execs.size(), 3u);  // no second channel
  for (size_t h : {0, 2}) {
    EXPECT_EQ(r[h].error, "") << h;
    EXPECT_EQ(r[h].files, 5u) << h;
  }
  EXPECT_EQ(r[0].sharers, (std::vector<size_t>{1}));
  EXPECT_EQ(r[1].shared_with, 0u);
  EXPECT_EQ(split(first.written[1]).request, "{\"hash\": []}\n");  // host 1 was sent no record
  EXPECT_EQ(split(first.written[1]).stream, "");
  EXPECT_EQ(test::slurp(dir_ + "/other/sub dir/ünï/data.bin").size(), 300000u);

  put("train.py", "print('changed')\n");
  WritesKept again;
  r = sync(again);
  EXPECT_EQ(again.execs.size(), 3u);
  for (size_t h : {0, 2}) {
    EXPECT_EQ(r[h].error, "") << h;
    EXPECT_EQ(r[h].files, 1u) << h;
    EXPECT_EQ(r[h].bytes, 17u) << h;
  }
  EXPECT_EQ(r[1].shared_with, 0u);
  EXPECT_EQ(split(again.written[1]).request, "{\"hash\": []}\n");
  EXPECT_EQ(split(again.written[1]).stream, "");
  EXPECT_EQ(test::slurp(dest_ + "/train.py"), "print('changed')\n");
  EXPECT_EQ(test::slurp(dir_ + "/other/train.py"), "print('changed')\n");
}

}  // namespace
}  // namespace msrun_ssh
