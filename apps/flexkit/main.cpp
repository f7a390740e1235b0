// flexkit: the command-line face of the library. Exit codes: 0 success, 1 a runtime error (the
// message on stderr), 2 a usage error (with the usage), 3 a training run whose loss or
// parameters stopped being finite, 130 a run stopped by Ctrl-C.
#include <cstdio>
#include <exception>
#include <string_view>

#include "commands.hpp"
#include "flexkit/version.hpp"

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(const flexkit::cli::Args&);
};

constexpr Command kCommands[] = {
    {"info", "devices found, CUDA and NVRTC versions, the kernel cache directory",
     flexkit::cli::info_command},
    {"demo", "a short tour of arrays, views, flex16 and .npy files (cpu, and cuda when present)",
     flexkit::cli::demo_command},
    {"train",
     "train a spiking classifier on Fashion-MNIST (presets mlp, csnn, or any architecture)",
     flexkit::cli::train_command},
    {"eval", "test-set accuracy of a training checkpoint", flexkit::cli::eval_command},
    {"neuron", "show a spiking neuron's generated kernels, or run it over .npy sequences",
     flexkit::cli::neuron_command},
};

void usage(std::FILE* out) {
  std::fprintf(out, "usage: flexkit <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands)
    std::fprintf(out, "  %-7.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.summary.size()), c.summary.data());
  std::fprintf(out,
               "\n  flexkit <command> --help     that command's options\n"
               "  flexkit help <command>       the same\n"
               "  flexkit --version | --help\n"
               "\nexit codes: 0 success, 1 runtime error, 2 usage error\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string_view name = argv[1];
  flexkit::cli::Args args(argv + 2, argv + argc);
  if (name == "help" && argc >= 3) {
    // `flexkit help train` is `flexkit train --help`.
    name = argv[2];
    args = {"--help"};
  } else if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("flexkit %.*s\n", static_cast<int>(flexkit::kVersion.size()),
                flexkit::kVersion.data());
    return 0;
  }
  for (const Command& c : kCommands) {
    if (c.name != name) continue;
    try {
      return c.run(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flexkit %.*s: error: %s\n", static_cast<int>(name.size()), name.data(),
                   e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "flexkit: unknown command '%.*s'\n\n", static_cast<int>(name.size()),
               name.data());
  usage(stderr);
  return 2;
}
