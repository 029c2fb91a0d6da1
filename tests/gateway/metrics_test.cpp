#include "gateway/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ferry::gateway {
namespace {

TEST(Metrics, CountersAndHistogramsRender) {
  Metrics m;
  m.requests.inc({"gpt", "gpu", "200"});
  m.requests.inc({"gpt", "gpu", "200"});
  m.requests.inc({"we\"ird", "gpu", "502"});
  m.latency.observe_micros({"gpt"}, 3000);     // 3 ms: in the 5 ms bucket
  m.latency.observe_micros({"gpt"}, 2000000);  // 2 s
  std::string text = m.render();
  EXPECT_NE(text.find("ferry_requests_total{model=\"gpt\",backend=\"gpu\",status=\"200\"} 2"),
            std::string::npos) << text;
  EXPECT_NE(text.find("model=\"we\\\"ird\""), std::string::npos);
  EXPECT_NE(text.find("ferry_request_duration_seconds_bucket{model=\"gpt\",le=\"0.001\"} 0"),
            std::string::npos);
  EXPECT_NE(text.find("ferry_request_duration_seconds_bucket{model=\"gpt\",le=\"0.005\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("ferry_request_duration_seconds_bucket{model=\"gpt\",le=\"+Inf\"} 2"),
            std::string::npos);
  EXPECT_NE(text.find("ferry_request_duration_seconds_sum{model=\"gpt\"} 2.003000"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_in_flight_requests 0"), std::string::npos);
}

TEST(Metrics, ConcurrentIncrementsAreNotLost) {
  Metrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) m.requests.inc({"a", "b", "200"});
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.requests.value({"a", "b", "200"}), 40000);
}

}  // namespace
}  // namespace ferry::gateway
