#include "campaign.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace weave::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

nlohmann::json ToJson(const CheckResult& r) {
  nlohmann::json j;
  j["verdict"] = std::string(VerdictName(r.verdict));
  j["check"] = r.check;
  j["detail"] = r.detail;
  j["fired"] = r.fired;
  j["windowed_loops"] = r.windowed_loops;
  j["max_rel_error"] = r.max_rel_error;
  nlohmann::json f = nlohmann::json::array();
  for (const auto& [k, v] : r.findings) f.push_back({k, v});
  j["findings"] = f;
  return j;
}

CheckResult FromJson(const nlohmann::json& j) {
  CheckResult r;
  r.verdict = ParseVerdict(j.value("verdict", "INVALID")).value_or(Verdict::kInvalid);
  r.check = j.value("check", "");
  r.detail = j.value("detail", "");
  if (j.contains("fired")) r.fired = j["fired"].get<std::map<std::string, bool>>();
  r.windowed_loops = j.value("windowed_loops", 0);
  r.max_rel_error = j.value("max_rel_error", 0.0);
  if (j.contains("findings")) {
    for (const auto& f : j["findings"]) r.findings.emplace_back(f[0].get<std::string>(), f[1].get<std::string>());
  }
  return r;
}

struct Running {
  size_t index = 0;
  pid_t pid = -1;
  int fd = -1;
  std::string buffer;
  Clock::time_point start, deadline;
  bool killed = false;
};

// In the child: runs the job, streaming progress labels ("P label") and the result ("R json").
[[noreturn]] void ChildMain(const TextMaker& job, CheckOptions options, int fd) {
  options.progress = [fd](const std::string& label) { WriteAll(fd, absl::StrCat("P ", label, "\n")); };
  options.progress("generate");
  const std::string text = job();
  CheckResult r = CheckModuleText(text, options);
  WriteAll(fd, absl::StrCat("R ", ToJson(r).dump(), "\n"));
  close(fd);
  _exit(0);
}

ChildResult Finish(Running& r, int status) {
  ChildResult out;
  out.seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
  std::string result_line;
  size_t pos = 0;
  while (pos < r.buffer.size()) {
    size_t nl = r.buffer.find('\n', pos);
    if (nl == std::string::npos) nl = r.buffer.size();
    std::string line = r.buffer.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("P ", 0) == 0) out.last_step = line.substr(2);
    if (line.rfind("R ", 0) == 0) result_line = line.substr(2);
  }
  if (r.killed) {
    out.check.verdict = Verdict::kTimeout;
    out.check.check = absl::StrCat("timeout:", out.last_step);
    out.check.detail = absl::StrCat("no result after ", out.seconds, " s; last step: ", out.last_step);
    return out;
  }
  if (!result_line.empty()) {
    try {
      out.check = FromJson(nlohmann::json::parse(result_line));
      return out;
    } catch (...) {
    }
  }
  out.check.verdict = Verdict::kCrash;
  if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
    out.check.check = absl::StrCat("signal:", out.last_step);
    out.check.detail = absl::StrCat("killed by signal ", out.signal, " (", strsignal(out.signal),
                                    ") during: ", out.last_step);
  } else {
    out.check.check = absl::StrCat("exit:", out.last_step);
    out.check.detail = absl::StrCat("exited with status ", WEXITSTATUS(status),
                                    " without a result (sanitizer report?) during: ", out.last_step);
  }
  return out;
}

}  // namespace

void RunInChildren(const std::vector<TextMaker>& jobs, const CheckOptions& options, int parallel,
                   double timeout_s,
                   const std::function<bool(size_t, const ChildResult&)>& done) {
  if (parallel < 1) parallel = 1;
  std::vector<Running> running;
  size_t next = 0;
  bool stop = false;
  std::fflush(stdout);
  std::fflush(stderr);
  while ((!stop && next < jobs.size()) || !running.empty()) {
    while (!stop && next < jobs.size() && static_cast<int>(running.size()) < parallel) {
      int fds[2];
      if (pipe(fds) != 0) {
        perror("pipe");
        return;
      }
      pid_t pid = fork();
      if (pid == 0) {
        close(fds[0]);
        ChildMain(jobs[next], options, fds[1]);
      }
      close(fds[1]);
      Running r;
      r.index = next++;
      r.pid = pid;
      r.fd = fds[0];
      r.start = Clock::now();
      r.deadline = r.start + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
      running.push_back(std::move(r));
    }
    std::vector<pollfd> pfds;
    int wait_ms = 1000;
    const auto now = Clock::now();
    for (const Running& r : running) {
      pfds.push_back({r.fd, POLLIN, 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(r.deadline - now).count();
      wait_ms = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(wait_ms, left)));
    }
    poll(pfds.data(), pfds.size(), wait_ms);
    for (size_t i = running.size(); i-- > 0;) {
      Running& r = running[i];
      bool eof = false;
      if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        ssize_t n = read(r.fd, buf, sizeof(buf));
        if (n > 0) {
          r.buffer.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          eof = true;
        }
      }
      if (!eof && Clock::now() >= r.deadline) {
        kill(r.pid, SIGKILL);
        r.killed = true;
        eof = true;
      }
      if (!eof) continue;
      close(r.fd);
      int status = 0;
      while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
      }
      ChildResult res = Finish(r, status);
      const size_t index = r.index;
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      if (!done(index, res)) stop = true;
    }
  }
}

ChildResult RunOneInChild(const TextMaker& job, const CheckOptions& options, double timeout_s) {
  ChildResult out;
  RunInChildren({job}, options, 1, timeout_s, [&](size_t, const ChildResult& r) {
    out = r;
    return true;
  });
  return out;
}

}  // namespace weave::fuzz
