// Tests of the control-file grammars of memcg/parse.hpp: memory.oom.group, memory.reclaim,
// PSI triggers, vmpressure levels and cgroup.event_control.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "memcg/base/errors.hpp"
#include "memcg/files/parse.hpp"

namespace memcg {
namespace {

using namespace std::string_literals;
using namespace std::string_view_literals;

constexpr uint64_t kUntouched = 0xdeadbeefcafef00d;

// ---- parse_oom_group ----

TEST(ParseOomGroup, Accepted) {
  struct Case {
    std::string_view text;
    int value;
  } kCases[] = {{"1", 1},     {"0", 0},    {"0x1", 1}, {"0X1", 1},     {"+0", 0},
                {"-0", 0},    {"+1", 1},   {"01", 1},  {"00", 0},      {"1\n", 1},
                {" 0 \n", 0}, {"-0x0", 0}, {"0x0", 0}, {"0x00001", 1}, {"1\0junk"sv, 1}};
  for (const Case& c : kCases) {
    int value = -7;
    EXPECT_EQ(parse_oom_group(c.text, &value), 0) << c.text;
    EXPECT_EQ(value, c.value) << c.text;
  }
}

TEST(ParseOomGroup, Rejected) {
  struct Case {
    std::string_view text;
    int err;
  } kCases[] = {{"2", EINVAL},
                {"yes", EINVAL},
                {"1 1", EINVAL},
                {"-1", EINVAL},
                {"", EINVAL},
                {"\n", EINVAL},
                {"+", EINVAL},
                {"-", EINVAL},
                {"+-1", EINVAL},
                {"--0", EINVAL},
                {"0x", EINVAL},
                {"08", EINVAL},
                {"1.0", EINVAL},
                {"true", EINVAL},
                {"+ 1", EINVAL},
                {"2147483647", EINVAL},
                {"-2147483648", EINVAL},
                {"99999999999", ERANGE},
                {"2147483648", ERANGE},
                {"-2147483649", ERANGE},
                {"0x80000000", ERANGE},
                {"99999999999x", EINVAL},  // fits 64 bits: the junk is seen first
                {"99999999999999999999999", ERANGE},
                {"99999999999999999999999x", ERANGE}};  // beyond 64 bits: overflow first
  for (const Case& c : kCases) {
    int value = -7;
    EXPECT_EQ(parse_oom_group(c.text, &value), c.err) << c.text;
    EXPECT_EQ(value, -7) << c.text;
  }
}

// ---- parse_reclaim ----

TEST(ParseReclaim, Accepted) {
  struct Case {
    std::string_view text;
    uint64_t bytes;
    int swappiness;
  } kCases[] = {{"0", 0, kSwappinessNotGiven},
                {"1M", 1u << 20, kSwappinessNotGiven},
                {"1M\n", 1u << 20, kSwappinessNotGiven},
                {"1M swappiness=max", 1u << 20, kSwappinessMax},
                {"1M swappiness=0", 1u << 20, 0},
                {"1M swappiness=200", 1u << 20, 200},
                {"1M swappiness=60\n", 1u << 20, 60},
                {"1M  \t swappiness=60", 1u << 20, 60},
                {"1M swappiness=0x10", 1u << 20, 16},
                {"1M swappiness=010", 1u << 20, 8},
                {"1M swappiness=-0", 1u << 20, 0},
                {"1M swappiness=5 swappiness=max", 1u << 20, kSwappinessMax},
                {"1M swappiness=max swappiness=5", 1u << 20, 5},
                {"4097", 4097, kSwappinessNotGiven},
                {"0x1000 swappiness=1", 4096, 1},
                {"16E", UINT64_MAX, kSwappinessNotGiven},
                {"99999999999999999999999 swappiness=1", UINT64_MAX, 1}};
  for (const Case& c : kCases) {
    ReclaimRequest request{kUntouched, 77};
    EXPECT_EQ(parse_reclaim(c.text, &request), 0) << c.text;
    EXPECT_EQ(request.bytes, c.bytes) << c.text;
    EXPECT_EQ(request.swappiness, c.swappiness) << c.text;
  }
}

TEST(ParseReclaim, Rejected) {
  for (const char* text : {"1M swappiness=201",
                           "1M foo",
                           "",
                           "\n",
                           "1Mswappiness=1",
                           "swappiness=1",
                           "K",
                           "1M swappiness=",
                           "1M swappiness=-1",
                           "1M swappiness=+1",
                           "1M swappiness=1x",
                           "1M swappiness=MAX",
                           "1M swappiness = 1",
                           "1M swappiness",
                           "1M Swappiness=1",
                           "1M swappiness=99999999999999999999",
                           "1M swappiness=1 foo",
                           "1KB",
                           "-1M",
                           "1.5M",
                           "max",
                           "1 M",
                           "1M swappiness=max=1",
                           "1M swappiness=0x",
                           "1M swappiness=08",
                           "1M swappiness=2147483648"}) {
    ReclaimRequest request{kUntouched, 77};
    EXPECT_EQ(parse_reclaim(text, &request), EINVAL) << text;
    EXPECT_EQ(request.bytes, kUntouched) << text;
    EXPECT_EQ(request.swappiness, 77) << text;
  }
}

// ---- parse_psi_trigger ----

TEST(ParsePsiTrigger, Accepted) {
  struct Case {
    std::string_view text;
    PsiState state;
    uint64_t threshold, window;
  } kCases[] = {{"some 150000 1000000", PsiState::kSome, 150000, 1000000},
                {"full 1 1", PsiState::kFull, 1, 1},
                {"some 1000000 1000000", PsiState::kSome, 1000000, 1000000},
                {"full 1 10000000", PsiState::kFull, 1, 10000000},
                {"some 100 499999", PsiState::kSome, 100, 499999},  // no 500 ms minimum
                {"some 150000 1000000\n", PsiState::kSome, 150000, 1000000},
                {"some  150000\t1000000 ", PsiState::kSome, 150000, 1000000},
                {"some150000 1000000", PsiState::kSome, 150000, 1000000},
                {"some 0150000 01000000", PsiState::kSome, 150000, 1000000},  // decimal
                {"some 150000 1000000\0junk"sv, PsiState::kSome, 150000, 1000000}};
  for (const Case& c : kCases) {
    PsiTriggerSpec spec{PsiState::kFull, 9, 9};
    EXPECT_EQ(parse_psi_trigger(c.text, /*privileged=*/true, &spec), 0) << c.text;
    EXPECT_EQ(spec.state, c.state) << c.text;
    EXPECT_EQ(spec.threshold_us, c.threshold) << c.text;
    EXPECT_EQ(spec.window_us, c.window) << c.text;
  }
}

TEST(ParsePsiTrigger, Rejected) {
  for (const char* text : {"some 0 1000000",
                           "some 2000000 1000000",
                           "full 1 20000000",
                           "none 1 2",
                           "",
                           "\n",
                           "some",
                           "some 1",
                           "some 1 0",
                           "some 0 0",
                           "full 1 10000001",
                           " some 1 1000000",
                           "Some 1 1000000",
                           "some -1 1000000",
                           "some +1 1000000",
                           "some 1 +1000000",
                           "some 1,1000000",
                           "some 1 1000000 junk",
                           "some 1 1000000x",
                           "some 1.5 1000000",
                           "some 0x10 1000000",
                           "some 4294967297 2000000",
                           "some 1 18446744073709551617",
                           "some 99999999999999999999 1"}) {
    PsiTriggerSpec spec{PsiState::kFull, 9, 9};
    EXPECT_EQ(parse_psi_trigger(text, /*privileged=*/true, &spec), EINVAL) << text;
    EXPECT_EQ(spec.state, PsiState::kFull) << text;
    EXPECT_EQ(spec.threshold_us, 9u) << text;
    EXPECT_EQ(spec.window_us, 9u) << text;
  }
}

TEST(ParsePsiTrigger, Unprivileged) {
  PsiTriggerSpec spec{PsiState::kFull, 9, 9};
  EXPECT_EQ(parse_psi_trigger("some 100000 1000000", /*privileged=*/false, &spec), EINVAL);
  EXPECT_EQ(spec.window_us, 9u);
  EXPECT_EQ(parse_psi_trigger("some 100000 1000000", /*privileged=*/true, &spec), 0);
  for (uint64_t window : {2000000u, 4000000u, 6000000u, 8000000u, 10000000u}) {
    const std::string text = "full 100000 " + std::to_string(window);
    spec = PsiTriggerSpec{PsiState::kSome, 9, 9};
    EXPECT_EQ(parse_psi_trigger(text, /*privileged=*/false, &spec), 0) << text;
    EXPECT_EQ(spec.state, PsiState::kFull);
    EXPECT_EQ(spec.threshold_us, 100000u);
    EXPECT_EQ(spec.window_us, window);
  }
  for (const char* text : {"some 100000 2000001", "some 100000 3000000", "some 1 12000000"}) {
    EXPECT_EQ(parse_psi_trigger(text, /*privileged=*/false, &spec), EINVAL) << text;
  }
}

TEST(ParsePsiTrigger, ReadsOnly31Bytes) {
  // 31 bytes: the second number's last digit is the 31st byte; anything after it is not read.
  const std::string text =
      "some 1          "
      "    1000000";  // 27 bytes
  PsiTriggerSpec spec{};
  ASSERT_EQ(parse_psi_trigger(text + "    junk", true, &spec), 0);
  EXPECT_EQ(spec.window_us, 1000000u);
  ASSERT_EQ(parse_psi_trigger(text + "   junk", true, &spec), EINVAL);  // 'j' is byte 31
  // A number cut at byte 31 is read as its first digits.
  ASSERT_EQ(parse_psi_trigger("some 1" + std::string(18, ' ') + "1000000", true, &spec), 0);
  EXPECT_EQ(spec.window_us, 1000000u);
  ASSERT_EQ(parse_psi_trigger("some 1" + std::string(19, ' ') + "1000000", true, &spec), 0);
  EXPECT_EQ(spec.window_us, 100000u);
}

// ---- vmpressure ----

TEST(PressureLevel, Names) {
  EXPECT_STREQ(to_string(PressureLevel::kLow), "low");
  EXPECT_STREQ(to_string(PressureLevel::kMedium), "medium");
  EXPECT_STREQ(to_string(PressureLevel::kCritical), "critical");
  EXPECT_STREQ(to_string(PressureMode::kDefault), "default");
  EXPECT_STREQ(to_string(PressureMode::kHierarchy), "hierarchy");
  EXPECT_STREQ(to_string(PressureMode::kLocal), "local");
}

TEST(PressureLevel, Accepted) {
  struct Case {
    std::string_view text;
    PressureLevel level;
    PressureMode mode;
  } kCases[] = {{"low", PressureLevel::kLow, PressureMode::kDefault},
                {"medium,hierarchy", PressureLevel::kMedium, PressureMode::kHierarchy},
                {"critical,local", PressureLevel::kCritical, PressureMode::kLocal},
                {"critical,default", PressureLevel::kCritical, PressureMode::kDefault},
                {"critical,hierarchy", PressureLevel::kCritical, PressureMode::kHierarchy},
                {"medium", PressureLevel::kMedium, PressureMode::kDefault},
                {"low\0junk"sv, PressureLevel::kLow, PressureMode::kDefault}};
  for (const Case& c : kCases) {
    PressureLevel level = PressureLevel::kMedium;
    PressureMode mode = PressureMode::kLocal;
    EXPECT_EQ(parse_pressure_level(c.text, &level, &mode), 0) << c.text;
    EXPECT_EQ(level, c.level) << c.text;
    EXPECT_EQ(mode, c.mode) << c.text;
  }
  // Every level × mode spelled by to_string parses back.
  for (auto l : {PressureLevel::kLow, PressureLevel::kMedium, PressureLevel::kCritical}) {
    for (auto m : {PressureMode::kDefault, PressureMode::kHierarchy, PressureMode::kLocal}) {
      const std::string text = std::string(to_string(l)) + "," + to_string(m);
      PressureLevel level;
      PressureMode mode;
      ASSERT_EQ(parse_pressure_level(text, &level, &mode), 0) << text;
      EXPECT_EQ(level, l);
      EXPECT_EQ(mode, m);
    }
  }
}

TEST(PressureLevel, Rejected) {
  for (const char* text :
       {"Low", "low,", "low,tree", "critical,hierarchyX", "", "LOW", " low", "low ", "low\n",
        ",local", "low,,local", "low,local,", "low,local,hierarchy", "high", "medium,Local",
        "critical,hierarchy,", "critical,hierarchyXY", "lowest", "lo"}) {
    PressureLevel level = PressureLevel::kMedium;
    PressureMode mode = PressureMode::kLocal;
    EXPECT_EQ(parse_pressure_level(text, &level, &mode), EINVAL) << text;
    EXPECT_EQ(level, PressureLevel::kMedium) << text;
    EXPECT_EQ(mode, PressureMode::kLocal) << text;
  }
}

TEST(PressureLevel, TruncatedTo19Bytes) {
  PressureLevel level;
  PressureMode mode;
  // "medium,hierarchy" is 16 bytes; three more bytes are read, the rest is not.
  EXPECT_EQ(parse_pressure_level("medium,hierarchy\0\0\0junk"s, &level, &mode), 0);
  EXPECT_EQ(parse_pressure_level("low,local" + std::string(10, '\0') + "junk", &level, &mode), 0);
  EXPECT_EQ(parse_pressure_level("low,local" + std::string(9, '\0') + "junk", &level, &mode),
            0);  // NUL at byte 10 ends the text anyway
  EXPECT_EQ(parse_pressure_level("critical,hierarchyXY", &level, &mode), EINVAL);
}

TEST(EventControl, Accepted) {
  struct Case {
    std::string_view text;
    int efd, lfd;
    PressureLevel level;
    PressureMode mode;
  } kCases[] = {
      {"3 4 low", 3, 4, PressureLevel::kLow, PressureMode::kDefault},
      {"3 4 medium,hierarchy\n", 3, 4, PressureLevel::kMedium, PressureMode::kHierarchy},
      {"  10 11 critical,local  ", 10, 11, PressureLevel::kCritical, PressureMode::kLocal},
      {"0 0 low", 0, 0, PressureLevel::kLow, PressureMode::kDefault},
      {"007 010 low", 7, 10, PressureLevel::kLow, PressureMode::kDefault},
      {"2147483647 5 low", 2147483647, 5, PressureLevel::kLow, PressureMode::kDefault}};
  for (const Case& c : kCases) {
    int efd = -9, lfd = -9;
    PressureLevel level = PressureLevel::kMedium;
    PressureMode mode = PressureMode::kLocal;
    EXPECT_EQ(parse_event_control(c.text, &efd, &lfd, &level, &mode), 0) << c.text;
    EXPECT_EQ(efd, c.efd) << c.text;
    EXPECT_EQ(lfd, c.lfd) << c.text;
    EXPECT_EQ(level, c.level) << c.text;
    EXPECT_EQ(mode, c.mode) << c.text;
  }
}

TEST(EventControl, Rejected) {
  for (const char* text : {"",
                           "3",
                           "3 4",
                           "3 4 ",
                           "3  4 low",
                           "3 4  low",
                           "3\t4 low",
                           "3 4\tlow",
                           "-3 4 low",
                           "+3 4 low",
                           "3 -4 low",
                           "x 4 low",
                           "3 x low",
                           "0x3 4 low",
                           "3 4 Low",
                           "3 4 low,",
                           "3 4 low,tree",
                           "3 4 critical,hierarchyX",
                           "2147483648 4 low",
                           "3 2147483648 low",
                           "99999999999999999999999 4 low",
                           "3 4 low extra",
                           " 4 low",
                           "3,4 low"}) {
    int efd = -9, lfd = -9;
    PressureLevel level = PressureLevel::kMedium;
    PressureMode mode = PressureMode::kLocal;
    EXPECT_EQ(parse_event_control(text, &efd, &lfd, &level, &mode), EINVAL) << text;
    EXPECT_EQ(efd, -9) << text;
    EXPECT_EQ(lfd, -9) << text;
    EXPECT_EQ(level, PressureLevel::kMedium) << text;
    EXPECT_EQ(mode, PressureMode::kLocal) << text;
  }
}

}  // namespace
}  // namespace memcg
