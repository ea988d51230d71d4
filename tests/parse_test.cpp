// Tests of the interface-file and scenario grammars (memcg/parse.hpp) and of the error names.

#include "memcg/files/parse.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memcg/base/errors.hpp"

namespace memcg {
namespace {

using namespace std::string_literals;
using namespace std::string_view_literals;

constexpr unsigned kShift4K = 12;
constexpr unsigned kShift64K = 16;
constexpr uint64_t kUntouched = 0xdeadbeefcafef00d;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// ---- errors.hpp ----

TEST(ErrnoNames, RoundTripEveryCode) {
  for (int code : {0, EINVAL, ERANGE, EBUSY, EAGAIN, EINTR, ENOMEM, EACCES, ENOENT}) {
    EXPECT_EQ(errno_from_name(errno_name(code)), code) << errno_name(code);
  }
  EXPECT_STREQ(errno_name(0), "ok");
  EXPECT_STREQ(errno_name(EINVAL), "EINVAL");
  EXPECT_STREQ(errno_name(EACCES), "EACCES");
  EXPECT_STREQ(errno_name(ENOENT), "ENOENT");
  EXPECT_STREQ(errno_name(EXDEV), "unknown");  // a code the library never returns
  EXPECT_STREQ(errno_name(-1), "unknown");
}

TEST(ErrnoNames, UnknownNames) {
  for (std::string_view name : {"", "unknown", "einval", "EINVAL ", "OK", "EXDEV"}) {
    EXPECT_EQ(errno_from_name(name), -1) << name;
  }
  EXPECT_EQ(errno_from_name("EAGAIN"), EAGAIN);
}

// ---- parse_limit / format_limit ----

uint64_t limit_or_die(std::string_view text, unsigned shift) {
  uint64_t units = kUntouched;
  EXPECT_EQ(parse_limit(text, shift, &units), 0) << '"' << text << '"';
  return units;
}

TEST(MaxUnits, MatchesPageCounterMax) {
  EXPECT_EQ(max_units(kShift4K), (uint64_t{1} << 51) - 1);
  EXPECT_EQ(max_units(kShift4K) << kShift4K, 9223372036854771712u);
  EXPECT_EQ(max_units(kShift64K), (uint64_t{1} << 47) - 1);
  EXPECT_EQ(max_units(0), static_cast<uint64_t>(INT64_MAX));
  static_assert(max_units(12) == 2251799813685247u);
}

TEST(ParseLimit, InterfaceExamples4K) {
  EXPECT_EQ(limit_or_die("1G", kShift4K), 262144u);
  EXPECT_EQ(limit_or_die("1G", kShift4K) << kShift4K, 1073741824u);
  EXPECT_EQ(limit_or_die("4097", kShift4K), 1u);
  EXPECT_EQ(limit_or_die("4095", kShift4K), 0u);
  EXPECT_EQ(limit_or_die("4096", kShift4K), 1u);
  EXPECT_EQ(limit_or_die("0x1000", kShift4K), 1u);
  EXPECT_EQ(limit_or_die("0X1000", kShift4K), 1u);
  EXPECT_EQ(limit_or_die("010", kShift4K), 0u);     // octal 8 bytes, floored
  EXPECT_EQ(limit_or_die("020000", kShift4K), 2u);  // octal 8192
  EXPECT_EQ(limit_or_die("0", kShift4K), 0u);
  EXPECT_EQ(limit_or_die("max", kShift4K), max_units(kShift4K));
  EXPECT_EQ(limit_or_die("9223372036854775807", kShift4K), max_units(kShift4K));
  EXPECT_EQ(limit_or_die("9223372036854771712", kShift4K), max_units(kShift4K));
  EXPECT_EQ(limit_or_die("9223372036854767616", kShift4K), max_units(kShift4K) - 1);
  EXPECT_EQ(limit_or_die("18446744073709551615", kShift4K), max_units(kShift4K));
}

TEST(ParseLimit, SuffixesEitherCase) {
  const char* kLetters[][2] = {{"K", "k"}, {"M", "m"}, {"G", "g"},
                               {"T", "t"}, {"P", "p"}, {"E", "e"}};
  for (unsigned i = 0; i < 6; ++i) {
    const uint64_t bytes = uint64_t{3} << (10 * (i + 1));
    const uint64_t expected = std::min(bytes >> kShift4K, max_units(kShift4K));
    for (const char* letter : kLetters[i]) {
      EXPECT_EQ(limit_or_die("3"s + letter, kShift4K), expected) << letter;
    }
  }
  EXPECT_EQ(limit_or_die("4k", kShift4K), 1u);
  EXPECT_EQ(limit_or_die("7K", kShift4K), 1u);  // 7168 bytes floor to one unit
  EXPECT_EQ(limit_or_die("0x10K", kShift4K), 4u);
  EXPECT_EQ(limit_or_die("010K", kShift4K), 2u);  // octal 8 KiB
}

TEST(ParseLimit, HexTakesEAsADigit) {
  // 'E'/'e' is a hex digit, so it cannot be a suffix after a hex number; 'G' can.
  EXPECT_EQ(limit_or_die("0x1E", 0), 30u);
  EXPECT_EQ(limit_or_die("0x1e", 0), 30u);
  EXPECT_EQ(limit_or_die("0x1G", 0), kGiB);
  EXPECT_EQ(limit_or_die("0x1g", 0), kGiB);
}

TEST(ParseLimit, SaturatesToSentinel) {
  for (const char* text : {"99999999999999999999999", "8E", "16E", "17E", "8192P",
                           "0xffffffffffffffffff", "077777777777777777777777", "8388608T"}) {
    EXPECT_EQ(limit_or_die(text, kShift4K), max_units(kShift4K)) << text;
    EXPECT_EQ(limit_or_die(text, kShift64K), max_units(kShift64K)) << text;
  }
  // 1E = 2^60 bytes is below the sentinel's 2^63 - 4096 bytes.
  EXPECT_EQ(limit_or_die("1E", kShift4K), uint64_t{1} << 48);
  EXPECT_EQ(limit_or_die("1E", kShift64K), uint64_t{1} << 44);
}

TEST(ParseLimit, StripsSurroundingWhitespace) {
  for (const char* text : {" 1G\n", "1G\n", "\t1G", "1G \r\n", "\v\f 1G \t"}) {
    EXPECT_EQ(limit_or_die(text, kShift4K), 262144u) << text;
  }
  EXPECT_EQ(limit_or_die(" max\n", kShift4K), max_units(kShift4K));
}

TEST(ParseLimit, TextEndsAtNul) {
  EXPECT_EQ(limit_or_die("1G\0junk"s, kShift4K), 262144u);
  EXPECT_EQ(limit_or_die("max\0"s, kShift4K), max_units(kShift4K));
  uint64_t units = kUntouched;
  EXPECT_EQ(parse_limit("\0001G"s, kShift4K, &units), EINVAL);
  EXPECT_EQ(units, kUntouched);
}

TEST(ParseLimit, RejectionsLeaveValueUntouched) {
  const std::vector<std::string> kRejected = {"1 G",
                                              "1KB",
                                              "-1",
                                              "+1",
                                              "1.5G",
                                              "MAX",
                                              "Max",
                                              "max\nmax",
                                              "0x",
                                              "0xg",
                                              "08",
                                              "09",
                                              "0x1x",
                                              "",
                                              "\n",
                                              " \t ",
                                              "K",
                                              "G1",
                                              "1GG",
                                              "1,5",
                                              "max1",
                                              "maxK",
                                              " - 1",
                                              "1B",
                                              "1Ki",
                                              "x1",
                                              "1\n2",
                                              "0b1",
                                              "1_000",
                                              "\xa0"
                                              "1",
                                              "1G\xa0"};
  for (unsigned shift : {kShift4K, kShift64K}) {
    for (const std::string& text : kRejected) {
      uint64_t units = kUntouched;
      EXPECT_EQ(parse_limit(text, shift, &units), EINVAL) << '"' << text << '"';
      EXPECT_EQ(units, kUntouched) << '"' << text << '"';
    }
  }
}

TEST(ParseLimit, EmptyWriteIsRejected) {
  // The kernel would store 0 for these; the library rejects them (see parse.hpp).
  for (const char* text : {"", "\n", " ", "\t\n"}) {
    uint64_t units = 5;
    EXPECT_EQ(parse_limit(text, kShift4K, &units), EINVAL);
    EXPECT_EQ(units, 5u);
  }
}

TEST(ParseLimit, Shift16) {
  EXPECT_EQ(limit_or_die("1G", kShift64K), 16384u);
  EXPECT_EQ(limit_or_die("65535", kShift64K), 0u);
  EXPECT_EQ(limit_or_die("65537", kShift64K), 1u);
  EXPECT_EQ(limit_or_die("0x10000", kShift64K), 1u);
  EXPECT_EQ(limit_or_die("64K", kShift64K), 1u);
  EXPECT_EQ(limit_or_die("max", kShift64K), max_units(kShift64K));
  EXPECT_EQ(limit_or_die("9223372036854775807", kShift64K), max_units(kShift64K));
}

TEST(FormatLimit, Values) {
  EXPECT_EQ(format_limit(0, kShift4K), "0\n");
  EXPECT_EQ(format_limit(1, kShift4K), "4096\n");
  EXPECT_EQ(format_limit(262144, kShift4K), "1073741824\n");
  EXPECT_EQ(format_limit(max_units(kShift4K) - 1, kShift4K), "9223372036854767616\n");
  EXPECT_EQ(format_limit(max_units(kShift4K), kShift4K), "max\n");
  EXPECT_EQ(format_limit(max_units(kShift4K) + 1, kShift4K), "max\n");
  EXPECT_EQ(format_limit(UINT64_MAX, kShift4K), "max\n");
  EXPECT_EQ(format_limit(1, kShift64K), "65536\n");
  EXPECT_EQ(format_limit(max_units(kShift64K), kShift64K), "max\n");
}

TEST(FormatLimit, RoundTrips) {
  for (unsigned shift : {0u, kShift4K, kShift64K, 21u, 62u}) {
    const uint64_t sentinel = max_units(shift);
    std::vector<uint64_t> values = {0, 1, 2, 3, sentinel - 1, sentinel, sentinel / 2};
    for (unsigned bit = 0; bit < 64; ++bit) {
      const uint64_t v = uint64_t{1} << bit;
      values.insert(values.end(), {v - 1, v, v + 1});
    }
    for (uint64_t u : values) {
      if (u > sentinel) continue;
      const std::string text = format_limit(u, shift);
      EXPECT_EQ(limit_or_die(text, shift), u) << text << " shift " << shift;
    }
  }
  // And text → units → text for canonical texts.
  for (const char* text : {"0\n", "4096\n", "1073741824\n", "max\n"}) {
    EXPECT_EQ(format_limit(limit_or_die(text, kShift4K), kShift4K), text);
  }
  // Unaligned writes read back floored.
  EXPECT_EQ(format_limit(limit_or_die("4097", kShift4K), kShift4K), "4096\n");
  EXPECT_EQ(format_limit(limit_or_die("16E", kShift4K), kShift4K), "max\n");
}

// ---- parse_bytes ----

TEST(ParseBytes, Values) {
  struct Case {
    std::string_view text;
    uint64_t bytes;
  } kCases[] = {{"0", 0},
                {"1", 1},
                {"4095", 4095},
                {"200M", 200u << 20},
                {"1G", kGiB},
                {" 2g\n", 2 * kGiB},
                {"1T", uint64_t{1} << 40},
                {"1P", uint64_t{1} << 50},
                {"15E", uint64_t{15} << 60},
                {"0x10", 16},
                {"010", 8},
                {"max", UINT64_MAX},
                {"18446744073709551615", UINT64_MAX},
                {"1G\0x"sv, kGiB}};
  for (const Case& c : kCases) {
    uint64_t bytes = kUntouched;
    EXPECT_EQ(parse_bytes(c.text, &bytes), 0) << c.text;
    EXPECT_EQ(bytes, c.bytes) << c.text;
  }
}

TEST(ParseBytes, Errors) {
  struct Case {
    std::string_view text;
    int err;
  } kCases[] = {{"", EINVAL},
                {"\n", EINVAL},
                {"1 G", EINVAL},
                {"1KB", EINVAL},
                {"-1", EINVAL},
                {"+1", EINVAL},
                {"1.5G", EINVAL},
                {"MAX", EINVAL},
                {"08", EINVAL},
                {"0x", EINVAL},
                {"K", EINVAL},
                {"16E", ERANGE},
                {"18446744073709551616", ERANGE},
                {"99999999999999999999999", ERANGE},
                {"16384P", ERANGE},
                {"99999999999999999999999x", EINVAL}};
  for (const Case& c : kCases) {
    uint64_t bytes = kUntouched;
    EXPECT_EQ(parse_bytes(c.text, &bytes), c.err) << c.text;
    EXPECT_EQ(bytes, kUntouched) << c.text;
  }
}

// ---- parse_duration ----

TEST(ParseDuration, Values) {
  struct Case {
    std::string_view text;
    uint64_t ns;
  } kCases[] = {{"250ms", 250'000'000},
                {"2s", 2'000'000'000},
                {"1m", 60'000'000'000},
                {"0s", 0},
                {"7ns", 7},
                {"15us", 15'000},
                {"010ms", 10'000'000},  // decimal: leading zeros do not mean octal
                {" 3s\n", 3'000'000'000},
                {"18446744073709551615ns", UINT64_MAX},
                {"18446744073s", 18'446'744'073'000'000'000u}};
  for (const Case& c : kCases) {
    uint64_t ns = kUntouched;
    EXPECT_EQ(parse_duration(c.text, &ns), 0) << c.text;
    EXPECT_EQ(ns, c.ns) << c.text;
  }
}

TEST(ParseDuration, Errors) {
  struct Case {
    std::string_view text;
    int err;
  } kCases[] = {{"5", EINVAL},
                {"1h", EINVAL},
                {"-1s", EINVAL},
                {"+1s", EINVAL},
                {"1.5s", EINVAL},
                {"5 s", EINVAL},
                {"s", EINVAL},
                {"", EINVAL},
                {"\n", EINVAL},
                {"1S", EINVAL},
                {"1Ms", EINVAL},
                {"1sec", EINVAL},
                {"1ss", EINVAL},
                {"0x10s", EINVAL},
                {"1m1s", EINVAL},
                {"1mss", EINVAL},
                {"1 ms", EINVAL},
                {"18446744074s", ERANGE},
                {"307445735m", ERANGE},
                {"18446744073709551616ns", ERANGE},
                {"99999999999999999999999x", EINVAL}};
  for (const Case& c : kCases) {
    uint64_t ns = kUntouched;
    EXPECT_EQ(parse_duration(c.text, &ns), c.err) << c.text;
    EXPECT_EQ(ns, kUntouched) << c.text;
  }
  uint64_t ns = 0;
  EXPECT_EQ(parse_duration("307445734m", &ns), 0);
  EXPECT_EQ(ns, 307445734u * 60'000'000'000u);
}

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
