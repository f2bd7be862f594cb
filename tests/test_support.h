// Helpers shared by tests: a temporary directory removed at scope exit, file I/O shortcuts,
// capturing this process's stderr, and running the `sluice` binary.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

namespace sluice::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The `sluice` binary the tests run: $SLUICE_BIN when set (binaries run away from their build
// tree, e.g. on the lent GPU machine), else the one this build made.
inline std::string SluiceBinary() {
  const char* env = std::getenv("SLUICE_BIN");
  return env != nullptr && *env != '\0' ? env : SLUICE_BINARY;
}

// Runs `binary <args>` (args are passed to the shell as written) and captures both streams.
inline CommandResult RunCommand(const std::string& binary, const std::string& args) {
  TempDir tmp;
  std::string out_path = tmp.file("stdout"), err_path = tmp.file("stderr");
  std::string cmd = binary + " " + args + " >" + out_path + " 2>" + err_path + " </dev/null";
  int rc = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  return r;
}

// Runs `sluice <args>`.
inline CommandResult RunSluice(const std::string& args) { return RunCommand(SluiceBinary(), args); }

// n bytes from a seeded generator: record payloads and file contents for tests.
inline std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// What this process writes to stderr while it lives (until Text()).
class StderrCapture {
 public:
  StderrCapture() : path_(dir_.file("stderr")), saved_(dup(2)) {
    std::fflush(stderr);
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) throw std::runtime_error("cannot open " + path_);
    dup2(fd, 2);
    close(fd);
  }
  ~StderrCapture() { Restore(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::string Text() {
    Restore();
    return ReadAll(path_);
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }

  TempDir dir_;
  std::string path_;
  int saved_;
};

}  // namespace sluice::testing
