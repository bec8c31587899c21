// The difference between two manifests and the record stream that applies it (sync.h).
#include <endian.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "msrun_ssh/sync.h"

namespace msrun_ssh {
namespace {

// What a local file needs on a host that has `r` there: nothing, its attributes, its bytes, or a
// comparison of contents first (nullopt with `hash` set).
std::optional<RecordType> file_change(const std::string& path, const Entry& l, const Entry& r,
                                      const Hashes* remote_hashes, const Hashes* local_hashes,
                                      bool& hash) {
  if (r.size != l.size) return RecordType::kFile;
  if (r.mtime_ns == l.mtime_ns)
    return r.mode == l.mode ? std::nullopt : std::optional(RecordType::kAttrs);
  if (!remote_hashes) {
    hash = true;
    return std::nullopt;
  }
  auto rh = remote_hashes->find(path);
  auto lh = local_hashes ? local_hashes->find(path) : Hashes::const_iterator{};
  bool same = local_hashes && rh != remote_hashes->end() && lh != local_hashes->end() &&
              !rh->second.empty() && rh->second == lh->second;
  return same ? RecordType::kAttrs : RecordType::kFile;
}

// What the local entry at `path` needs on the host (`r`: the host's entry there, or nullptr).
std::optional<RecordType> change(const std::string& path, const Entry& l, const Entry* r,
                                 const Hashes* remote_hashes, const Hashes* local_hashes,
                                 bool& hash) {
  if (!r || r->type != l.type) {
    switch (l.type) {
      case EntryType::kDir:
        return RecordType::kDir;
      case EntryType::kSymlink:
        return RecordType::kSymlink;
      case EntryType::kFile:
        return RecordType::kFile;
    }
  }
  if (l.type == EntryType::kDir)
    return r->mode == l.mode ? std::nullopt : std::optional(RecordType::kDir);
  if (l.type == EntryType::kSymlink)
    return r->target == l.target ? std::nullopt : std::optional(RecordType::kSymlink);
  return file_change(path, l, *r, remote_hashes, local_hashes, hash);
}

void put_be(std::string& out, uint64_t v, size_t bytes) {
  for (size_t i = bytes; i-- > 0;) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

SyncPlan diff_manifests(const Manifest& local, const Manifest& remote, const Hashes* remote_hashes,
                        const Hashes* local_hashes) {
  SyncPlan p;
  std::vector<Action> dirs, writes;
  for (auto it = remote.rbegin(); it != remote.rend(); ++it) {
    auto l = local.find(it->first);
    if (l == local.end() || l->second.type != it->second.type)
      p.actions.push_back({RecordType::kDelete, it->first});
  }
  p.deletions = p.actions.size();
  for (const auto& [path, l] : local) {
    auto r = remote.find(path);
    bool hash = false;
    auto c = change(path, l, r == remote.end() ? nullptr : &r->second, remote_hashes, local_hashes,
                    hash);
    if (hash) p.to_hash.push_back(path);
    if (!c) continue;
    (*c == RecordType::kDir ? dirs : writes).push_back({*c, path});
    if (*c == RecordType::kFile || *c == RecordType::kSymlink) ++p.files;
    if (*c == RecordType::kFile) p.bytes += l.size;
  }
  p.actions.insert(p.actions.end(), dirs.begin(), dirs.end());
  p.actions.insert(p.actions.end(), writes.begin(), writes.end());
  return p;
}

std::string encode_record_header(RecordType type, uint32_t mode, int64_t mtime_ns, uint64_t size,
                                 std::string_view path) {
  std::string out;
  out.reserve(kRecordHeaderSize + path.size());
  out.push_back(static_cast<char>(type));
  put_be(out, mode, 4);
  put_be(out, static_cast<uint64_t>(mtime_ns), 8);
  put_be(out, size, 8);
  put_be(out, path.size(), 4);
  out.append(path);
  return out;
}

RecordStream::RecordStream(std::string dir, const Manifest& local, std::vector<Action> actions)
    : dir_(std::move(dir)), local_(local), actions_(std::move(actions)) {}

RecordStream::~RecordStream() {
  if (fd_ >= 0) close(fd_);
}

std::string RecordStream::start(const Action& a) {
  auto it = local_.find(a.path);
  const Entry* e = it == local_.end() ? nullptr : &it->second;
  switch (a.type) {
    case RecordType::kDir:
      return encode_record_header(a.type, e ? e->mode : 0755, 0, 0, a.path);
    case RecordType::kAttrs:
      return encode_record_header(a.type, e ? e->mode : 0644, e ? e->mtime_ns : 0, 0, a.path);
    case RecordType::kSymlink:
      ++files_;
      return encode_record_header(a.type, 0, 0, e ? e->target.size() : 0, a.path) +
             (e ? e->target : "");
    case RecordType::kFile:
      break;
    default:
      return encode_record_header(a.type, 0, 0, 0, a.path);
  }
  path_ = dir_ + "/" + a.path;
  fd_ = open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (fd_ < 0 || fstat(fd_, &st) != 0)
    // A file gone since the tree was listed (an editor's swap file) fails the sync rather than
    // leave the hosts that got it before unlike those that did not.
    throw std::runtime_error(
        errno == ENOENT
            ? fmt::format("cannot read {}: it vanished while the sync ran (the tree changed "
                          "meanwhile: sync again, or exclude it)",
                          path_)
            : fmt::format("cannot read {}: {}", path_, std::strerror(errno)));
  ++files_;
  left_ = static_cast<uint64_t>(st.st_size);
  int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return encode_record_header(a.type, st.st_mode & 07777, mtime, left_, a.path);
}

std::string RecordStream::next(size_t max) {
  std::string out;
  while (out.size() < max && !done_) {
    if (fd_ >= 0 && left_ > 0) {
      size_t want =
          static_cast<size_t>(std::min<uint64_t>(left_, std::max<size_t>(max - out.size(), 1)));
      size_t at = out.size();
      out.resize(at + want);
      ssize_t n = 0;
      do n = read(fd_, out.data() + at, want);
      while (n < 0 && errno == EINTR);
      if (n <= 0)
        throw std::runtime_error(
            fmt::format("cannot read {}: {}", path_,
                        n == 0 ? "it shrank while being sent" : std::strerror(errno)));
      out.resize(at + static_cast<size_t>(n));
      left_ -= static_cast<uint64_t>(n);
      data_bytes_ += static_cast<uint64_t>(n);
      continue;
    }
    if (fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
    if (next_action_ == actions_.size()) {
      out += encode_record_header(RecordType::kEnd, 0, 0, 0, "");
      done_ = true;
    } else {
      out += start(actions_[next_action_++]);
    }
  }
  return out;
}

}  // namespace msrun_ssh
