#include "policies/yaml_tree.h"

namespace ferry::policies::ytree {

namespace {
const NodeData kUndefinedNode{};
}  // namespace

Node SeqRange::iterator::operator*() const {
  return Node(*p_);
}

std::pair<Node, Node> MapRange::iterator::operator*() const {
  return {Node(p_->first), Node(p_->second)};
}

Node::Node() : d_(&kUndefinedNode) {}

size_t Node::size() const {
  if (d_->type == Type::kSequence) return d_->items.size();
  if (d_->type == Type::kMap) return d_->entries.size();
  return 0;
}

Node Node::operator[](std::string_view key) const {
  for (const auto& [k, v] : d_->entries) {
    if (k->type == Type::kScalar && k->scalar == key) return Node(v);
  }
  return Node();
}

NodeData* Document::make(Type type, const YAML::Mark& mark) {
  NodeData& node = nodes_.emplace_back();
  node.type = type;
  node.mark = mark;
  return &node;
}

// ---------------------------------------------------------------------------------------
// The fast path. A recursive descent over the text that reads only what it is sure to read
// exactly as yaml-cpp does; at anything else it gives up (Unsupported) and yaml-cpp parses the
// whole text instead, so that odd and invalid documents get yaml-cpp's tree or error.

class FastParser {
 public:
  FastParser(const std::string& text, Document& doc, int64_t max_nodes)
      : t_(text), doc_(doc), max_nodes_(max_nodes) {}

  const NodeData* run() {
    try {
      if (!prescan()) return nullptr;
      if (!skip_to_content()) return nullptr;  // empty: yaml-cpp's null document
      if (col() != 0 || is_seq_entry() || !line_has_key()) return nullptr;
      const NodeData* root = parse_block_map(0);
      if (skip_to_content()) return nullptr;
      return root;
    } catch (const Unsupported&) {
      return nullptr;
    }
  }

 private:
  struct Unsupported {};
  [[noreturn]] static void bail() { throw Unsupported{}; }

  // Only printable ASCII, spaces and newlines: no tabs, carriage returns, byte order marks or
  // multi-byte characters (whose columns yaml-cpp counts its own way); and no line that starts
  // with a document marker ("---" or "...", then a blank), which yaml-cpp reads wherever it is.
  bool prescan() const {
    for (size_t i = 0; i < t_.size(); ++i) {
      auto c = static_cast<unsigned char>(t_[i]);
      if (c == '\n') continue;
      if (c < 0x20 || c >= 0x7f) return false;
      if ((i == 0 || t_[i - 1] == '\n') && (c == '-' || c == '.') && document_marker_at(i)) {
        return false;
      }
    }
    return true;
  }
  bool document_marker_at(size_t i) const {
    if (t_.compare(i, 3, t_[i] == '-' ? "---" : "...") != 0) return false;
    return i + 3 >= t_.size() || t_[i + 3] == ' ' || t_[i + 3] == '\n';
  }

  bool eof() const { return pos_ >= t_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < t_.size() ? t_[pos_ + ahead] : '\0'; }
  int col() const { return static_cast<int>(pos_ - line_start_); }
  YAML::Mark mark() const {
    YAML::Mark m = YAML::Mark::null_mark();
    m.pos = static_cast<int>(pos_);
    m.line = line_;
    m.column = col();
    return m;
  }
  void newline() {  // at '\n'
    ++pos_;
    ++line_;
    line_start_ = pos_;
  }
  // A space, a line break or the end after offset `ahead`.
  bool blank_at(size_t ahead) const {
    char c = peek(ahead);
    return c == ' ' || c == '\n' || c == '\0';
  }

  // Skips spaces, comments and line breaks. False at the end of the text.
  bool skip_to_content() {
    for (;;) {
      while (peek() == ' ') ++pos_;
      if (peek() == '#') {
        while (!eof() && peek() != '\n') ++pos_;
      }
      if (eof()) return false;
      if (peek() != '\n') return true;
      newline();
    }
  }

  // Skips spaces and a comment; true when the line ends there (the break is not consumed).
  bool at_line_end() {
    while (peek() == ' ') ++pos_;
    if (peek() == '#' && (pos_ == line_start_ || t_[pos_ - 1] == ' ')) {
      while (!eof() && peek() != '\n') ++pos_;
    }
    return eof() || peek() == '\n';
  }

  bool is_seq_entry() const { return peek() == '-' && blank_at(1); }

  // Whether the content at the cursor is `KEY:` (a plain or quoted key, then ':' and a blank).
  bool line_has_key() const {
    size_t p = pos_;
    char first = p < t_.size() ? t_[p] : '\0';
    if (first == '"' || first == '\'') {
      for (++p; p < t_.size() && t_[p] != '\n'; ++p) {
        if (first == '"' && t_[p] == '\\') {
          ++p;
        } else if (t_[p] == first) {
          if (first == '\'' && p + 1 < t_.size() && t_[p + 1] == '\'') {
            ++p;
            continue;
          }
          return p + 1 < t_.size() && t_[p + 1] == ':' &&
                 (p + 2 >= t_.size() || t_[p + 2] == ' ' || t_[p + 2] == '\n');
        }
      }
      return false;
    }
    if (first == '[' || first == '{') return false;
    for (; p < t_.size() && t_[p] != '\n'; ++p) {
      if (t_[p] == ':' && (p + 1 >= t_.size() || t_[p + 1] == ' ' || t_[p + 1] == '\n')) {
        return true;
      }
      if (t_[p] == '#' && p > pos_ && t_[p - 1] == ' ') return false;
    }
    return false;
  }

  // A plain scalar may not start with an indicator; '-' only before a non-blank ("-1").
  void check_plain_start(bool flow) const {
    char c = peek();
    switch (c) {
      case '-':
        if (blank_at(1) || (flow && (peek(1) == ',' || peek(1) == ']' || peek(1) == '}'))) bail();
        return;
      case '?':
      case ':':
      case ',':
      case '[':
      case ']':
      case '{':
      case '}':
      case '#':
      case '&':
      case '*':
      case '!':
      case '|':
      case '>':
      case '\'':
      case '"':
      case '%':
      case '@':
      case '`':
      case '\0':
      case '\n':
      case ' ':
        bail();
      default:
        return;
    }
  }

  NodeData* plain_node(size_t start, size_t end, const YAML::Mark& at) {
    while (end > start && t_[end - 1] == ' ') --end;
    if (end == start) bail();
    std::string_view text(t_.data() + start, end - start);
    bool null = text == "~" || text == "null" || text == "Null" || text == "NULL";
    NodeData* node = make(null ? Type::kNull : Type::kScalar, at);
    node->scalar.assign(text);
    return node;
  }

  // An empty value: marked where the next token starts. At the end of the text that token
  // closes the innermost block collection, the one at `indent`, and yaml-cpp marks it where the
  // trailing blanks (or comment) end when that column closes the collection (left of a map's
  // keys, at or left of a sequence's dashes); else it ends the stream, marked at column 0.
  NodeData* null_here(int indent, bool in_sequence) {
    YAML::Mark at = mark();
    if (eof() && !(at.column < indent || (in_sequence && at.column == indent))) at.column = 0;
    return make(Type::kNull, at);
  }

  // 'single' or "double" quoted, on one line.
  NodeData* quoted() {
    NodeData* node = make(Type::kScalar, mark());
    char quote = peek();
    ++pos_;
    for (;;) {
      char c = peek();
      if (c == '\n' || c == '\0') bail();
      if (c == quote) {
        if (quote == '\'' && peek(1) == '\'') {
          node->scalar += '\'';
          pos_ += 2;
          continue;
        }
        ++pos_;
        return node;
      }
      if (quote == '"' && c == '\\') {
        switch (peek(1)) {
          case '\\':
            node->scalar += '\\';
            break;
          case '"':
            node->scalar += '"';
            break;
          case 'n':
            node->scalar += '\n';
            break;
          case 't':
            node->scalar += '\t';
            break;
          default:
            bail();
        }
        pos_ += 2;
        continue;
      }
      node->scalar += c;
      ++pos_;
    }
  }

  // ----- block context -----

  // KEY: (the cursor ends after the colon).
  const NodeData* parse_key() {
    char c = peek();
    if (c == '"' || c == '\'') {
      const NodeData* key = quoted();
      if (peek() != ':' || !blank_at(1)) bail();
      ++pos_;
      return key;
    }
    check_plain_start(false);
    YAML::Mark at = mark();
    size_t start = pos_;
    for (;;) {
      c = peek();
      if (c == '\n' || c == '\0') bail();
      if (c == ':' && blank_at(1)) break;
      if (c == '#' && t_[pos_ - 1] == ' ') bail();
      if (c == '?') bail();
      ++pos_;
    }
    if (t_[pos_ - 1] == ' ') bail();  // "key :"
    NodeData* key = plain_node(start, pos_, at);
    ++pos_;
    return key;
  }

  // A scalar or flow collection that starts on the current line.
  const NodeData* parse_inline(int parent_indent) {
    char c = peek();
    if (c == '[' || c == '{') return parse_flow(parent_indent);
    if (c == '"' || c == '\'') return quoted();
    check_plain_start(false);
    YAML::Mark at = mark();
    size_t start = pos_;
    for (;;) {
      c = peek();
      if (c == '\n' || c == '\0') break;
      if (c == ':' && blank_at(1)) bail();  // a mapping where a scalar is: yaml-cpp decides
      if (c == '#' && t_[pos_ - 1] == ' ') break;
      if (c == '?') bail();  // yaml-cpp reads '?' inside plain scalars its own way
      ++pos_;
    }
    return plain_node(start, pos_, at);
  }

  const NodeData* parse_block_node(int indent) {
    if (is_seq_entry()) return parse_block_seq(indent);
    if (line_has_key()) return parse_block_map(indent);
    const NodeData* value = parse_inline(indent - 1);
    if (!at_line_end()) bail();
    return value;
  }

  const NodeData* parse_map_value(int indent) {
    if (at_line_end()) {
      if (!skip_to_content()) return null_here(indent, false);
      int c = col();
      if (c > indent) return parse_block_node(c);
      if (c == indent && is_seq_entry()) return parse_block_seq(indent);
      return null_here(indent, false);
    }
    const NodeData* value = parse_inline(indent);
    if (!at_line_end()) bail();
    return value;
  }

  // Nesting deeper than this is left to yaml-cpp (and its limits).
  struct Nest {
    explicit Nest(int& depth) : depth_(depth) {
      if (++depth_ > 64) bail();
    }
    ~Nest() { --depth_; }
    int& depth_;
  };

  const NodeData* parse_block_map(int indent) {
    Nest nest(depth_);
    NodeData* map = make(Type::kMap, mark());
    for (;;) {
      if (is_seq_entry()) bail();
      const NodeData* key = parse_key();
      const NodeData* value = parse_map_value(indent);
      map->entries.emplace_back(key, value);
      if (!skip_to_content()) return map;
      int c = col();
      if (c < indent) return map;
      if (c > indent) bail();
    }
  }

  const NodeData* parse_block_seq(int indent) {
    Nest nest(depth_);
    NodeData* seq = make(Type::kSequence, mark());
    for (;;) {
      ++pos_;  // the '-'
      if (at_line_end()) {
        if (!skip_to_content()) {
          seq->items.push_back(null_here(indent, true));
          return seq;
        }
        int c = col();
        seq->items.push_back(c > indent ? parse_block_node(c) : null_here(indent, true));
      } else {
        int c = col();
        if (is_seq_entry()) {
          seq->items.push_back(parse_block_seq(c));
        } else if (line_has_key()) {
          seq->items.push_back(parse_block_map(c));
        } else {
          seq->items.push_back(parse_inline(indent));
          if (!at_line_end()) bail();
        }
      }
      if (!skip_to_content()) return seq;
      int c = col();
      if (c < indent) return seq;
      if (c > indent) bail();
      if (!is_seq_entry()) return seq;  // the next key of the map this list is the value of
    }
  }

  // ----- flow context -----

  // Skips spaces, comments and line breaks inside a flow collection; continuation lines
  // must be indented past the block that holds the collection.
  void skip_flow_space(int parent_indent) {
    for (;;) {
      while (peek() == ' ') ++pos_;
      if (peek() == '#' && (pos_ == line_start_ || t_[pos_ - 1] == ' ')) {
        while (!eof() && peek() != '\n') ++pos_;
      }
      if (eof()) bail();  // unterminated
      if (peek() != '\n') return;
      newline();
      while (peek() == ' ') ++pos_;
      if (peek() != '\n' && peek() != '#' && col() <= parent_indent) bail();
    }
  }

  const NodeData* parse_flow(int parent_indent) {
    Nest nest(depth_);
    return peek() == '[' ? parse_flow_seq(parent_indent) : parse_flow_map(parent_indent);
  }

  const NodeData* parse_flow_node(int parent_indent) {
    char c = peek();
    if (c == '[' || c == '{') return parse_flow(parent_indent);
    if (c == '"' || c == '\'') return quoted();
    check_plain_start(true);
    YAML::Mark at = mark();
    size_t start = pos_;
    for (;;) {
      c = peek();
      if (c == '\n' || c == '\0' || c == ',' || c == '[' || c == ']' || c == '{' || c == '}') {
        break;
      }
      if (c == ':') {
        char next = peek(1);
        if (next == ' ' || next == '\n' || next == '\0' || next == ',' || next == ']' ||
            next == '}' || next == '[' || next == '{') {
          break;
        }
      }
      if (c == '#' && t_[pos_ - 1] == ' ') break;
      if (c == '?') bail();
      ++pos_;
    }
    return plain_node(start, pos_, at);
  }

  const NodeData* parse_flow_seq(int parent_indent) {
    NodeData* seq = make(Type::kSequence, mark());
    ++pos_;
    skip_flow_space(parent_indent);
    if (peek() == ']') {
      ++pos_;
      return seq;
    }
    for (;;) {
      seq->items.push_back(parse_flow_node(parent_indent));
      skip_flow_space(parent_indent);
      char c = peek();
      if (c == ']') {
        ++pos_;
        return seq;
      }
      if (c != ',') bail();  // including "key: value" pairs inside a list
      ++pos_;
      skip_flow_space(parent_indent);
      if (peek() == ']') bail();  // a trailing comma
    }
  }

  const NodeData* parse_flow_map(int parent_indent) {
    NodeData* map = make(Type::kMap, mark());
    ++pos_;
    skip_flow_space(parent_indent);
    if (peek() == '}') {
      ++pos_;
      return map;
    }
    for (;;) {
      char c = peek();
      if (c == '[' || c == '{') bail();  // a collection as a key
      const NodeData* key = parse_flow_node(parent_indent);
      while (peek() == ' ') ++pos_;
      if (peek() != ':' || !blank_at(1)) bail();
      ++pos_;
      skip_flow_space(parent_indent);
      c = peek();
      if (c == ',' || c == '}') bail();  // an empty value
      const NodeData* value = parse_flow_node(parent_indent);
      map->entries.emplace_back(key, value);
      skip_flow_space(parent_indent);
      c = peek();
      if (c == '}') {
        ++pos_;
        return map;
      }
      if (c != ',') bail();
      ++pos_;
      skip_flow_space(parent_indent);
      if (peek() == '}') bail();  // a trailing comma
    }
  }

  // Every node is made here; past the budget yaml-cpp's path refuses the document with a mark.
  NodeData* make(Type type, const YAML::Mark& at) {
    if (static_cast<int64_t>(doc_.node_count()) >= max_nodes_) bail();
    return doc_.make(type, at);
  }

  const std::string& t_;
  Document& doc_;
  int64_t max_nodes_;
  size_t pos_ = 0;
  int line_ = 0;
  size_t line_start_ = 0;
  int depth_ = 0;
};

std::unique_ptr<Document> Document::parse_fast(const std::string& text, int64_t max_nodes) {
  auto doc = std::make_unique<Document>();
  FastParser parser(text, *doc, max_nodes);
  const NodeData* root = parser.run();
  if (root == nullptr) return nullptr;
  doc->root_ = root;
  doc->fast_ = true;
  return doc;
}

namespace {

const NodeData* convert(const YAML::Node& node, Document& doc) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return doc.make(Type::kNull, node.Mark());
    case YAML::NodeType::Scalar: {
      NodeData* data = doc.make(Type::kScalar, node.Mark());
      data->scalar = node.Scalar();
      return data;
    }
    case YAML::NodeType::Sequence: {
      NodeData* data = doc.make(Type::kSequence, node.Mark());
      for (const auto& item : node) data->items.push_back(convert(item, doc));
      return data;
    }
    case YAML::NodeType::Map: {
      NodeData* data = doc.make(Type::kMap, node.Mark());
      for (const auto& kv : node) {
        const NodeData* key = convert(kv.first, doc);
        data->entries.emplace_back(key, convert(kv.second, doc));
      }
      return data;
    }
    case YAML::NodeType::Undefined:
      break;
  }
  return doc.make(Type::kUndefined, YAML::Mark::null_mark());
}

}  // namespace

std::unique_ptr<Document> Document::from_yaml_cpp(const YAML::Node& root) {
  auto doc = std::make_unique<Document>();
  doc->root_ = convert(root, *doc);
  return doc;
}

std::unique_ptr<Document> Document::parse(const std::string& text, const yaml::Limits& limits) {
  if (text.size() <= limits.max_bytes) {
    if (auto fast = parse_fast(text, limits.max_nodes)) return fast;
  }
  return from_yaml_cpp(yaml::load(text, limits));
}

}  // namespace ferry::policies::ytree
