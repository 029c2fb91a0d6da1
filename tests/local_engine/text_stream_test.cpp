// TextStream: UTF-8-safe incremental text and stop strings across token boundaries.
#include <gtest/gtest.h>

#include "local_engine/text_stream.h"

namespace ferry::engine {
namespace {

TEST(TextStream, HoldsASplitCharacterUntilItIsComplete) {
  TextStream s;
  const std::string euro = "\xE2\x82\xAC";  // U+20AC in three bytes
  EXPECT_EQ(s.push("a" + euro.substr(0, 1)), "a");
  EXPECT_EQ(s.push(euro.substr(1, 1)), "");
  EXPECT_EQ(s.push(euro.substr(2) + "b"), euro + "b");
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.text(), "a" + euro + "b");
}

TEST(TextStream, InvalidBytesBecomeReplacementCharacters) {
  TextStream s;
  EXPECT_EQ(s.push("x\xFFy"), "x\xEF\xBF\xBDy");
  EXPECT_EQ(s.push("\xE2\x82"), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");  // unfinished at the end
}

TEST(TextStream, StopStringAcrossPiecesCutsTheOutput) {
  TextStream s({"<end>"});
  EXPECT_EQ(s.push("Hello <"), "Hello ");
  EXPECT_EQ(s.push("en"), "");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("d> more"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("ignored"), "");
  EXPECT_EQ(s.text(), "Hello ");
}

TEST(TextStream, APartialMatchThatFailsIsReleased) {
  TextStream s({"STOP"});
  EXPECT_EQ(s.push("ST"), "");
  EXPECT_EQ(s.push("ay"), "STay");
  EXPECT_EQ(s.push("S"), "");
  EXPECT_EQ(s.finish(), "S");
  EXPECT_FALSE(s.stopped());
}

TEST(TextStream, EarliestOfSeveralStopStringsWins) {
  TextStream s({"bb", "a"});
  EXPECT_EQ(s.push("xxbba"), "xx");
  EXPECT_TRUE(s.stopped());
}

}  // namespace
}  // namespace ferry::engine
