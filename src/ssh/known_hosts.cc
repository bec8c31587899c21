// known_hosts narrowing: each file read once per launch, each session handed only the lines that
// may concern its host (see KnownHostsIndex in ssh.h).
#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "config_walk.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/ssh.h"

namespace msrun_ssh {
namespace {

constexpr std::string_view kHashedPrefix = "|1|";
constexpr size_t kSha1Size = 20;

// The first whitespace-separated word of a line, and whether anything follows it.
std::string_view first_word(std::string_view line, bool& more) {
  size_t end = line.find_first_of(" \t");
  std::string_view word = line.substr(0, end);
  more = end != std::string_view::npos &&
         line.find_first_not_of(" \t\r", end) != std::string_view::npos;
  return word;
}

// A hashed host field ("|1|SALT|HASH") decoded into its salt and its 20-byte hash; false when it
// is not one.
bool decode_hashed(std::string_view field, std::string& salt, std::string& hash) {
  if (!field.starts_with(kHashedPrefix)) return false;
  std::string_view rest = field.substr(kHashedPrefix.size());
  size_t bar = rest.find('|');
  auto s = decode_base64(rest.substr(0, bar));
  auto h = bar == std::string_view::npos ? std::nullopt : decode_base64(rest.substr(bar + 1));
  if (!s || !h || h->size() != kSha1Size) return false;
  salt = std::move(*s);
  hash = std::move(*h);
  return true;
}

// Whether HMAC-SHA1(salt, name) is `hash`, as ssh hashes a known_hosts name; nullopt when it
// cannot be computed.
std::optional<bool> hashes_to(std::string_view salt, std::string_view hash, std::string_view name) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha1(), salt.data(), static_cast<int>(salt.size()),
           reinterpret_cast<const unsigned char*>(name.data()), name.size(), mac, &len) == nullptr)
    return std::nullopt;
  return len == hash.size() && std::memcmp(hash.data(), mac, len) == 0;
}

}  // namespace

KnownHostsIndex::KnownHostsIndex(std::string_view text) {
  size_t number = 0;
  for (std::string_view line : split_lines(text)) {
    ++number;
    std::string_view body = line.substr(std::min(line.size(), line.find_first_not_of(" \t\r")));
    if (body.empty() || body.front() == '#') continue;  // nothing libssh would use
    if (body.starts_with("@revoked")) {
      std::vector<std::string_view> words = split_words(body, " \t\r");
      if (words.size() >= 4 && words[0] == "@revoked")
        revoked_.push_back({number, std::string(words[1]), std::string(words[3])});
    }
    size_t index = lines_.size();
    lines_.emplace_back(line);
    bool more = false;
    std::string_view hosts = first_word(body, more);
    // Markers (@revoked, @cert-authority) and lines without a key are libssh's to judge: every
    // host gets them. Wildcards and negations are judged here, as ssh judges them: libssh reads
    // each name of the list alone, and `*.cluster,!login.cluster` would give login the key.
    if (!more || hosts.front() == '@') {
      always_.push_back(index);
      continue;
    }
    if (hosts.find_first_of("*?!") != std::string_view::npos) {
      patterned_.emplace_back(index, std::string(hosts));
      continue;
    }
    if (hosts.starts_with(kHashedPrefix)) {
      Hashed h{.line = index};
      if (decode_hashed(hosts, h.salt, h.hash))
        hashed_.push_back(std::move(h));
      else
        always_.push_back(index);
      continue;
    }
    for (size_t start = 0; start <= hosts.size();) {
      size_t comma = hosts.find(',', start);
      std::string_view name =
          hosts.substr(start, comma == std::string_view::npos ? hosts.npos : comma - start);
      if (!name.empty()) plain_[to_lower(name)].push_back(index);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
}

std::string KnownHostsIndex::lines_for(std::string_view host, int port, bool named_only) const {
  // libssh looks up the lower-cased "host" on port 22 and "[host]:port" otherwise. Plain lines
  // under either spelling are kept (a map lookup each); a hashed line costs an HMAC per name, so
  // it is tested against exactly the name libssh will hash.
  std::string bare = to_lower(host);
  std::string bracketed = "[" + bare + "]:" + std::to_string(port);
  std::vector<size_t> keep = named_only ? std::vector<size_t>{} : always_;
  for (const std::string* name : {&bare, &bracketed}) {
    auto it = plain_.find(*name);
    if (it != plain_.end()) keep.insert(keep.end(), it->second.begin(), it->second.end());
  }
  const std::string& looked_up = port == 22 ? bare : bracketed;
  for (const auto& [line, patterns] : patterned_)
    if (known_hosts_patterns_match(patterns, looked_up)) keep.push_back(line);
  for (const Hashed& h : hashed_) {
    std::optional<bool> same = hashes_to(h.salt, h.hash, looked_up);
    // A line whose HMAC cannot be computed is kept: libssh decides.
    if ((!same && !named_only) || same.value_or(false)) keep.push_back(h.line);
  }
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  std::string out;
  for (size_t i : keep) {
    // libssh splits a line's fields at spaces only; ssh at tabs too.
    std::string line = lines_[i];
    std::replace(line.begin(), line.end(), '\t', ' ');
    out += line;
    out += '\n';
  }
  return out;
}

bool known_hosts_patterns_match(std::string_view patterns, std::string_view name) {
  std::string lower = to_lower(patterns);  // ssh lower-cases a host field and the name
  return pattern_list_matches(to_lower(name), split_words(lower, ","));
}

namespace {

// Whether a hashed host field ("|1|salt|hash") is the hash of `name`.
bool hashed_name_is(std::string_view field, std::string_view name) {
  std::string salt, hash;
  return decode_hashed(field, salt, hash) && hashes_to(salt, hash, name).value_or(false);
}

}  // namespace

size_t KnownHostsIndex::revoking_line(std::string_view name, std::string_view blob) const {
  std::string lower = to_lower(name);
  for (const Revoked& r : revoked_)
    if (r.blob == blob &&
        (r.hosts.starts_with(kHashedPrefix) ? hashed_name_is(r.hosts, lower)
                                            : known_hosts_patterns_match(r.hosts, lower)))
      return r.number;
  return 0;
}

size_t revoking_line(std::string_view text, std::string_view name, std::string_view blob) {
  return KnownHostsIndex(text).revoking_line(name, blob);
}

bool key_listed(std::string_view text, std::string_view blob) {
  for (std::string_view line : split_lines(text)) {
    std::vector<std::string_view> words = split_words(line, " \t\r");
    if (words.size() >= 2 && !words[0].starts_with('#') && words[1] == blob) return true;
  }
  return false;
}

std::string known_hosts_name(std::string_view host, int port) {
  return port == 22 ? to_lower(host) : fmt::format("[{}]:{}", to_lower(host), port);
}

std::string hash_known_hosts_name(std::string_view name) {
  unsigned char salt[kSha1Size];
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (RAND_bytes(salt, sizeof salt) != 1 ||
      !HMAC(EVP_sha1(), salt, sizeof salt, reinterpret_cast<const unsigned char*>(name.data()),
            name.size(), mac, &len))
    return std::string(name);
  auto b64 = [](const unsigned char* p, size_t n) {
    std::string out(4 * ((n + 2) / 3), '\0');
    int m = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), p, static_cast<int>(n));
    out.resize(static_cast<size_t>(m));
    return out;
  };
  return "|1|" + b64(salt, sizeof salt) + "|" + b64(mac, len);
}

std::string renamed_known_hosts_lines(std::string_view lines, std::string_view name) {
  std::string out;
  for (std::string_view line : split_lines(lines)) {
    size_t field = line.starts_with('@') ? line.find(' ') + 1 : 0;  // after a marker
    size_t end = line.find(' ', field);
    if (field == 0 && line.starts_with('@')) continue;
    if (end == std::string_view::npos) continue;
    out += line.substr(0, field);
    out += name;
    out += line.substr(end);
    out += '\n';
  }
  return out;
}

}  // namespace msrun_ssh
