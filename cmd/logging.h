// The daemon's log lines (spdlog): text for people, or one JSON object per line for collectors.
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <string>

namespace topodra::cmd {

// {"time":"...Z","level":"info","msg":"..."}: the message escaped so that every line is one valid
// JSON object whatever the message holds (quotes from claim errors, newlines, control characters,
// bytes that are not UTF-8, which become U+FFFD).
std::unique_ptr<spdlog::formatter> NewJsonFormatter();
// `s` as the inside of a JSON string.
std::string JsonEscape(const std::string& s);

// The default logger "topodra" on stderr; `format` text or json, `verbosity` 0 info, 1 debug,
// 2 trace (STYLE.md).
void SetUpLogging(const std::string& format, int verbosity);

}  // namespace topodra::cmd
