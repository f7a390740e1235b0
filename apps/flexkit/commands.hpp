// The flexkit command-line tool's subcommands.
#pragma once
#include <string>
#include <vector>

namespace flexkit::cli {

using Args = std::vector<std::string>;

// Each returns the process exit code.
int info_command(const Args& args);
int demo_command(const Args& args);
int neuron_command(const Args& args);
int train_command(const Args& args);
int eval_command(const Args& args);

}  // namespace flexkit::cli
