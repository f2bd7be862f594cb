// Runs a real `sluice serve` in a child process for integration tests: waits until it prints
// where it listens, and stops it with a signal.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_support.h"

namespace sluice::testing {

class ServerProcess {
 public:
  // Starts `sluice serve <args>` and waits (up to 30 s) for its "listening on" line.
  explicit ServerProcess(std::vector<std::string> args) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    // Built before fork: the child of a threaded process should not allocate.
    std::string bin = SluiceBinary(), serve = "serve";
    std::vector<char*> argv;
    argv.push_back(bin.data());
    argv.push_back(serve.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      // output() holds both: the "listening on" lines and the server's warnings on stderr.
      dup2(out[1], 1);
      dup2(out[1], 2);
      close(out[0]);
      close(out[1]);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
    fcntl(out_, F_SETFL, O_NONBLOCK);
    // Room for a long run's warnings between output() calls: a full pipe would stall the server.
    fcntl(out_, F_SETPIPE_SZ, 1 << 20);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      Drain(100);
      size_t at = output_.find("listening on ");
      if (at != std::string::npos) {
        size_t end = output_.find('\n', at);
        if (end == std::string::npos) continue;
        address_ = output_.substr(at + 13, end - at - 13);
        // Other addresses and the metrics line follow in the same burst.
        Drain(200);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return;
      }
    }
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // The first "listening on" address, e.g. "127.0.0.1:41234".
  const std::string& address() const { return address_; }
  int port() const { return std::stoi(address_.substr(address_.rfind(':') + 1)); }
  std::string output() {
    Drain(0);
    return output_;
  }

  // Sends sig and waits up to `timeout` for the exit; returns the exit code (-1: killed by a
  // signal, -2: still running after the timeout, then killed).
  int Stop(int sig, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        Drain(0);
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return exit_code_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    exit_code_ = -2;
    return exit_code_;
  }

  // Resident set size of the server, from /proc.
  int64_t RssBytes() const {
    std::string statm = ReadAll("/proc/" + std::to_string(pid_) + "/statm");
    long size = 0, resident = 0;
    if (std::sscanf(statm.c_str(), "%ld %ld", &size, &resident) != 2) return -1;
    return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
  }

 private:
  void Drain(int timeout_ms) {
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return;
    char buf[4096];
    for (;;) {
      ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) break;
      output_.append(buf, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int exit_code_ = -1;
  std::string output_;
  std::string address_;
};

}  // namespace sluice::testing
