// Errors and exit codes shared by every room.
//
// Input problems (command line, host file, bind specs) are reported by throwing InputError whose
// what() is the complete, user-facing message, already carrying the file:line:col, host or option
// it is about. They are caught once, in main(), and turned into exit status 2 before anything has
// been started anywhere.
#pragma once

#include <stdexcept>
#include <string>

namespace msrun_ssh {

// Exit statuses (docs/command-line.md). A job that ran exits with its first failed process's
// status instead.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;        // --on_log_error=stop ended the job
inline constexpr int kExitUsage = 2;          // usage or input error, found before anything starts
inline constexpr int kExitHostFailure = 255;  // a host could not be reached/authenticated/verified
inline constexpr int kExitSigint = 130;
inline constexpr int kExitSigterm = 143;
inline constexpr int kExitSighup = 129;
inline constexpr int kExitTimeout = 124;  // --timeout passed, or --hang_timeout of silence
// The launcher gave up waiting for the end of the job on a host it still reaches: processes it
// names (on stderr and in the summary) may still run there.
inline constexpr int kExitUnconfirmed = 254;
// Out of memory, or an internal error (a bug): said on stderr; whatever was started on a host ends
// by its watchdog within 3x --heartbeat (sysexits.h's EX_SOFTWARE).
inline constexpr int kExitInternal = 70;

// The launcher's exit status after SIGINT, SIGHUP or SIGTERM (130, 129, 143).
inline int exit_status_of_signal(int signo) {
  return signo == 2 ? kExitSigint : signo == 1 ? kExitSighup : kExitSigterm;  // SIGINT, SIGHUP
}

// A NUL byte in what a message quotes (a host file, a value may hold any byte) would end what()
// there, with the value and its closing quote: it is spelled \x00, as printable() spells the
// other control characters.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(without_nul(message)) {}
  explicit InputError(const char* message) : std::runtime_error(message) {}

 private:
  static std::string without_nul(std::string s) {
    for (size_t at = s.find('\0'); at != std::string::npos; at = s.find('\0', at + 4))
      s.replace(at, 1, "\\x00");
    return s;
  }
};

}  // namespace msrun_ssh
