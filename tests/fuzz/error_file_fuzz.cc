// Fuzzes parse_error_file (src/output/error_file.cc): the JSON a torch rank's error file holds,
// relayed on its stderr (output.h, ErrorFile), and Output's handling of that line.
//
// Properties:
//  - parse_error_file never throws, whatever the bytes (not JSON, not UTF-8, deep nesting);
//  - what it accepts is a JSON object with "message", and reading its answer back agrees: the
//    traceback holds no newline, the timestamp is one the file holds (else 0);
//  - Output takes the relayed line off the process's output when it parses, and never crashes or
//    throws on it: the log and the console get exactly the other lines.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "msrun_ssh/output.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  std::optional<msrun_ssh::ErrorFile> file;
  try {
    file = msrun_ssh::parse_error_file(json);
  } catch (...) {
    FUZZ_CHECK(false, "parse_error_file threw");
  }
  if (file) {
    FUZZ_CHECK(json.find("\"message\"") != std::string_view::npos ||
                   json.find("message") != std::string_view::npos,
               "accepted without a message");
    for (const auto& line : file->traceback)
      FUZZ_CHECK(line.find('\n') == std::string::npos, "a traceback line holds a newline");
  }
  // The same bytes as a relayed line (cut at the first newline, as a line is), through Output.
  static const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  msrun_ssh::OutputConfig config;
  config.console_out = null_fd;
  config.console_err = null_fd;
  msrun_ssh::Output out(config);
  int p = out.add_process("0@h", "", true);
  std::string line = std::string(msrun_ssh::kErrorFileLine) +
                     std::string(json.substr(0, std::min(json.find('\n'), json.size()))) + "\n";
  out.data(p, true, line);
  out.finish(p);
  out.flush();
  bool parsed =
      msrun_ssh::parse_error_file(line.substr(msrun_ssh::kErrorFileLine.size(),
                                              line.size() - 1 - msrun_ssh::kErrorFileLine.size()))
          .has_value();
  FUZZ_CHECK(out.error_file(p).has_value() == parsed, "Output kept %s error file",
             parsed ? "no" : "an unparsed");
  FUZZ_CHECK(out.last_lines(p).size() == (parsed ? 0u : 1u), "%zu lines left",
             out.last_lines(p).size());
  return 0;
}
