#include "policies/store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/sha256.h"

namespace ferry::policies {

namespace {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes next to the target and renames over it, so readers never see half a file.
bool write_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out << text;
    out.flush();
    if (!out) return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

nlohmann::json diagnostics_json(const std::vector<Diagnostic>& list) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& d : list) {
    arr.push_back({{"file", d.file},
                   {"line", d.line},
                   {"column", d.column},
                   {"message", d.message},
                   {"text", d.to_string()}});
  }
  return arr;
}

}  // namespace

PolicyStore::PolicyStore(std::string path, LoadOptions options)
    : path_(std::move(path)), options_(std::move(options)) {}

PolicyStore::~PolicyStore() {
  stop_watching();
}

Result<std::unique_ptr<PolicyStore>> PolicyStore::open(const std::string& path,
                                                       LoadOptions options) {
  std::unique_ptr<PolicyStore> store(new PolicyStore(path, std::move(options)));
  LoadResult loaded = load_policy_file(path, store->options_);
  if (!loaded.ok()) {
    std::string text = loaded.errors_text();
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return Error::make(ErrorCode::kInvalidRequest, text);
  }
  store->current_ = loaded.policy;
  store->status_.loaded_at_unix_micros = unix_micros_now();
  store->status_.loaded_by = "start-up";
  store->status_.warnings = std::move(loaded.warnings);
  return store;
}

ReloadOutcome PolicyStore::reload(std::string_view trigger) {
  std::optional<std::string> text = read_file(path_);
  if (!text) {
    std::lock_guard lock(reload_mu_);
    ReloadOutcome out;
    out.trigger = std::string(trigger);
    out.errors.push_back({path_, 0, 0, "cannot read the policy file"});
    {
      std::lock_guard slock(status_mu_);
      status_.last_rejected = RejectedAttempt{unix_micros_now(), "", out.trigger, out.errors};
      ++status_.reloads_rejected;
    }
    if (listener_) listener_(out);
    return out;
  }
  return offer(*text, trigger, false);
}

ReloadOutcome PolicyStore::apply_text(const std::string& text, std::string_view trigger,
                                      bool persist) {
  return offer(text, trigger, persist);
}

ReloadOutcome PolicyStore::offer(const std::string& text, std::string_view trigger, bool persist) {
  std::lock_guard lock(reload_mu_);
  ReloadOutcome out;
  out.trigger = std::string(trigger);
  std::shared_ptr<const Policy> active = current();
  std::string version = sha256_hex(text);
  out.version = version.substr(0, 12);
  if (active && active->version() == version) {
    out.unchanged = true;
    if (listener_) listener_(out);
    return out;
  }
  LoadResult loaded = load_policy_text(text, path_, options_);
  out.warnings = loaded.warnings;
  if (loaded.ok() && persist && !write_atomically(path_, text)) {
    out.errors.push_back(
        {path_, 0, 0, std::string("cannot write the policy file: ") + std::strerror(errno)});
  }
  if (!loaded.ok()) out.errors = loaded.errors;
  if (!out.errors.empty()) {
    std::lock_guard slock(status_mu_);
    status_.last_rejected =
        RejectedAttempt{unix_micros_now(), out.version, out.trigger, out.errors};
    ++status_.reloads_rejected;
  } else {
    std::shared_ptr<const Policy> previous;  // freed after the lock, not under it
    {
      std::lock_guard swap_lock(current_mu_);  // readers see the old or the new, never a mix
      previous = std::move(current_);
      current_ = loaded.policy;
    }
    out.applied = true;
    std::lock_guard slock(status_mu_);
    status_.loaded_at_unix_micros = unix_micros_now();
    status_.loaded_by = out.trigger;
    status_.warnings = loaded.warnings;
    ++status_.reloads_applied;
  }
  if (listener_) listener_(out);
  return out;
}

StoreStatus PolicyStore::status() const {
  std::lock_guard lock(status_mu_);
  StoreStatus s = status_;
  s.policy = current();
  return s;
}

nlohmann::json PolicyStore::status_json() const {
  StoreStatus s = status();
  nlohmann::json j;
  j["path"] = path_;
  j["version"] = s.policy->short_version();
  j["sha256"] = s.policy->version();
  j["loaded_at"] = format_utc_micros(s.loaded_at_unix_micros);
  j["loaded_by"] = s.loaded_by;
  j["rules"] = s.policy->rules().size();
  j["warnings"] = diagnostics_json(s.warnings);
  j["reloads_applied"] = s.reloads_applied;
  j["reloads_rejected"] = s.reloads_rejected;
  if (s.last_rejected) {
    j["last_rejected"] = {{"at", format_utc_micros(s.last_rejected->at_unix_micros)},
                          {"version", s.last_rejected->version},
                          {"trigger", s.last_rejected->trigger},
                          {"errors", diagnostics_json(s.last_rejected->errors)}};
  } else {
    j["last_rejected"] = nullptr;
  }
  return j;
}

void PolicyStore::set_listener(std::function<void(const ReloadOutcome&)> listener) {
  std::lock_guard lock(reload_mu_);
  listener_ = std::move(listener);
}

Status PolicyStore::watch(std::chrono::milliseconds debounce) {
  if (watcher_.joinable()) return {};
  std::filesystem::path p(path_);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    return Error::make(ErrorCode::kInternal,
                       std::string("inotify_init1 failed: ") + std::strerror(errno));
  }
  uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_MODIFY | IN_DELETE | IN_ATTRIB;
  if (::inotify_add_watch(fd, dir.c_str(), mask) < 0) {
    int err = errno;
    ::close(fd);
    return Error::make(ErrorCode::kInternal,
                       "cannot watch " + dir + ": " + std::string(std::strerror(err)));
  }
  int stop = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop < 0) {
    ::close(fd);
    return Error::make(ErrorCode::kInternal,
                       std::string("eventfd failed: ") + std::strerror(errno));
  }
  stop_fd_ = stop;
  watcher_ = std::thread([this, fd, stop, debounce] { watch_loop(fd, stop, debounce); });
  return {};
}

void PolicyStore::stop_watching() {
  if (!watcher_.joinable()) return;
  uint64_t one = 1;
  ssize_t n = ::write(stop_fd_, &one, sizeof(one));
  (void)n;
  watcher_.join();
  ::close(stop_fd_);
  stop_fd_ = -1;
}

void PolicyStore::watch_loop(int inotify_fd, int stop_fd, std::chrono::milliseconds debounce) {
  std::string name = std::filesystem::path(path_).filename().string();
  bool pending = false;
  auto deadline = std::chrono::steady_clock::now();
  alignas(struct inotify_event) char buf[8192];
  for (;;) {
    int timeout = -1;
    if (pending) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      timeout = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    pollfd fds[2] = {{inotify_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int ready = ::poll(fds, 2, timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents) break;
    if (fds[0].revents & POLLIN) {
      for (;;) {
        ssize_t len = ::read(inotify_fd, buf, sizeof(buf));
        if (len <= 0) break;
        for (ssize_t off = 0; off < len;) {
          const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
          if (ev->len > 0 && name == ev->name) {
            pending = true;
            deadline = std::chrono::steady_clock::now() + debounce;  // restart the quiet time
          }
          off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
        }
      }
      continue;
    }
    if (pending && std::chrono::steady_clock::now() >= deadline) {
      pending = false;
      reload("file change");
    }
  }
  ::close(inotify_fd);
}

}  // namespace ferry::policies
