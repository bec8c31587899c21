// The documentation of the command line, one table (src/cli/help.cc) from which `--help` of every
// command, the man page msrun-ssh.1 and the shell completion's option names are all made, so that
// none of them can go stale. A unit test ties the table to the options the parser accepts
// (option_names(), cli.h): every accepted option is documented, every documented option is
// accepted by each command it is documented for.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "msrun_ssh/options.h"

namespace msrun_ssh {

// A set of commands: one bit per Command.
using CommandSet = unsigned;
constexpr CommandSet command_bit(Command c) { return 1u << static_cast<unsigned>(c); }

// Where an option is listed: with msrun's options (same spelling, same meaning) or our own.
enum class OptionSection { kMsrun, kOwn };

struct OptionDoc {
  std::string name;        // "--hostfile"
  std::string short_name;  // "-h", or "" when there is none
  std::string metavar;     // "FILE", "msrun|torch"; "" for an option without a value
  std::string text;        // one paragraph, one space between words; wrapped where it is printed
  CommandSet commands;     // the commands it is documented for (and accepted by)
  OptionSection section;
};

struct CommandDoc {
  Command command;
  std::string name;   // the command word ("run" names the default: no command word)
  std::string usage;  // "msrun-ssh check [OPTIONS] --hostfile FILE ..."
  std::string text;   // what the command does, one paragraph
};

// Every option, in the order --help and the man page list them.
const std::vector<OptionDoc>& option_docs();

// Every command, the default (run) first.
const std::vector<CommandDoc>& command_docs();

// The text of --help for a command: its usage, what it does, its options, and for a run the exit
// status.
std::string help_text(Command command);

// The man page msrun-ssh.1 in roff (man(7) macros).
std::string man_page();

// The hidden arguments, for the build and the shell completion (never in --help):
//   --man                        the man page
//   --complete-options [COMMAND] the options of COMMAND (default run), one per line:
//                                "NAME" or "NAME METAVAR"
// Returns what to print when `args` is one of them, else nullopt. Throws InputError for an unknown
// COMMAND or a further argument.
std::optional<std::string> hidden_output(const std::vector<std::string>& args);

}  // namespace msrun_ssh
