// SHA-256 (base.h): of the task script for `check`, of synced files, of kept connections' keys;
// with OpenSSL's libcrypto (already linked for the known_hosts HMACs): streaming EVP digest, so a
// large script is never read into memory at once. And base64's decoding, with the same library.
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "msrun_ssh/base.h"

namespace msrun_ssh {
namespace {

using Digest = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

Digest new_digest(const EVP_MD* md = EVP_sha256()) {
  Digest ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1)
    throw std::runtime_error("libcrypto: cannot start a digest");
  return ctx;
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md, &len) != 1)
    throw std::runtime_error("libcrypto: cannot finish a digest");
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  Digest ctx = new_digest();
  EVP_DigestUpdate(ctx.get(), data.data(), data.size());
  return finish_hex(ctx.get());
}

std::string sha1_hex(std::string_view data) {
  Digest ctx = new_digest(EVP_sha1());
  EVP_DigestUpdate(ctx.get(), data.data(), data.size());
  return finish_hex(ctx.get());
}

std::optional<std::string> sha256_file(const std::string& path, std::string& error) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("cannot open {}: {}", path, strerror(errno));
    return std::nullopt;
  }
  Digest ctx = new_digest();
  unsigned char buf[1 << 16];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = fmt::format("cannot read {}: {}", path, strerror(errno));
      close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf, static_cast<size_t>(n));
  }
  close(fd);
  return finish_hex(ctx.get());
}

std::optional<std::string> decode_base64(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  while (pad < 2 && text[text.size() - 1 - pad] == '=') ++pad;
  std::string out(text.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0 || static_cast<size_t>(n) != out.size()) return std::nullopt;
  out.resize(out.size() - pad);
  return out;
}

}  // namespace msrun_ssh
