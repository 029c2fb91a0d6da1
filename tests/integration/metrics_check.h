// Checks a /metrics text against the one table of series (gateway/metrics.h, header-only use):
// every family it shows is declared there once, with the declared type, help and label names.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "gateway/metrics.h"

namespace ferry::itest {

inline const gateway::MetricSpec* declared_metric(std::string_view name) {
  for (const auto& spec : gateway::kMetricTable) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// The label names of a sample line ("name{a=\"x\",b=\"y\"} 1" -> "a,b"), without a bucket's le.
inline std::string sample_label_names(std::string_view line) {
  std::string names;
  size_t open = line.find('{');
  if (open == std::string_view::npos) return names;
  size_t i = open + 1;
  while (i < line.size() && line[i] != '}') {
    size_t eq = line.find('=', i);
    if (eq == std::string_view::npos) break;
    std::string_view name = line.substr(i, eq - i);
    size_t j = eq + 2;  // past ="
    while (j < line.size() && line[j] != '"') j += line[j] == '\\' ? 2 : 1;
    if (name != "le") names += (names.empty() ? "" : ",") + std::string(name);
    i = j + 1;
    if (i < line.size() && line[i] == ',') ++i;
  }
  return names;
}

inline void expect_metrics_declared(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::string help_of;  // the family of the last HELP line
  std::set<std::string> families;
  const gateway::MetricSpec* current = nullptr;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      std::string rest = line.substr(7);
      std::string name = rest.substr(0, rest.find(' '));
      const auto* spec = declared_metric(name);
      ASSERT_NE(spec, nullptr) << "family not declared in gateway/metrics.h: " << line;
      EXPECT_EQ(rest.substr(name.size() + 1), spec->help) << line;
      EXPECT_TRUE(families.insert(name).second) << "family shown twice: " << name;
      help_of = name;
      current = spec;
    } else if (line.rfind("# TYPE ", 0) == 0) {
      std::string rest = line.substr(7);
      std::string name = rest.substr(0, rest.find(' '));
      EXPECT_EQ(name, help_of) << "TYPE without its HELP: " << line;
      ASSERT_NE(current, nullptr) << line;
      EXPECT_EQ(rest.substr(name.size() + 1), gateway::metric_type_name(current->type)) << line;
    } else if (!line.empty()) {
      ASSERT_NE(current, nullptr) << "sample before any family: " << line;
      std::string name = line.substr(0, line.find_first_of("{ "));
      std::string family(current->name);
      bool ok = name == family;
      if (current->type == gateway::MetricType::kHistogram) {
        ok = ok || name == family + "_bucket" || name == family + "_sum" ||
             name == family + "_count";
      }
      EXPECT_TRUE(ok) << "sample of another family under " << family << ": " << line;
      EXPECT_EQ(sample_label_names(line), current->labels) << line;
    }
  }
  EXPECT_FALSE(families.empty()) << text;
}

}  // namespace ferry::itest
