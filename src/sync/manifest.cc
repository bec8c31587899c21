// Manifests (sync.h): the launcher's tree walked with lstat, the hosts' read from their JSON
// lines, and the difference between them.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/sync.h"

namespace msrun_ssh {
namespace {

namespace fs = std::filesystem;

// Sync's own files: never listed, compared nor deleted.
bool own_file(std::string_view path) {
  std::string_view name = path.substr(path.rfind('/') + 1);
  std::string marker_tmp = std::string(kMarkerFile) + ".tmp.";
  return name == kMarkerFile || name.starts_with(marker_tmp) || name.starts_with(kTempPrefix);
}

// Relative, '/'-separated, without "." or ".." components, empty components or NUL.
bool safe_relative(std::string_view path) {
  if (path.empty() || path[0] == '/' || path.find('\0') != std::string_view::npos) return false;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = std::min(path.find('/', pos), path.size());
    std::string_view part = path.substr(pos, slash - pos);
    if (part.empty() || part == "." || part == "..") return false;
    pos = slash + 1;
  }
  return true;
}

// Whether a symlink at `path` whose text is `target` stays inside the tree.
bool target_inside(const std::string& path, const std::string& target) {
  if (target.empty() || target[0] == '/') return false;
  fs::path resolved = (fs::path(path).parent_path() / target).lexically_normal();
  return !resolved.empty() && *resolved.begin() != "..";
}

// The '/'-separated parts of `path`, in `parts` after those there (empty ones and "." left
// out).
void append_parts(std::vector<std::string>& parts, std::string_view path) {
  for (std::string_view part : split_words(path, "/"))
    if (part != ".") parts.emplace_back(part);
}

// Whether the symlink `path` of `m` resolves inside the tree, following on the way the tree's own
// symlinks (those `m` holds, which the hosts get too): `sub/e -> d/../x` with `sub/d -> ..` leaves
// it, though each text stays inside alone. A part `m` does not have (excluded: a host's own, or
// missing) is taken as it is written. More than 40 links followed (a loop: it leads nowhere, on the
// hosts as here) ends the look there.
bool resolves_inside(const Manifest& m, const std::string& path) {
  std::vector<std::string> at;  // the parts resolved so far, from the top of the tree
  append_parts(at, path);
  at.pop_back();
  std::vector<std::string> todo;  // the parts left, last first
  auto push_target = [&todo](const std::string& target) {
    std::vector<std::string> parts;
    append_parts(parts, target);
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  push_target(m.at(path).target);
  for (int links = 0; !todo.empty();) {
    std::string part = std::move(todo.back());
    todo.pop_back();
    if (part == "..") {
      if (at.empty()) return false;
      at.pop_back();
      continue;
    }
    at.push_back(std::move(part));
    std::string joined;
    for (const auto& a : at) joined += (joined.empty() ? "" : "/") + a;
    auto it = m.find(joined);
    if (it == m.end() || it->second.type != EntryType::kSymlink) continue;
    if (++links > 40) return true;
    if (it->second.target.starts_with('/')) return false;
    at.pop_back();
    push_target(it->second.target);
  }
  return true;
}

Entry entry_of(const struct stat& st, const std::string& full) {
  Entry e;
  e.mode = st.st_mode & 07777;
  e.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (S_ISDIR(st.st_mode)) {
    e.type = EntryType::kDir;
  } else if (S_ISLNK(st.st_mode)) {
    e.type = EntryType::kSymlink;
    e.target = fs::read_symlink(full).string();
  } else {
    e.size = static_cast<uint64_t>(st.st_size);
  }
  return e;
}

}  // namespace

Manifest local_manifest(const std::string& dir, const IgnoreRules& rules,
                        std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(fmt::format("sync: {} is not a directory", dir));
  Manifest m;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) throw InputError(fmt::format("sync: cannot read {}: {}", dir, ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) throw InputError(fmt::format("sync: cannot read {}: {}", dir, ec.message()));
    std::string full = it->path().string();
    std::string rel = it->path().lexically_relative(dir).generic_string();
    struct stat st {};
    if (lstat(full.c_str(), &st) != 0) continue;  // gone meanwhile
    bool is_dir = S_ISDIR(st.st_mode);
    // A symlink counts as the directory it may stand for, as on the hosts (parse_remote_manifest):
    // `--sync_exclude data/` leaves out a launcher's `data -> /datasets/x` too (it was refused as
    // an absolute symlink, the exclude notwithstanding).
    if (own_file(rel) || rules.excluded(rel, is_dir || S_ISLNK(st.st_mode))) {
      if (is_dir) it.disable_recursion_pending();
      continue;
    }
    if (!is_dir && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
      if (skipped) skipped->push_back(rel);
      continue;
    }
    Entry e = entry_of(st, full);
    if (e.type == EntryType::kSymlink && !target_inside(rel, e.target))
      throw InputError(fmt::format(
          "sync: {}/{} is a symlink to {}, {}: the hosts cannot have it; exclude it or make it "
          "relative",
          dir, rel, e.target, e.target.starts_with('/') ? "an absolute path" : "outside the tree"));
    m.emplace(std::move(rel), std::move(e));
  }
  for (const auto& [rel, e] : m)
    if (e.type == EntryType::kSymlink && !resolves_inside(m, rel))
      throw InputError(fmt::format(
          "sync: {}/{} is a symlink to {}, which leads outside the tree through the tree's own "
          "symlinks: the hosts cannot have it; exclude it or point it inside",
          dir, rel, e.target));
  return m;
}

namespace {

// The text under `key`, or under `key`+"x" in hex (names that are not UTF-8); nullopt: neither.
std::optional<std::string> name_of(const nlohmann::json& j, const std::string& key) {
  auto it = j.find(key);
  if (it != j.end() && it->is_string()) return it->get<std::string>();
  it = j.find(key + "x");
  if (it == j.end() || !it->is_string()) return std::nullopt;
  const std::string& hex = it->get_ref<const std::string&>();
  if (hex.size() % 2 != 0 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    return std::nullopt;
  std::string raw;
  for (size_t i = 0; i < hex.size(); i += 2)
    raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return raw;
}

std::optional<Entry> remote_entry(const nlohmann::json& j) {
  std::string t = j.value("t", "");
  if (t.size() != 1 || std::string_view("fdl").find(t[0]) == std::string_view::npos)
    return std::nullopt;
  // Mode, size and mtime are integers: a number with a fraction or an exponent (4.2e+36) is no
  // entry (converting it would be undefined behaviour).
  for (const char* key : {"m", "s", "n"})
    if (j.contains(key) && !j[key].is_number_integer()) return std::nullopt;
  Entry e;
  e.type = static_cast<EntryType>(t[0]);
  e.mode = j.value("m", 0u) & 07777;
  e.size = e.type == EntryType::kFile ? j.value("s", uint64_t{0}) : 0;
  e.mtime_ns = j.value("n", int64_t{0});
  if (e.type == EntryType::kSymlink) e.target = name_of(j, "l").value_or("");
  return e;
}

// Calls `fn` with every line of `text` that is a JSON object, unless `taken` took it first (it
// returns true for a line it read itself, sparing the JSON parser). A line whose fields have the
// wrong types (fn throws nlohmann's type_error: {"t": 3}) is ignored from there on, as a line
// that is not JSON is.
template <typename Taken, typename Fn>
void json_lines(std::string_view text, Taken taken, Fn fn) {
  for (std::string_view line : split_lines(text)) {
    if (line.empty() || line[0] != '{' || taken(line)) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    try {
      fn(j);
    } catch (const nlohmann::json::exception&) {
    }
  }
}

// A JSON integer (-?(0|[1-9][0-9]*), but not -0) at the front of `s` that fits T: consumed, true.
template <typename T>
bool take_integer(std::string_view& s, T& value) {
  size_t digits = s.starts_with('-') ? 1 : 0;
  auto digit = [&](size_t i) { return i < s.size() && s[i] >= '0' && s[i] <= '9'; };
  if (!digit(digits) || (s[digits] == '0' && (digit(digits + 1) || digits == 1))) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc()) return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return true;
}

bool take(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::optional<std::pair<std::string, Entry>> plain_entry_line(std::string_view line) {
  Entry e;
  if (!take(line, "{\"t\": \"") || line.empty() || (line[0] != 'f' && line[0] != 'd'))
    return std::nullopt;
  e.type = static_cast<EntryType>(line[0]);
  line.remove_prefix(1);
  uint64_t size = 0;
  if (!take(line, "\", \"m\": ") || !take_integer(line, e.mode) || !take(line, ", \"s\": ") ||
      !take_integer(line, size) || !take(line, ", \"n\": ") || !take_integer(line, e.mtime_ns) ||
      !take(line, ", \"p\": \"") || !line.ends_with("\"}"))
    return std::nullopt;
  std::string_view path = line.substr(0, line.size() - 2);
  for (char c : path)
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return std::nullopt;
  e.mode &= 07777;
  e.size = e.type == EntryType::kFile ? size : 0;
  return std::pair{std::string(path), e};
}

RemoteManifest parse_remote_manifest(std::string_view output, const IgnoreRules& rules,
                                     bool plain_lines) {
  RemoteManifest r;
  // A host's symlink counts as the directory it may stand for: `data/` excluded keeps a host's
  // `data -> /scratch/data` (node-local data), which was deleted as not the launcher's.
  auto add = [&](const std::string& path, const Entry& e) {
    if (safe_relative(path) && !own_file(path) &&
        !rules.excluded(path, e.type == EntryType::kDir || e.type == EntryType::kSymlink))
      r.entries[path] = e;
  };
  json_lines(
      output,
      [&](std::string_view line) {
        if (!plain_lines || r.complete) return false;
        auto plain = plain_entry_line(line);
        if (plain) add(plain->first, plain->second);
        return plain.has_value();
      },
      [&](const nlohmann::json& j) {
        if (r.complete) return;  // what follows answers the second request
        if (j.contains("end")) r.complete = true;
        auto path = name_of(j, "p");
        // A directory the host cannot list is no error where it is excluded (nothing there is
        // sent or deleted).
        if (j.contains("error") && j["error"].is_string() &&
            !(path && safe_relative(*path) && rules.excluded(*path, true)))
          r.error = j["error"];
        if (j.contains("marker") && j["marker"].is_string()) r.marker = j["marker"];
        if (!path) return;
        if (auto e = remote_entry(j)) add(*path, *e);
      });
  return r;
}

RemoteAnswer parse_remote_answer(std::string_view output) {
  RemoteAnswer a;
  json_lines(
      output, [](std::string_view) { return false; },
      [&](const nlohmann::json& j) {
        if (j.contains("end")) a.complete = true;
        if (j.contains("marker") && j["marker"].is_string()) a.marker = j["marker"];
        auto path = name_of(j, "p");
        if (path && j.contains("h") && j["h"].is_string()) a.hashes[*path] = j["h"];
      });
  return a;
}

std::optional<ApplySummary> parse_apply_summary(std::string_view output) {
  constexpr std::string_view kDone = "msrun-sync: done ";
  size_t pos = output.rfind(kDone);
  if (pos == std::string_view::npos) return std::nullopt;
  ApplySummary s;
  std::string line(output.substr(pos + kDone.size(), output.find('\n', pos) - pos - kDone.size()));
  unsigned long long bytes = 0;
  if (std::sscanf(line.c_str(), "%zu %llu %zu", &s.files, &bytes, &s.deleted) != 3)
    return std::nullopt;
  s.bytes = bytes;
  return s;
}

}  // namespace msrun_ssh
