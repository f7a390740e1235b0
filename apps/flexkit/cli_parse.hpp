// Argument parsing shared by the subcommands: CLI11, with the CLI's exit codes (0 after --help,
// 2 for a usage error, which CLI11 reports with the command's usage).
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace flexkit::cli {

inline constexpr int kUsageError = 2;

// Parses argv-style arguments; returns the exit code when parsing ends the command (help, or a
// usage error), nothing to go on.
inline std::optional<int> parse(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsageError;
  }
  return std::nullopt;
}

}  // namespace flexkit::cli
