// The documentation of the command line: `--help` of every command, the man page msrun-ssh.1 and
// the shell completion's option names, all made from the commands' table below and the options'
// table (option_table.h), which the parser reads too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "msrun_ssh/option_table.h"
#include "msrun_ssh/options.h"

namespace msrun_ssh {

struct CommandDoc {
  Command command;
  std::string name;   // the command word ("run" names the default: no command word)
  std::string usage;  // "msrun-ssh check [OPTIONS] --hostfile FILE ..."
  std::string text;   // what the command does, one paragraph
};

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
