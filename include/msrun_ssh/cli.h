// The command line (docs/command-line.md): msrun's option spelling and syntax plus our own
// options.
//
// `--name=value` and `--name value` both work; booleans take True/False/true/false/1/0; the first
// word that is not an option is TASK_SCRIPT and everything after it belongs to the task, even words
// that look like options (argparse REMAINDER). `check` and `stop` are subcommands when they come
// first. Errors throw InputError with a message naming the option and value (exit 2).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "msrun_ssh/help.h"
#include "msrun_ssh/options.h"

namespace msrun_ssh {

enum class CliAction { kRun, kHelp, kVersion };

struct CliResult {
  CliAction action = CliAction::kRun;
  Options options;
};

// Parses argv[1..]; `getenv` (hostfile.h) reads the launcher's environment for `--env NAME`.
// Throws InputError.
CliResult parse_args(const std::vector<std::string>& args, const GetEnv& getenv);

}  // namespace msrun_ssh
