// The options of the command line, in one table (src/cli/option_table.cc): each entry is one
// option's name, value, text, the commands that take it and how its value changes Options. The
// parser (cli.h), the --help of every command, the man page and the shell completion (help.h) are
// all made from it: none of them can disagree with another.
#pragma once

#include <string>
#include <vector>

#include "msrun_ssh/options.h"

namespace msrun_ssh {

// A set of commands: one bit per Command.
using CommandSet = unsigned;
constexpr CommandSet command_bit(Command c) { return 1u << static_cast<unsigned>(c); }

// Where an option is listed: with msrun's options (same spelling, same meaning) or our own.
enum class OptionSection { kMsrun, kOwn };

struct OptionSpec {
  // Sets what `value` says in the options (`name` as given, for errors); "" for a flag given bare.
  // `getenv` reads the launcher's environment (--env NAME). Throws InputError naming the option
  // and the value when the value is not one the option takes.
  using Apply = void (*)(Options& o, const std::string& name, const std::string& value,
                         const GetEnv& getenv);

  std::string name;        // "--hostfile"
  std::string short_name;  // "-h", or "" when there is none
  std::string metavar;     // "FILE", "msrun|torch"; "[=DIR]" an optional value; "" none
  std::string text;        // one paragraph, one space between words; wrapped where it is printed
  CommandSet commands;     // the commands that take it (and list it in their --help)
  OptionSection section;
  Apply apply;  // nullptr for --help and --version, which the parser answers itself

  // Whether the next word is its value ("--name value"); an optional value comes only as
  // "--name=value".
  bool takes_value() const { return !metavar.empty() && metavar[0] != '['; }
  bool taken_by(Command c) const { return (commands & command_bit(c)) != 0; }
};

// Every option, in the order --help and the man page list them.
const std::vector<OptionSpec>& option_table();

// The entry of `name` ("--log_dir"), or nullptr.
const OptionSpec* find_option(const std::string& name);

}  // namespace msrun_ssh
