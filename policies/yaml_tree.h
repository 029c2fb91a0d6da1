// A read-only YAML tree for the policy loader. The YAML that policies are written in (block
// and flow mappings and sequences, plain and one-line quoted scalars, comments) is parsed
// here directly, an order of magnitude faster than yaml-cpp, whose parse was most of a
// reload; any other input (anchors, tags, block or multi-line scalars, documents markers, odd
// layouts, errors) goes through yaml-cpp and is converted. Either way the same nodes, values
// and marks (tests/policies/yaml_tree_test.cpp compares the two on random documents).
// A Document is immutable once built; Nodes are handles valid while it lives. Any thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/yaml_util.h"

namespace ferry::policies::ytree {

enum class Type : uint8_t { kUndefined, kNull, kScalar, kSequence, kMap };

struct NodeData {
  Type type = Type::kUndefined;
  YAML::Mark mark = YAML::Mark::null_mark();
  std::string scalar;
  std::vector<const NodeData*> items;                                // sequence
  std::vector<std::pair<const NodeData*, const NodeData*>> entries;  // map, in order
};

class Node;

// Ranges over a node's children, yielding Nodes (sequences) or pairs of Nodes (maps).
class SeqRange {
 public:
  class iterator {
   public:
    explicit iterator(const NodeData* const* p) : p_(p) {}
    Node operator*() const;
    iterator& operator++() {
      ++p_;
      return *this;
    }
    bool operator!=(const iterator& o) const { return p_ != o.p_; }

   private:
    const NodeData* const* p_;
  };
  explicit SeqRange(const std::vector<const NodeData*>& v) : v_(v) {}
  iterator begin() const { return iterator(v_.data()); }
  iterator end() const { return iterator(v_.data() + v_.size()); }

 private:
  const std::vector<const NodeData*>& v_;
};

class MapRange {
 public:
  using Entry = std::pair<const NodeData*, const NodeData*>;
  class iterator {
   public:
    explicit iterator(const Entry* p) : p_(p) {}
    std::pair<Node, Node> operator*() const;
    iterator& operator++() {
      ++p_;
      return *this;
    }
    bool operator!=(const iterator& o) const { return p_ != o.p_; }

   private:
    const Entry* p_;
  };
  explicit MapRange(const std::vector<Entry>& v) : v_(v) {}
  iterator begin() const { return iterator(v_.data()); }
  iterator end() const { return iterator(v_.data() + v_.size()); }

 private:
  const std::vector<Entry>& v_;
};

// The part of yaml-cpp's YAML::Node interface the loader uses, over NodeData.
class Node {
 public:
  Node();  // undefined
  explicit Node(const NodeData* data) : d_(data) {}

  bool IsDefined() const { return d_->type != Type::kUndefined; }
  explicit operator bool() const { return IsDefined(); }
  bool IsNull() const { return d_->type == Type::kNull; }
  bool IsScalar() const { return d_->type == Type::kScalar; }
  bool IsSequence() const { return d_->type == Type::kSequence; }
  bool IsMap() const { return d_->type == Type::kMap; }
  Type type() const { return d_->type; }
  const std::string& Scalar() const { return d_->scalar; }
  const YAML::Mark& Mark() const { return d_->mark; }
  size_t size() const;  // children of a sequence or map; 0 otherwise

  // The value of the first entry whose key is the scalar `key`; undefined when there is none
  // (or this is not a map).
  Node operator[](std::string_view key) const;
  SeqRange items() const { return SeqRange(d_->items); }      // empty unless a sequence
  MapRange entries() const { return MapRange(d_->entries); }  // empty unless a map

 private:
  const NodeData* d_;
};

class Document {
 public:
  // Parses `text`. Throws YAML::Exception (yaml-cpp's error, with its mark) when it is not
  // valid YAML or breaks `limits` (bytes, nodes and depth, aliases expanded: see
  // common/yaml_util.h). An empty document is a null root.
  static std::unique_ptr<Document> parse(const std::string& text, const yaml::Limits& limits = {});
  // The fast path alone: nullptr when the text uses anything it does not read, or has more
  // than `max_nodes` nodes (the caller then needs yaml-cpp). For tests and benchmarks.
  static std::unique_ptr<Document> parse_fast(const std::string& text,
                                              int64_t max_nodes = yaml::Limits{}.max_nodes);
  // yaml-cpp's tree, converted.
  static std::unique_ptr<Document> from_yaml_cpp(const YAML::Node& root);

  Node root() const { return Node(root_); }
  bool parsed_fast() const { return fast_; }

  NodeData* make(Type type, const YAML::Mark& mark);  // for the builders
  size_t node_count() const { return nodes_.size(); }

 private:
  std::deque<NodeData> nodes_;
  const NodeData* root_ = nullptr;
  bool fast_ = false;
  friend class FastParser;
};

}  // namespace ferry::policies::ytree
