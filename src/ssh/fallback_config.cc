// Without an `ssh` client, libssh reads the ssh config: what it would read otherwise than OpenSSH
// is refused here, by file, line and keyword (docs/ssh.md, "Without an ssh client").
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config_walk.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/ssh_config.h"

namespace msrun_ssh {
namespace {

// How libssh 0.10 reads a keyword, next to OpenSSH.
enum class Reading {
  kSame,      // as OpenSSH does (what its value may hold is checked on its own)
  kNoEffect,  // changes nothing msrun-ssh's connections depend on (forwarding, X11, SendEnv, ...)
  kRefused,   // read otherwise, or not at all, where it changes where, as whom, how or through
              // what a connection is made and verified
};

struct Keyword {
  Reading reading;
  // For kSame and kNoEffect: the one value that is allowed ("" any), e.g. ProxyJump none.
  std::string_view only_value = {};
};

const std::map<std::string_view, Keyword>& keywords() {
  static const std::map<std::string_view, Keyword> table = {
      // Read as OpenSSH reads them (values with tokens are refused below).
      {"host", {Reading::kSame}},
      {"include", {Reading::kSame}},
      {"hostname", {Reading::kSame}},
      {"user", {Reading::kSame}},
      {"port", {Reading::kSame}},
      {"connecttimeout", {Reading::kSame}},
      {"userknownhostsfile", {Reading::kSame}},
      {"globalknownhostsfile", {Reading::kSame}},
      {"ciphers", {Reading::kSame}},
      {"macs", {Reading::kSame}},
      {"kexalgorithms", {Reading::kSame}},
      {"hostkeyalgorithms", {Reading::kSame}},
      {"pubkeyacceptedalgorithms", {Reading::kSame}},
      {"pubkeyacceptedkeytypes", {Reading::kSame}},
      {"compression", {Reading::kSame}},
      {"rekeylimit", {Reading::kSame}},
      {"bindaddress", {Reading::kSame}},
      // Only in the form that changes nothing.
      {"stricthostkeychecking", {Reading::kSame, "yes"}},
      {"proxyjump", {Reading::kNoEffect, "none"}},
      {"proxycommand", {Reading::kNoEffect, "none"}},
      {"identitiesonly", {Reading::kNoEffect, "no"}},
      {"pubkeyauthentication", {Reading::kNoEffect, "yes"}},
      {"canonicalizehostname", {Reading::kNoEffect, "no"}},
      {"addressfamily", {Reading::kNoEffect, "any"}},
      {"serveraliveinterval", {Reading::kNoEffect, "0"}},
      {"hostbasedauthentication", {Reading::kNoEffect, "no"}},
      {"verifyhostkeydns", {Reading::kNoEffect, "no"}},
      // Nothing msrun-ssh uses: public keys are its one way in, it asks no questions, forwards
      // nothing, runs its own commands and multiplexes its own sessions.
      {"batchmode", {Reading::kNoEffect}},
      {"loglevel", {Reading::kNoEffect}},
      {"serveralivecountmax", {Reading::kNoEffect}},
      {"hashknownhosts", {Reading::kNoEffect}},
      {"passwordauthentication", {Reading::kNoEffect}},
      {"kbdinteractiveauthentication", {Reading::kNoEffect}},
      {"challengeresponseauthentication", {Reading::kNoEffect}},
      {"kbdinteractivedevices", {Reading::kNoEffect}},
      {"numberofpasswordprompts", {Reading::kNoEffect}},
      {"gssapiauthentication", {Reading::kNoEffect}},
      {"gssapidelegatecredentials", {Reading::kNoEffect}},
      {"gssapiclientidentity", {Reading::kNoEffect}},
      {"gssapiserveridentity", {Reading::kNoEffect}},
      {"sendenv", {Reading::kNoEffect}},
      {"setenv", {Reading::kNoEffect}},
      {"forwardagent", {Reading::kNoEffect}},
      {"forwardx11", {Reading::kNoEffect}},
      {"forwardx11timeout", {Reading::kNoEffect}},
      {"forwardx11trusted", {Reading::kNoEffect}},
      {"xauthlocation", {Reading::kNoEffect}},
      {"localforward", {Reading::kNoEffect}},
      {"remoteforward", {Reading::kNoEffect}},
      {"dynamicforward", {Reading::kNoEffect}},
      {"clearallforwardings", {Reading::kNoEffect}},
      {"exitonforwardfailure", {Reading::kNoEffect}},
      {"gatewayports", {Reading::kNoEffect}},
      {"tunnel", {Reading::kNoEffect}},
      {"tunneldevice", {Reading::kNoEffect}},
      {"requesttty", {Reading::kNoEffect}},
      {"remotecommand", {Reading::kNoEffect}},
      {"localcommand", {Reading::kNoEffect}},
      {"permitlocalcommand", {Reading::kNoEffect}},
      {"escapechar", {Reading::kNoEffect}},
      {"controlmaster", {Reading::kNoEffect}},
      {"controlpath", {Reading::kNoEffect}},
      {"controlpersist", {Reading::kNoEffect}},
      {"tcpkeepalive", {Reading::kNoEffect}},
      {"ipqos", {Reading::kNoEffect}},
      {"checkhostip", {Reading::kNoEffect}},
      {"visualhostkey", {Reading::kNoEffect}},
      {"fingerprinthash", {Reading::kNoEffect}},
      {"updatehostkeys", {Reading::kNoEffect}},
      {"addkeystoagent", {Reading::kNoEffect}},
      {"connectionattempts", {Reading::kNoEffect}},
      {"syslogfacility", {Reading::kNoEffect}},
      {"streamlocalbindmask", {Reading::kNoEffect}},
      {"streamlocalbindunlink", {Reading::kNoEffect}},
      {"ignoreunknown", {Reading::kNoEffect}},
      {"enablesshkeysign", {Reading::kNoEffect}},
      {"logverbose", {Reading::kNoEffect}},
      {"obscurekeystroketiming", {Reading::kNoEffect}},
      {"sessiontype", {Reading::kNoEffect}},
      {"stdinnull", {Reading::kNoEffect}},
      {"forkafterauthentication", {Reading::kNoEffect}},
      {"proxyusefdpass", {Reading::kNoEffect}},
      {"permitremoteopen", {Reading::kNoEffect}},
      // Every other keyword (Match, IdentityFile, IdentityAgent, HostKeyAlias, CertificateFile,
      // the Canonical* ones, KnownHostsCommand, ...) is refused: libssh reads it otherwise or not
      // at all.
  };
  return table;
}

constexpr std::string_view kInstall =
    "; install OpenSSH's client (openssh-client), whose reading msrun-ssh then asks for";

// Checks config `path` and what it includes; `read_by_us`: false for a file only ssh reads
// (/etc/ssh/ssh_config: libssh is not given it), where anything with an effect is refused.
void check_file(const std::string& path, const std::string& base, bool read_by_us) {
  auto visit = [&](const ConfigLine& l) {
    std::string_view value = l.value;
    auto refuse = [&](std::string_view why) {
      return InputError(fmt::format("ssh config {} line {}: {}: {}{}", l.path, l.number,
                                    l.keyword_as_written, why, kInstall));
    };
    auto it = keywords().find(l.keyword);
    if (it == keywords().end() || it->second.reading == Reading::kRefused)
      throw refuse("not read without an ssh client the way ssh reads it");
    const Keyword& k = it->second;
    if (value.find('"') != std::string_view::npos)
      throw refuse("a quoted value is not read without an ssh client the way ssh reads it");
    if (!k.only_value.empty() && to_lower(value) != k.only_value)
      throw refuse(fmt::format("only \"{}\" is read without an ssh client the way ssh reads it",
                               k.only_value));
    if (l.keyword == "host" || l.keyword == "include" || k.reading == Reading::kNoEffect) {
      // checked below
    } else if (!read_by_us && k.only_value.empty()) {
      throw refuse("this file is read by ssh, not by msrun-ssh without an ssh client");
    }
    if (k.reading == Reading::kSame && value.find_first_of("%$") != std::string_view::npos)
      throw refuse("tokens and variables are not expanded without an ssh client as ssh does");
    if ((l.keyword == "userknownhostsfile" || l.keyword == "globalknownhostsfile") &&
        split_words(value).size() > 1)
      throw refuse("only one file is read without an ssh client");
    // libssh matches the name lower-cased, OpenSSH as written: equal where patterns have no
    // capitals (and names, see refuse_what_libssh_misreads).
    if (l.keyword == "host" &&
        std::any_of(value.begin(), value.end(), [](char c) { return std::isupper(c); }))
      throw refuse("a pattern with capitals is matched otherwise without an ssh client");
    return true;  // an Include's files are walked next, and checked alike
  };
  // ssh skips a config it cannot read, and so does libssh.
  if (walk_config(path, base, visit) == ConfigWalk::kTooDeep)
    throw InputError(fmt::format("ssh config {}: Include nested too deeply", path));
}

}  // namespace

void refuse_what_libssh_misreads(const std::string& config_file,
                                 const std::vector<std::string>& names) {
  const std::string home = config_home();
  std::string user_config = config_file.empty() ? home + "/.ssh/config" : config_file;
  if (!config_file.empty() || ::access(user_config.c_str(), R_OK) == 0) {
    check_file(user_config, home + "/.ssh", true);
    for (const auto& name : names)
      if (std::any_of(name.begin(), name.end(), [](char c) { return std::isupper(c); }))
        throw InputError(fmt::format(
            "host {}: a name with capitals is matched against the ssh config {} otherwise "
            "without an ssh client (libssh lower-cases it, ssh does not){}",
            name, user_config, kInstall));
  }
  // ssh also reads the system's config where no -F names one; libssh is not given it.
  if (config_file.empty()) check_file("/etc/ssh/ssh_config", "/etc/ssh", false);
}

}  // namespace msrun_ssh
