// The ground floor's strings, the shell's quoting, writes, non-blocking sockets and paths (base.h).
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "msrun_ssh/base.h"

namespace msrun_ssh {

std::string_view trim(std::string_view s, std::string_view blanks) {
  const size_t first = s.find_first_not_of(blanks);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(blanks) - first + 1);
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = std::min(text.find('\n', pos), text.size());
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return lines;
}

std::string last_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  size_t nl = text.rfind('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> split_words(std::string_view text, std::string_view blanks) {
  std::vector<std::string_view> words;
  for (size_t pos = text.find_first_not_of(blanks); pos != std::string_view::npos;
       pos = text.find_first_not_of(blanks, pos)) {
    size_t end = std::min(text.find_first_of(blanks, pos), text.size());
    words.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return words;
}

std::vector<std::string> owned_words(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view w : split_words(text)) out.emplace_back(w);
  return out;
}

namespace {

// `s` escaped as in_quotes says, onto `out`; `as_text`: newlines, tabs, backslashes and `quote`
// stay as written (what a message holds of its own).
void escape_into(std::string& out, std::string_view s, char quote, bool as_text) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 0; i < s.size();) {
    unsigned char c = byte(i);
    if (as_text && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (!as_text && (c == '\n' || c == '\r' || c == '\t' || c == '\\' ||
                     c == static_cast<unsigned char>(quote))) {
      out += '\\';
      out += c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, its code point checked for overlong
    // forms, surrogates and the end of Unicode.
    size_t n = c >= 0xc2 && c <= 0xdf   ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    char32_t cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      ok = (byte(i + k) & 0xc0) == 0x80;
      cp = (cp << 6) | (byte(i + k) & 0x3f);
    }
    ok = ok && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
         !(cp >= 0xd800 && cp <= 0xdfff);
    if (!ok) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    if (cp < 0xa0)
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    else
      out.append(s.substr(i, n));
    i += n;
  }
}

}  // namespace

std::string in_quotes(std::string_view s, char quote) {
  std::string out(1, quote);
  escape_into(out, s, quote, false);
  out += quote;
  return out;
}

std::string in_quotes_cut(std::string_view s, size_t max) {
  return s.size() <= max ? in_quotes(s) : in_quotes(s.substr(0, max)) + "...";
}

std::string printable(std::string_view s) {
  std::string out;
  escape_into(out, s, '\0', true);
  return out;
}

std::string shell_quote(std::string_view word) {
  std::string out;
  out.reserve(word.size() + 2);
  out += '\'';
  // Whole runs between quotes are appended at once: the remote programs quoted here are kilobytes.
  for (size_t at = 0;;) {
    size_t q = word.find('\'', at);
    out.append(word.substr(at, q == std::string_view::npos ? word.size() - at : q - at));
    if (q == std::string_view::npos) break;
    out += "'\\''";
    at = q + 1;
  }
  out += '\'';
  return out;
}

void write_fully(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // A descriptor left non-blocking by whoever shares it (a parent shell, a pipe's other
      // user): wait until it takes more, as a blocking write would.
      pollfd p{fd, POLLOUT, 0};
      while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
      continue;
    }
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::optional<std::string> read_whole_file(const std::string& path, size_t max_bytes,
                                           std::string& why) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::strerror(errno);
    return std::nullopt;
  }
  std::string text;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n <= 0) continue;
    if (text.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      why = fmt::format("larger than {} bytes", max_bytes);
      return std::nullopt;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  int error = errno;
  ::close(fd);
  if (n < 0) {  // a directory reads as EISDIR
    why = std::strerror(error);
    return std::nullopt;
  }
  return text;
}

std::optional<std::string> read_whole_file(const std::string& path) {
  std::string why;
  return read_whole_file(path, std::numeric_limits<size_t>::max(), why);
}

namespace {

// Writes `text` to the file `path` (created or truncated); false (errno says why) when it cannot.
// `durable`: on the disk before it returns (fsync).
bool put_file(const std::string& path, std::string_view text, bool durable = false) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (ok && durable) ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  if (f && std::fclose(f) != 0) ok = false;
  return ok;
}

}  // namespace

bool write_text_file(const std::string& path, std::string_view text) {
  bool ok = put_file(path, text);
  if (!ok)
    std::fprintf(stderr, "msrun-ssh: warning: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
  return ok;
}

std::string replace_file(const std::string& path, std::string_view text, bool durable) {
  std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
  if (put_file(tmp, text, durable) && std::rename(tmp.c_str(), path.c_str()) == 0) {
    if (durable) {  // the new name too: its directory's entry
      size_t slash = path.rfind('/');
      std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
      int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
      }
    }
    return "";
  }
  std::string why = std::strerror(errno);
  std::remove(tmp.c_str());
  return why;
}

std::string absolute_path(const std::string& path, const std::string& cwd) {
  if (path.starts_with('/') || cwd.empty()) return path;
  return cwd.ends_with('/') ? cwd + path : fmt::format("{}/{}", cwd, path);
}

void SendQueue::append(std::string_view data) {
  if (data.empty()) return;
  // Small writes join the last copy; one that would make a big copy grow (and double its
  // capacity, on every host at once) gets a piece of its own.
  if (!pieces_.empty() && pieces_.back().stable.empty() &&
      pieces_.back().owned.size() + data.size() <=
          std::max<size_t>(512, pieces_.back().owned.capacity()))
    pieces_.back().owned.append(data);
  else
    pieces_.push_back(Piece{.owned = std::string(data)});
  size_ += data.size();
}

void SendQueue::append_stable(std::string_view data) {
  if (data.empty()) return;
  pieces_.push_back(Piece{.stable = data});
  size_ += data.size();
}

std::string_view SendQueue::front() const {
  if (pieces_.empty()) return {};
  const Piece& p = pieces_.front();
  return (p.stable.empty() ? std::string_view(p.owned) : p.stable).substr(p.at);
}

void SendQueue::consume(size_t n) {
  if (pieces_.empty()) return;
  n = std::min(n, front().size());
  pieces_.front().at += n;
  size_ -= n;
  if (front().empty()) pieces_.erase(pieces_.begin());
  if (pieces_.empty()) std::vector<Piece>().swap(pieces_);
}

namespace {
struct Inherited {
  int fd;
  dev_t dev;
  ino_t ino;
};
std::vector<Inherited>& inherited() {
  static std::vector<Inherited> fds;
  return fds;
}
}  // namespace

void note_inherited_fds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  std::vector<int> fds;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && fd > 2 && fd != ::dirfd(dir))
      fds.push_back(static_cast<int>(fd));
  }
  ::closedir(dir);
  for (int fd : fds) {
    struct stat st {};
    if (::fstat(fd, &st) == 0) inherited().push_back({fd, st.st_dev, st.st_ino});
  }
}

void close_inherited_fds() {
  for (const auto& i : inherited()) {
    struct stat st {};
    if (::fstat(i.fd, &st) == 0 && st.st_dev == i.dev && st.st_ino == i.ino) ::close(i.fd);
  }
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

bool send_some(int fd, std::string& out) {
  while (!out.empty()) {
    ssize_t n = ::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

bool recv_some(int fd, std::string& in) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

}  // namespace msrun_ssh
