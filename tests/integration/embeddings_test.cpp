// POST /v1/embeddings through the real ferry binary: on the local engine (a synthesized model:
// pooled, normalized vectors; batch = single requests; float and base64 agree; dimensions and
// long inputs refused with the numbers, or truncated and chunked where the config allows; bad
// input a 400 naming the field while ferry keeps serving) and passed through to an HTTP backend
// (model spliced, usage billed); the ledger row priced on input tokens, x-ferry headers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ledger/sqlite_db.h"
#include "tests/integration/embedding_vectors.h"
#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

class EmbeddingsTest : public OwnConfigTest {
 protected:
  void start(const std::string& extra_local = "") {
    const std::string model = (dir_.path() / "tiny.gguf").string();
    ASSERT_EQ(run_command(ferry_binary() + " model synth --preset tiny --type Q8_0 --ctx 64 " +
                          "--seed 3 '" + model + "' > /dev/null"),
              0);
    std::string cfg = standard_config(upstream_.address);
    cfg.insert(cfg.find("backends:\n") + 10,
               "  - { name: cpu, kind: local, model: " + model + ", threads: 1 }\n" +
                   "  - { name: cpu2, kind: local, model: " + model +
                   ", threads: 1, embeddings: { long_input: chunk, matryoshka: true } }\n" +
                   extra_local);
    cfg.insert(cfg.find("models:\n") + 8,
               "  - { name: local, backend: cpu }\n  - { name: local2, backend: cpu2 }\n"
               "  - { name: up-emb, backend: up, upstream_model: echo-emb, tokenizer: "
               "cl100k_base }\n"
               "  - { name: up-fail, backend: up, upstream_model: fail-503 }\n");
    cfg += "ledger:\n  path: " + db_ +
           "\nprices:\n  - { model: local, effective_from: 2026-01-01, input: 2.00, output: 9.00 "
           "}\n  - { model: up-emb, effective_from: 2026-01-01, input: 1.00, output: 9.00 }\n";
    ferry_ = start_ferry(dir_, cfg);
  }

  json embed(const json& body, int want_status = 200) {
    auto r = post_json(ferry_.address, "/v1/embeddings", body);
    EXPECT_TRUE(r.has_value());
    if (!r) return {};
    EXPECT_EQ(r->status, want_status) << r->body;
    last_ = *r;
    return r->body_json();
  }

  // (input_tokens, output_tokens, cost_total, status) of the ledger's request rows, in order.
  std::vector<std::vector<std::string>> rows() {
    std::vector<std::vector<std::string>> out;
    if (ferry_.process) wait_ledger_committed(ferry_.address);
    auto db = ledger::Db::open(db_, true);
    EXPECT_TRUE(db);
    if (!db) return out;
    auto stmt = db->prepare(
        "SELECT input_tokens, output_tokens, cost_total, status, requested_model FROM requests "
        "WHERE kind='request' ORDER BY seq");
    EXPECT_TRUE(stmt);
    if (!stmt) return out;
    for (;;) {
      auto has = stmt->step();
      if (!has || !*has) break;
      std::vector<std::string> row;
      for (int i = 0; i < 5; ++i) {
        if (stmt->is_null(i)) {
          row.push_back("<null>");
          continue;
        }
        ledger::Value v = stmt->value_at(i);
        row.push_back(std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v))
                                                         : std::get<std::string>(v));
      }
      out.push_back(std::move(row));
    }
    return out;
  }

  Response last_;
};

TEST_F(EmbeddingsTest, LocalEngineAnswersInOpenAiShape) {
  start();
  json j = embed({{"model", "local"}, {"input", json::array({"hello world", "another text"})}});
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "local");
  ASSERT_EQ(j["data"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(j["data"][i]["object"], "embedding");
    EXPECT_EQ(j["data"][i]["index"], i);
    auto v = floats(j["data"][i]["embedding"]);
    ASSERT_FALSE(v.empty());
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
  EXPECT_NE(floats(j["data"][0]["embedding"]), floats(j["data"][1]["embedding"]));
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int64_t>(), 2);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"]);
  EXPECT_EQ(last_.header("x-ferry-target"), "local");
  EXPECT_EQ(last_.header("x-ferry-attempts"), "1");

  // A batch of N equals N single requests (batch-invariant engine: the same floats).
  json one = embed({{"model", "local"}, {"input", "another text"}});
  EXPECT_EQ(floats(one["data"][0]["embedding"]), floats(j["data"][1]["embedding"]));
  // Token ids in, token ids counted.
  json ids = embed({{"model", "local"}, {"input", json::array({1, 2, 3})}});
  EXPECT_EQ(ids["usage"]["prompt_tokens"], 3);
  json base64 =
      embed({{"model", "local"}, {"input", "another text"}, {"encoding_format", "base64"}});
  EXPECT_EQ(from_base64(base64["data"][0]["embedding"].get<std::string>()),
            floats(one["data"][0]["embedding"]));

  // The ledger: rows priced on input tokens, no output.
  auto r = rows();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0][0], std::to_string(j["usage"]["prompt_tokens"].get<int64_t>()));
  EXPECT_EQ(r[0][1], "0");
  EXPECT_EQ(r[0][3], "ok");
  // 2.00 per million input tokens, in micro-units: 2 per token.
  EXPECT_EQ(r[0][2], std::to_string(2 * j["usage"]["prompt_tokens"].get<int64_t>()));
}

TEST_F(EmbeddingsTest, RefusalsNameTheFieldAndFerryKeepsServing) {
  start();
  auto err = [&](const json& body, int status) {
    json j = embed(body, status);
    return j["error"];
  };
  EXPECT_EQ(err({{"model", "local"}}, 400)["param"], "input");
  EXPECT_EQ(err({{"model", "local"}, {"input", ""}}, 400)["param"], "input");
  EXPECT_EQ(err({{"model", "local"}, {"input", json::array({"a", ""})}}, 400)["param"], "input");
  EXPECT_EQ(err({{"model", "local"}, {"input", json::array({1, 99999999})}}, 400)["param"],
            "input");
  json many = json::array();
  for (int i = 0; i < 2049; ++i) many.push_back("x");
  EXPECT_EQ(err({{"model", "local"}, {"input", many}}, 400)["param"], "input");
  EXPECT_EQ(err({{"model", "local"}, {"input", "a"}, {"encoding_format", "int8"}}, 400)["param"],
            "encoding_format");
  json dims = err({{"model", "local"}, {"input", "a"}, {"dimensions", 8}}, 400);
  EXPECT_EQ(dims["param"], "dimensions");
  EXPECT_NE(dims["message"].get<std::string>().find("dimensions"), std::string::npos);
  // Longer than the context (64): refused with the numbers.
  json tokens = json::array();
  for (int i = 0; i < 70; ++i) tokens.push_back(5);
  json longer = err({{"model", "local"}, {"input", tokens}}, 400);
  EXPECT_EQ(longer["code"], "context_length_exceeded");
  EXPECT_NE(longer["message"].get<std::string>().find("64"), std::string::npos);
  EXPECT_NE(longer["message"].get<std::string>().find("70"), std::string::npos);
  EXPECT_EQ(err({{"model", "nope"}, {"input", "a"}}, 404)["code"], "model_not_found");
  // Still serving.
  EXPECT_EQ(embed({{"model", "local"}, {"input", "ok"}})["data"].size(), 1u);
}

TEST_F(EmbeddingsTest, ChunkedLongInputsAndMatryoshkaDimensions) {
  start();
  json tokens = json::array();
  for (int i = 0; i < 100; ++i) tokens.push_back(3 + i % 20);
  json j = embed({{"model", "local2"}, {"input", tokens}});
  EXPECT_EQ(j["usage"]["prompt_tokens"], 100);
  double norm = 0;
  for (float x : floats(j["data"][0]["embedding"])) norm += static_cast<double>(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  json full = embed({{"model", "local2"}, {"input", "truncate me"}});
  json cut = embed({{"model", "local2"}, {"input", "truncate me"}, {"dimensions", 8}});
  auto f = floats(full["data"][0]["embedding"]);
  auto c = floats(cut["data"][0]["embedding"]);
  ASSERT_EQ(c.size(), 8u);
  double head = 0;
  for (size_t i = 0; i < 8; ++i) head += static_cast<double>(f[i]) * f[i];
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(c[i], f[i] / std::sqrt(head), 1e-5);
}

TEST_F(EmbeddingsTest, HttpBackendPassThrough) {
  start();
  json j = embed({{"model", "up-emb"},
                  {"input", json::array({"one two", "three"})},
                  {"dimensions", 4},
                  {"user", "u-1"}});
  EXPECT_EQ(j["model"], "up-emb");  // the alias, not the upstream's name
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  json seen = upstream_last_request(upstream_.address);
  EXPECT_EQ(seen["target"], "/v1/embeddings");
  EXPECT_EQ(seen["body"]["model"], "echo-emb");
  EXPECT_EQ(seen["body"]["dimensions"], 4);
  EXPECT_EQ(seen["body"]["user"], "u-1");
  json b64 = embed({{"model", "up-emb"}, {"input", "one two"}, {"encoding_format", "base64"}});
  EXPECT_EQ(from_base64(b64["data"][0]["embedding"].get<std::string>()),
            floats(j["data"][0]["embedding"]));
  // An upstream failure is the upstream's status, and the next request is served.
  json failed = embed({{"model", "up-fail"}, {"input", "a"}}, 503);
  EXPECT_TRUE(failed.contains("error"));
  auto r = rows();
  ASSERT_GE(r.size(), 2u);
  EXPECT_EQ(r[0][0], "3");  // the backend's usage, plausible against ferry's count
  EXPECT_EQ(r[0][1], "0");
  EXPECT_EQ(r[0][2], "3");  // 3 tokens at 1.00 per million: 3 micro-units
  EXPECT_EQ(r[0][4], "up-emb");
}

}  // namespace
}  // namespace ferry::itest
