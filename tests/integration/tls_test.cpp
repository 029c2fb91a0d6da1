// TLS: ferry's listener with a self-signed certificate, an https backend (ferry_test_upstream
// with TLS, trusted through ca_file), and a backend whose certificate is not trusted (502).
// Certificates are made at test time with the openssl command-line tool.
#include <gtest/gtest.h>

#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(ferry_binary().empty()) << "FERRY_BINARY is not set";
    ASSERT_TRUE(make_self_signed_cert(dir_, "server", cert_, key_))
        << "openssl req failed (scripts/setup.sh installs the openssl tool)";
    ASSERT_TRUE(make_self_signed_cert(dir_, "other", other_cert_, other_key_));
  }
  void TearDown() override {
    if (ferry_.process) {
      EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);
      if (HasFailure()) {
        std::cerr << "---- ferry stderr ----\n" << ferry_.process->stderr_text();
      }
    }
    if (upstream_.process) upstream_.process->stop();
  }

  // The standard config with TLS on the listener (and the given backend scheme and CA).
  std::string config(bool tls_listener, const std::string& scheme, const std::string& ca) {
    std::string yaml = standard_config(upstream_.address, scheme, ca);
    if (tls_listener) {
      std::string server = "server:\n";
      yaml.replace(yaml.find(server), server.size(),
                   server + "  tls:\n    cert: " + cert_ + "\n    key: " + key_ + "\n");
    }
    return yaml;
  }

  TempDir dir_;
  std::string cert_, key_, other_cert_, other_key_;
  Server upstream_;
  Server ferry_;
};

TEST_F(TlsTest, UpstreamServesTls) {
  upstream_ = start_upstream(cert_, key_);
  EXPECT_EQ(upstream_.address.scheme, "https");
  TlsClientOptions tls{cert_, "localhost"};
  auto r = post_json(upstream_.address, "/v1/chat/completions", chat_body("echo", "tls"), {}, &tls);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: tls");
}

TEST_F(TlsTest, FerryListenerServesHttps) {
  upstream_ = start_upstream();
  ferry_ = start_ferry(dir_, config(true, "http", ""));
  EXPECT_EQ(ferry_.address.scheme, "https") << "the listening line says https";
  TlsClientOptions tls{cert_, "localhost"};

  auto health = http_request(ferry_.address, "GET", "/healthz", {}, {}, &tls);
  ASSERT_TRUE(health) << "TLS handshake or request failed";
  EXPECT_EQ(health->status, 200);

  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "secure"),
                     auth_headers(), &tls);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: secure");

  json body = chat_body("gpt-test", "secure stream", true);
  body["stream_options"] = {{"include_usage", true}};
  StreamResult s =
      stream_request(ferry_.address, "/v1/chat/completions", body, auth_headers(), &tls);
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: secure stream");

  // A client that does not trust the certificate cannot connect.
  TlsClientOptions wrong{other_cert_, "localhost"};
  EXPECT_FALSE(Connection::open(ferry_.address.host, ferry_.address.port, &wrong));

  // Plain HTTP to the TLS port is refused without harm.
  auto plain = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(plain);
  plain->send(make_request("GET", "/healthz", ""));
  auto garbage = plain->read_response(Ms(5000));
  EXPECT_FALSE(garbage && garbage->status == 200) << "plain HTTP answered on the TLS port";

  auto again = http_request(ferry_.address, "GET", "/healthz", {}, {}, &tls);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST_F(TlsTest, HttpsBackendWithCaFile) {
  upstream_ = start_upstream(cert_, key_);
  // One I/O thread: each event loop keeps its own upstream pool, and the two requests below
  // come on two client connections, which more loops would spread over different pools.
  std::string yaml = config(false, "https", cert_);
  std::string server = "server:\n";
  yaml.replace(yaml.find(server), server.size(), server + "  io_threads: 1\n");
  ferry_ = start_ferry(dir_, yaml);
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "to https"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: to https");

  json body = chat_body("chunky", "over tls in pieces", true);
  body["stream_options"] = {{"include_usage", true}};
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: over tls in pieces");

  TlsClientOptions tls{cert_, "localhost"};
  json last = upstream_last_request(upstream_.address, &tls);
  EXPECT_EQ(last["headers"]["authorization"], std::string("Bearer ") + kUpstreamKey);
  EXPECT_EQ(last["body"]["model"], "chunky");
  json stats = upstream_stats(upstream_.address, &tls);
  EXPECT_LT(stats["api_connections"].get<int64_t>(), stats["requests"].get<int64_t>())
      << "TLS connections to the backend should be reused: " << stats.dump();
}

TEST_F(TlsTest, HttpsBackendWithWrongCaIs502) {
  upstream_ = start_upstream(cert_, key_);
  ferry_ = start_ferry(dir_, config(false, "https", other_cert_));
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  TlsClientOptions tls{cert_, "localhost"};
  EXPECT_EQ(upstream_stats(upstream_.address, &tls)["requests"], 0)
      << "no request may reach an untrusted backend";
  auto health = http_request(ferry_.address, "GET", "/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(TlsTest, TlsListenerAndHttpsBackendTogether) {
  upstream_ = start_upstream(cert_, key_);
  ferry_ = start_ferry(dir_, config(true, "https", cert_));
  TlsClientOptions tls{cert_, "localhost"};
  StreamResult s =
      stream_request(ferry_.address, "/v1/completions",
                     completion_body("gpt-test", "both ends", true), auth_headers(), &tls);
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: both ends");
}

}  // namespace
}  // namespace ferry::itest
