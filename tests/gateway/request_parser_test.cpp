// gateway::RequestParser against Beast's request parser, the one the server ran before: the same
// bytes, fed in the same pieces as gateway/http_reader.cpp feeds them, must come to the same
// verdict (refused, or the method, target, version, keep-alive, length, fields, body and the
// bytes left for the next request) - for requests of the common shape, which take the parser's
// own scan, for the rest, which go to Beast, and for 30,000 mutations of both. (Refused is
// compared, not the reason: see Outcome.)
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "gateway/request_parser.h"
#include "tests/gateway/request_parser_diff.h"

namespace ferry::gateway {
namespace {

using parser_diff::BeastParser;
using parser_diff::Outcome;

// Both parsers on `input`; returns whether ferry's took the slow path.
bool same(std::string_view input, size_t piece) {
  BeastParser beast;
  RequestParser ours;
  Outcome want = parser_diff::read(beast, input, piece, 1024, 4096);
  Outcome got = parser_diff::read(ours, input, piece, 1024, 4096);
  EXPECT_EQ(got, want) << "input (" << input.size() << " bytes, pieces of " << piece << "): '"
                       << input << "'";
  return ours.took_slow_path();
}

const std::string kBody = R"({"model":"echo","messages":[{"role":"user","content":"hi"}]})";

std::string chat(std::string extra = "", std::string version = "HTTP/1.1") {
  return "POST /v1/chat/completions " + version +
         "\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nAccept: */*\r\n" + extra +
         "Content-Length: " + std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
}

// Requests of the common shape: ferry's scan reads them, as Beast does.
const std::vector<std::string> kCommon = {
    chat(),
    chat("Authorization: Bearer sk-test\r\n"),
    chat("authorization:Bearer sk-x\r\nX-Ferry-Tags: a,b\r\nx-ferry-task:  t1 \t\r\n"),
    chat("Connection: close\r\n"),
    chat("Connection: keep-alive\r\n"),
    chat("", "HTTP/1.0"),
    chat("Connection: Keep-Alive\r\n", "HTTP/1.0"),
    chat("Proxy-Connection: close\r\n"),
    chat("X-Empty:\r\nX-Empty: second\r\n"),
    chat("Cookie: a=1; b=\"2\" ~!@#$%^&*()_+`-={}[]|\\:;'<>?,./\r\n"),
    chat("Content-Type: text/plain\r\n"),     // a second content-type: the first wins
    chat() + chat("x-request-id: next\r\n"),  // pipelined: the second stays buffered
    "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET /v1/models?limit=5&after=a%20b HTTP/1.1\r\n\r\n",
    "HEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    "POST /v1/embeddings HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    "POST /x HTTP/1.1\r\nContent-Length: 007\r\n\r\n1234567",
    "DELETE /v1/responses/abc HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
};

// Requests that go to Beast: its verdict, whatever it is, is the answer.
const std::vector<std::string> kOther = {
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nTrailer: "
    "x\r\n\r\n",
    "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\nhello",
    "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello",
    "POST / HTTP/1.1\r\nContent-Length: 99999\r\n\r\n",                    // over the body limit
    "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",  // overflows
    "POST / HTTP/1.1\r\nX-Long: " + std::string(2000, 'a') + "\r\n\r\n",   // over the head limit
    "GET / HTTP/1.1\r\nX-Folded: a\r\n  b\r\n\r\n",                        // obs-fold
    "GET / HTTP/1.1\r\nX-Text: caf\xc3\xa9\r\n\r\n",                       // obs-text
    "GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n",
    "GET / HTTP/1.1\r\nX-Ctl: a\x01z\r\n\r\n",
    "GET / HTTP/1.1\r\nX-Bad : v\r\n\r\n",
    "GET / HTTP/1.1\r\n: v\r\n\r\n",
    "GET / HTTP/1.1\nHost: x\n\n",
    "\r\nGET / HTTP/1.1\r\n\r\n",
    "get / HTTP/1.1\r\n\r\n",
    "FOO / HTTP/1.1\r\n\r\n",
    "M-SEARCH * HTTP/1.1\r\n\r\n",
    "GET / HTTP/2.0\r\n\r\n",
    "GET / HTTP/1.2\r\n\r\n",
    "GET  / HTTP/1.1\r\n\r\n",
    "GET / HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
    "GET / HTTP/1.1\r\nConnection: close, bogus value\r\n\r\n",
    "GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
    "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort",  // the input ends in the body
    "POST / HTTP/1.1\r\nContent-Le",                       // ... in the head
};

TEST(RequestParser, TheCommonShapeTakesTheScanAndReadsAsBeastDoes) {
  for (const std::string& input : kCommon) {
    for (size_t piece : {size_t{1}, size_t{7}, size_t{64}, input.size()}) {
      EXPECT_FALSE(same(input, piece)) << "took Beast's path: '" << input << "'";
    }
  }
}

TEST(RequestParser, EverythingElseGoesToBeastWithTheSameVerdict) {
  for (const std::string& input : kOther) {
    for (size_t piece : {size_t{1}, size_t{5}, size_t{64}, input.size()}) same(input, piece);
  }
  // Chunked bodies and non-ASCII fields are Beast's.
  EXPECT_TRUE(same(kOther[0], 64));
  EXPECT_TRUE(same(kOther[11], 64));
}

// A body comes with kJsonReadSlack bytes of spare capacity, on either path, so that the JSON
// parser reads it where it is (api::ParseOptions::readable_past_end) rather than copying it.
TEST(RequestParser, ABodyKeepsTheJsonParsersSlack) {
  const std::vector<std::string> inputs = {
      chat(),  // the scan
      "POST / HTTP/1.1\r\nX-Text: caf\xc3\xa9\r\nContent-Length: " + std::to_string(kBody.size()) +
          "\r\n\r\n" + kBody,  // Beast's parser
  };
  for (const std::string& input : inputs) {
    for (size_t piece : {input.size(), size_t{7}}) {
      RequestParser parser;
      Outcome got = parser_diff::read(parser, input, piece, 1024, 4096);
      ASSERT_FALSE(got.refused) << got.error;
      ASSERT_TRUE(parser.is_done()) << input;
      EXPECT_EQ(parser.took_slow_path(), &input != &inputs.front());
      EXPECT_EQ(parser.body(), kBody);
      EXPECT_GE(parser.body().capacity() - parser.body().size(), kJsonReadSlack)
          << (parser.took_slow_path() ? "Beast's path" : "the scan") << ", pieces of " << piece;
    }
  }
}

TEST(RequestParser, AResetParserReadsTheNextRequestAsAFreshOneDoes) {
  // One parser per connection: after any request (scanned, Beast's, refused), reset() leaves
  // nothing of it behind.
  std::vector<std::string> inputs = kCommon;
  inputs.insert(inputs.end(), kOther.begin(), kOther.end());
  RequestParser reused;
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (size_t j = 0; j < inputs.size(); j += 3) {
      reused.reset();
      (void)parser_diff::read(reused, inputs[i], 64, 1024, 4096);
      reused.reset();
      RequestParser fresh;
      Outcome want = parser_diff::read(fresh, inputs[j], 7, 1024, 4096);
      Outcome got = parser_diff::read(reused, inputs[j], 7, 1024, 4096);
      ASSERT_EQ(got, want) << "after '" << inputs[i] << "': '" << inputs[j] << "'";
      EXPECT_EQ(reused.took_slow_path(), fresh.took_slow_path());
    }
  }
}

TEST(RequestParser, MutatedRequestsComeToBeastsVerdict) {
  std::mt19937 rng(20261206);
  const char kBytes[] = " \t\r\n:,;0159aAzZ-\x7f\x80\xff";
  const std::string alphabet = std::string(kBytes, sizeof kBytes - 1) + '\0';
  std::vector<std::string> seeds = kCommon;
  seeds.insert(seeds.end(), kOther.begin(), kOther.end());
  int scanned = 0;
  for (int round = 0; round < 30000; ++round) {
    std::string input = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !input.empty(); ++e) {
      size_t at = rng() % input.size();
      char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          input[at] = c;
          break;
        case 1:
          input.insert(input.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          input.erase(at, 1);
      }
    }
    size_t piece = 1 + rng() % 80;
    if (!same(input, piece)) ++scanned;
    if (HasFailure()) return;
  }
  // Most mutations of the common shape still have it (a changed letter in a value, say).
  EXPECT_GT(scanned, 3000);
}

}  // namespace
}  // namespace ferry::gateway
