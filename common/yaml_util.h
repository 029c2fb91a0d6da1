// Strict YAML reading with file:line:column errors, shared by the config and policy loaders.
// Stateless helpers; a YamlError is thrown and caught at the loader's boundary (control plane).
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::yaml {

// An error located in a YAML document. what() is "FILE:LINE:COL: message" (1-based).
class YamlError : public std::runtime_error {
 public:
  YamlError(const std::string& file, const YAML::Mark& mark, const std::string& message);
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_ = 0;
  int column_ = 0;
};

// Bounds on a YAML document read from a user (config, policy file, PUT /admin/policy), so
// that an alias bomb (aliases of aliases, each repeating what it refers to) or a deep nest
// is refused before anything walks it. Nodes and depth count aliases as what they expand to.
struct Limits {
  size_t max_bytes = 4 << 20;
  int64_t max_nodes = 200'000;
  int max_depth = 100;  // the root is depth 0
};

// Reads the first document's events (no tree is built) and throws YAML::ParserException,
// marked where the limit is crossed, when the text breaks a limit or is not valid YAML. An
// alias of a node from inside that node (a cycle) is refused too.
void check_limits(const std::string& text, const Limits& limits = {});

// check_limits, then YAML::Load. Throws YAML::Exception.
YAML::Node load(const std::string& text, const Limits& limits = {});

// Parses text into a node (within the default Limits), turning yaml-cpp parse errors and
// broken limits into YamlError.
YAML::Node parse(const std::string& text, const std::string& file);

// Reads a file and parses it. Throws YamlError (with line 0) when the file cannot be read.
YAML::Node parse_file(const std::string& path);

// A cursor over one mapping that remembers which file it came from.
class Map {
 public:
  Map(const YAML::Node& node, std::string file, const std::string& what);

  // Refuses any key not in `allowed`, naming the key and listing the allowed ones.
  void allow_only(std::initializer_list<const char*> allowed) const;

  bool has(const char* key) const;
  YAML::Node raw(const char* key) const;  // the node or an undefined one

  std::string str(const char* key) const;  // required string
  std::optional<std::string> opt_str(const char* key) const;
  int64_t integer(const char* key, int64_t min, int64_t max) const;  // required
  int64_t integer_or(const char* key, int64_t fallback, int64_t min, int64_t max) const;
  bool boolean_or(const char* key, bool fallback) const;
  std::vector<std::string> str_list_or_empty(const char* key) const;
  Map map(const char* key) const;  // required mapping
  std::optional<Map> opt_map(const char* key) const;
  std::vector<YAML::Node> seq_or_empty(const char* key) const;

  [[noreturn]] void fail(const char* key, const std::string& message) const;
  [[noreturn]] void fail_here(const std::string& message) const;

  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }

 private:
  YAML::Node node_;
  std::string file_;
};

// Scalar conversions that fail with a located error.
std::string scalar_str(const YAML::Node& node, const std::string& file, const std::string& what);
int64_t scalar_int(const YAML::Node& node, const std::string& file, const std::string& what);

}  // namespace ferry::yaml
