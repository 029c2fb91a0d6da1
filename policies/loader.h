// Loading a policy file: strict YAML reading, validation with file:line:col diagnostics,
// compilation into an immutable Policy. Stateless functions; safe to call from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "policies/policy.h"

namespace ferry::policies {

struct Diagnostic {
  std::string file;
  int line = 0;  // 1-based; 0 when the position is unknown
  int column = 0;
  std::string message;
  std::string to_string() const;  // "FILE:LINE:COL: message"
};

struct LoadOptions {
  // Config model names a target may refer to; nullopt = do not check references.
  std::optional<std::vector<std::string>> known_targets;
};

struct LoadResult {
  std::shared_ptr<const Policy> policy;  // null when there are errors
  std::vector<Diagnostic> errors;
  std::vector<Diagnostic> warnings;  // e.g. rules that can never match

  bool ok() const { return policy != nullptr; }
  std::string errors_text() const;  // one diagnostic a line
  std::string warnings_text() const;
};

// Never throws: every problem, including unreadable files and invalid YAML, is a Diagnostic.
LoadResult load_policy_text(const std::string& text, const std::string& source,
                            const LoadOptions& options = {});
LoadResult load_policy_file(const std::string& path, const LoadOptions& options = {});

// "UTC", "Z", "+05:30", "-08:00", "UTC+02:00" -> minutes east of UTC.
std::optional<int> parse_utc_offset(const std::string& text);

}  // namespace ferry::policies
