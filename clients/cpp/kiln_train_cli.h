// `kiln train ...`: the kiln.v1.Training subcommands of the kiln command line (kiln_cli.cc).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "clients/cpp/kiln_client.h"

namespace kiln::client {

// Options that only `kiln train` takes, as --NAME VALUE or --NAME=VALUE.
bool IsTrainValueFlag(const std::string& name);  // name without the leading "--"
// Options without a value (--deterministic, --nesterov).
bool IsTrainBoolFlag(const std::string& name);

// Runs `train <sub> ...` (`positional[0]` is "train" or its alias "jobs"); `outputs` are the
// -o/--output files (`train checkpoint` only). Returns the exit code: 0 ok, 1 the server, the
// request or the job failed (message on stderr), 2 usage error (then `*usage_error` says why and
// nothing was printed).
int TrainCommand(KilnClient& client, bool json, const std::vector<std::string>& positional,
                 const std::map<std::string, std::string>& flags,
                 const std::vector<std::string>& outputs, std::string* usage_error);

// `kiln train --help` (`sub` empty: every subcommand) or `kiln train SUB --help`; "" for an
// unknown `sub`. `command` is "train" or "jobs", as typed.
std::string TrainHelp(const std::string& command, const std::string& sub);

}  // namespace kiln::client
