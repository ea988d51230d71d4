// Tests of the value grammars of memcg/parse.hpp (limits, bytes, durations) and of the error
// names; the control-file grammars are in parse_control_test.cpp.

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
  // Within 64 bits but above the largest limit: `max`, as the kernel clamps.
  for (const char* text : {"8E", "15E", "8192P", "8388608T", "18446744073709551615",
                           "0xffffffffffffffff", "01777777777777777777777"}) {
    EXPECT_EQ(limit_or_die(text, kShift4K), max_units(kShift4K)) << text;
    EXPECT_EQ(limit_or_die(text, kShift64K), max_units(kShift64K)) << text;
  }
  // 1E = 2^60 bytes is below the sentinel's 2^63 - 4096 bytes.
  EXPECT_EQ(limit_or_die("1E", kShift4K), uint64_t{1} << 48);
  EXPECT_EQ(limit_or_die("1E", kShift64K), uint64_t{1} << 44);
}

// Past 64 bits: refused, never taken as `max` (which would turn the limit off) nor wrapped.
TEST(ParseLimit, PastSixtyFourBitsIsRangeError) {
  for (const char* text : {"18446744073709551616", "99999999999999999999999", "16E", "17E",
                           "16384P", "0xffffffffffffffffff", "077777777777777777777777",
                           " 16E\n"}) {
    uint64_t units = 12345;
    EXPECT_EQ(parse_limit(text, kShift4K, &units), ERANGE) << text;
    EXPECT_EQ(units, 12345u) << text;  // untouched
  }
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
  EXPECT_EQ(format_limit(limit_or_die("8E", kShift4K), kShift4K), "max\n");
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

}  // namespace
}  // namespace memcg
