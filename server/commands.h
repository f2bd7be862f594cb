// The `sluice` subcommands. Each Register* adds one to the app; when it runs, its exit status is
// stored in *exit_code. Flag errors are reported by CLI11 before anything runs.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice {

void RegisterInspectCommand(CLI::App& app, int* exit_code);
void RegisterIndexCommand(CLI::App& app, int* exit_code);
void RegisterConvertCommand(CLI::App& app, int* exit_code);
void RegisterSynthCommand(CLI::App& app, int* exit_code);
void RegisterProfileCommand(CLI::App& app, int* exit_code);
void RegisterServeCommand(CLI::App& app, int* exit_code);

}  // namespace sluice
