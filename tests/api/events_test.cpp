#include "api/events.h"

#include <gtest/gtest.h>

#include "tests/api/event_log.h"

namespace ferry::api {
namespace {

Answer sample() {
  Answer a;
  a.id = "src-1";
  a.model = "m";
  a.created = 1700000000;
  a.blocks.push_back(Block{BlockKind::kThinking, "let me think", "sig", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kText, "héllo wörld", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "call_1", "get", "{\"a\":1}"});
  a.finish = FinishReason::kToolCalls;
  a.usage = Usage{10, 5, 2, 1, true};
  return a;
}

TEST(Events, ReplayThenBuildGivesTheAnswerBack) {
  for (size_t fragment : {0, 1, 2, 3, 7}) {
    Answer a = sample();
    AnswerBuilder b;
    replay(a, b, fragment);
    ASSERT_FALSE(b.violation()) << b.violation()->message;
    EXPECT_TRUE(b.done());
    const Answer& got = b.answer();
    EXPECT_EQ(got.blocks, a.blocks) << "fragment " << fragment;
    EXPECT_EQ(got.finish, a.finish);
    EXPECT_EQ(got.usage, a.usage);
    EXPECT_EQ(got.model, "m");
    EXPECT_EQ(got.created, 1700000000);
  }
}

TEST(Events, ReplayNeverCutsInsideAUtf8Sequence) {
  Answer a;
  a.blocks.push_back(Block{BlockKind::kText, "ñéü€𝄞", "", "", "", ""});
  EventLog log;
  replay(a, log, 1);
  for (const OwnedEvent& e : log.events) {
    if (e.type != "delta") continue;
    ASSERT_FALSE(e.text.empty());
    EXPECT_NE(static_cast<unsigned char>(e.text[0]) & 0xc0, 0x80) << "starts mid-sequence";
  }
  EXPECT_EQ(log.count("delta"), 5u);  // one per character
}

TEST(Events, ReplayOfAFailedAnswerEndsWithItsError) {
  Answer a = sample();
  a.finish = FinishReason::kError;
  a.error = Error::make(ErrorCode::kTimeout, "too slow");
  EventLog log;
  replay(a, log, 4);
  ASSERT_FALSE(log.events.empty());
  EXPECT_EQ(log.events.back().type, "error");
  EXPECT_EQ(log.events.back().text, "too slow");
  EXPECT_EQ(log.count("finish"), 0u);
}

TEST(Events, BuilderRejectsSequencesOutOfGrammar) {
  Error err = Error::make(ErrorCode::kInternal, "x");
  struct Case {
    const char* what;
    std::vector<Event> events;
  };
  std::vector<Case> cases = {
      {"delta before start", {DeltaEvent{0, DeltaKind::kText, "a"}}},
      {"two starts", {StartEvent{}, StartEvent{}}},
      {"block index skips", {StartEvent{}, BlockStartEvent{1, BlockKind::kText, {}, {}}}},
      {"overlapping blocks",
       {StartEvent{}, BlockStartEvent{0, BlockKind::kText, {}, {}},
        BlockStartEvent{1, BlockKind::kText, {}, {}}}},
      {"arguments to a text block",
       {StartEvent{}, BlockStartEvent{0, BlockKind::kText, {}, {}},
        DeltaEvent{0, DeltaKind::kArguments, "{"}}},
      {"delta to a closed block",
       {StartEvent{}, BlockStartEvent{0, BlockKind::kText, {}, {}}, BlockStopEvent{0},
        DeltaEvent{0, DeltaKind::kText, "a"}}},
      {"finish with a block open",
       {StartEvent{}, BlockStartEvent{0, BlockKind::kText, {}, {}}, FinishEvent{}}},
  };
  for (const Case& c : cases) {
    AnswerBuilder b;
    for (const Event& e : c.events) b.on_event(e);
    EXPECT_TRUE(b.violation().has_value()) << c.what;
  }
  AnswerBuilder ok;
  ok.on_event(StartEvent{});
  ok.on_event(ErrorEvent{&err});
  EXPECT_FALSE(ok.violation());
  EXPECT_EQ(ok.answer().finish, FinishReason::kError);
}

TEST(Events, TotalTokensSaturates) {
  Usage u{INT64_MAX, 5, 0, 0, true};
  EXPECT_EQ(u.total_tokens(), INT64_MAX);
  EXPECT_EQ((Usage{3, 4, 0, 0, true}).total_tokens(), 7);
}

}  // namespace
}  // namespace ferry::api
