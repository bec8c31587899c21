// Shared by the fuzz targets: the property check that turns a violation into a libFuzzer crash,
// and the small validators more than one target needs.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

// Aborts (a libFuzzer finding) with the condition and a printf-style explanation.
#define FUZZ_CHECK(cond, ...)                                                                \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "PROPERTY VIOLATION (%s:%d): %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                     \
      std::fprintf(stderr, "\n");                                                            \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

namespace fuzz {

// A byte the host-file parsers allow in an address: [A-Za-z0-9._:%-].
inline bool allowed_address_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
         c == '-' || c == '_' || c == ':' || c == '%';
}

// Consumes "DIGITS:" with DIGITS a positive decimal number without leading zero.
inline bool line_number(std::string_view& msg) {
  size_t digits = 0;
  while (digits < msg.size() && msg[digits] >= '0' && msg[digits] <= '9') ++digits;
  if (digits == 0 || msg[0] == '0' || digits == msg.size() || msg[digits] != ':') return false;
  msg.remove_prefix(digits + 1);
  return true;
}

}  // namespace fuzz
