// `sluice`: the command line. Subcommands live in server/serve_command.cc and server/tools/*_command.cc.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "server/commands.h"

int main(int argc, char** argv) {
  CLI::App app("Sluice: TFRecord/JPEG input pipelines for training, as a service.", "sluice");
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");
  int exit_code = 0;
  sluice::RegisterInspectCommand(app, &exit_code);
  sluice::RegisterIndexCommand(app, &exit_code);
  sluice::RegisterConvertCommand(app, &exit_code);
  sluice::RegisterSynthCommand(app, &exit_code);
  sluice::RegisterProfileCommand(app, &exit_code);
  sluice::RegisterServeCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::fflush(stdout);
  return exit_code;
}
