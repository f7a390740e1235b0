// Library version and where flexkit keeps files between runs.
#pragma once
#include <filesystem>
#include <string_view>

namespace flexkit {

inline constexpr std::string_view kVersion = "0.1.0";

// $FLEXKIT_CACHE_DIR, else $XDG_CACHE_HOME/flexkit, else $HOME/.cache/flexkit, else a folder
// under the system temporary directory. Not created by this call.
std::filesystem::path cache_directory();

}  // namespace flexkit
