// RFC 4180 CSV for the tests of ferry's exports (the ledger's CSV in the store, HTTP and
// Responses tests): quoted fields may hold commas, doubled quotes and newlines; CR is dropped
// outside quotes. Header-only; any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ferry::testing {

// Every line's fields, the header line included.
inline std::vector<std::vector<std::string>> csv_lines(const std::string& text) {
  std::vector<std::vector<std::string>> lines(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',' || c == '\n') {
      lines.back().push_back(std::move(field));
      field.clear();
      if (c == '\n') lines.emplace_back();
    } else if (c != '\r') {
      field += c;
    }
  }
  if (!field.empty()) lines.back().push_back(std::move(field));  // no newline at the end
  if (lines.back().empty()) lines.pop_back();
  return lines;
}

using CsvRow = std::map<std::string, std::string>;

// The lines after the header, each keyed by the header's names.
inline std::vector<CsvRow> csv_rows(const std::string& text) {
  const auto lines = csv_lines(text);
  std::vector<CsvRow> rows;
  for (size_t i = 1; i < lines.size(); ++i) {
    CsvRow r;
    for (size_t j = 0; j < lines[0].size() && j < lines[i].size(); ++j)
      r[lines[0][j]] = lines[i][j];
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace ferry::testing
