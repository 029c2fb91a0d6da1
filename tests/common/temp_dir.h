// A directory of its own under the system's temporary directory, removed with everything in it
// when the object goes: tests that write files (a GGUF model, a ledger) leave nothing behind.
// A function-local static one lives until the test binary exits. Header-only; the object itself
// is not synchronized (create it once, then share its paths).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace ferry::testing {

class TempDir {
 public:
  // STEM names the directory (STEM_XXXXXX), so a leftover shows which tests left it.
  explicit TempDir(const std::string& stem = "ferry_test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (stem + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot create a temporary directory " + pattern);
    }
    path_ = pattern;
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

}  // namespace ferry::testing
