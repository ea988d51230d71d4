// errors.hpp: errno_name knows every code the library returns. The list is checked against the
// sources: every errno macro named in src/ and include/ (returned, stored or documented as a
// result) must be in kLibraryErrnos and have its own name.
#include "memcg/base/errors.hpp"
#include "memcg/c/memcg.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/admission/reservation.hpp"

namespace memcg {
namespace {

TEST(ErrnoCoverage, EveryListedCodeHasItsOwnNameAndRoundTrips) {
  std::set<std::string> names;
  for (int code : kLibraryErrnos) {
    const std::string name = errno_name(code);
    EXPECT_NE(name, "unknown") << code;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
    EXPECT_EQ(errno_from_name(name), code) << name;
    // The system's own name for the code (glibc), so that no case label is off.
    if (code != 0) {
      EXPECT_STREQ(strerrorname_np(code), name.c_str());
    }
  }
  EXPECT_STREQ(errno_name(EADDRINUSE), "EADDRINUSE");
  EXPECT_STREQ(errno_name(EALREADY), "EALREADY");
}

// Every errno macro the library's sources use (outside tests and tools).
std::map<std::string, std::string> errno_macros_in_sources() {
  std::map<std::string, std::string> found;  // name -> first file
  std::set<std::string> errno_names;
  for (int c = 1; c < 4096; ++c)
    if (const char* n = strerrorname_np(c)) errno_names.insert(n);
  const std::regex token(R"(\bE[A-Z0-9]{2,}\b)");
  for (const char* dir : {"src", "include"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(std::string(MEMCG_SOURCE_DIR) + "/" + dir)) {
      const std::string ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp") continue;
      if (entry.path().filename() == "errors.hpp") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (auto it = std::sregex_iterator(s.begin(), s.end(), token); it != std::sregex_iterator();
           ++it) {
        const std::string name = it->str();
        if (errno_names.count(name)) found.emplace(name, entry.path().string());
      }
    }
  }
  return found;
}

TEST(ErrnoCoverage, EveryErrnoInTheSourcesHasAName) {
  const auto found = errno_macros_in_sources();
  ASSERT_GT(found.size(), 5u);  // the scan read the sources
  // Set internally and never returned to a caller: cpu.cpp's errno for a missing system call,
  // a lock guard's comment about std::system_error, the HTTP server's probe of a stale Unix
  // socket (a refused connect means nobody serves there).
  const std::set<std::string> internal_only = {"ENOSYS", "EDEADLK", "ECONNREFUSED"};
  for (const auto& [name, file] : found) {
    if (internal_only.count(name)) continue;
    EXPECT_NE(errno_from_name(name), -1) << name << " (first in " << file
                                         << ") is missing from kLibraryErrnos / errno_name";
  }
}

// The memory path's statuses (errors.hpp, kind 2): each value has its own name for logs.
TEST(StatusNames, EveryStatusHasItsOwnName) {
  static_assert(charge_status_name(ChargeStatus::kNoMem)[0] == 'n');  // usable at compile time
  std::set<std::string> names;
  for (ChargeStatus s : {ChargeStatus::kOk, ChargeStatus::kForced, ChargeStatus::kNoMem})
    names.insert(charge_status_name(s));
  EXPECT_EQ(names, (std::set<std::string>{"ok", "forced", "nomem"}));
  EXPECT_STREQ(charge_status_name(static_cast<ChargeStatus>(200)), "unknown");
  names.clear();
  for (WaitStatus s : {WaitStatus::kOk, WaitStatus::kTimedOut, WaitStatus::kCancelled,
                       WaitStatus::kRemoved, WaitStatus::kInvalid, WaitStatus::kNeverFits})
    names.insert(wait_status_name(s));
  EXPECT_EQ(names.size(), 6u);
  EXPECT_STREQ(wait_status_name(static_cast<WaitStatus>(200)), "unknown");
  names.clear();
  for (ReserveStatus s :
       {ReserveStatus::kOk, ReserveStatus::kForced, ReserveStatus::kNoMem,
        ReserveStatus::kNoMemCostly, ReserveStatus::kTimedOut, ReserveStatus::kCancelled,
        ReserveStatus::kKilled, ReserveStatus::kRemoved, ReserveStatus::kInvalid,
        ReserveStatus::kNeverFits})
    names.insert(reserve_status_name(s));
  EXPECT_EQ(names.size(), 10u);
  EXPECT_EQ(names.count("unknown"), 0u);
  EXPECT_STREQ(reserve_status_name(static_cast<ReserveStatus>(200)), "unknown");
}

// One spelling for a status across the enums (lower case, words joined by hyphens): a status
// that two enums share has the same name in both, and the C API names its statuses as C++ does.
TEST(StatusNames, SharedStatusesAreSpelledAlikeEverywhere) {
  EXPECT_STREQ(charge_status_name(ChargeStatus::kOk), reserve_status_name(ReserveStatus::kOk));
  EXPECT_STREQ(charge_status_name(ChargeStatus::kForced),
               reserve_status_name(ReserveStatus::kForced));
  EXPECT_STREQ(charge_status_name(ChargeStatus::kNoMem),
               reserve_status_name(ReserveStatus::kNoMem));
  const std::pair<WaitStatus, ReserveStatus> shared[] = {
      {WaitStatus::kOk, ReserveStatus::kOk},
      {WaitStatus::kTimedOut, ReserveStatus::kTimedOut},
      {WaitStatus::kCancelled, ReserveStatus::kCancelled},
      {WaitStatus::kRemoved, ReserveStatus::kRemoved},
      {WaitStatus::kInvalid, ReserveStatus::kInvalid},
      {WaitStatus::kNeverFits, ReserveStatus::kNeverFits}};
  for (const auto& [w, r] : shared)
    EXPECT_STREQ(wait_status_name(w), reserve_status_name(r));
  for (int s = 0; s <= 9; ++s) {  // the C values are the C++ ones (memcg.h)
    const std::string name = reserve_status_name(static_cast<ReserveStatus>(s));
    EXPECT_EQ(name, memcg_reserve_status_name(s)) << s;
    for (char c : name) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '-') << name;
  }
  for (int s = 0; s <= 2; ++s)
    EXPECT_STREQ(charge_status_name(static_cast<ChargeStatus>(s)), memcg_charge_status_name(s));
  EXPECT_STREQ(memcg_reserve_status_name(12345),
               reserve_status_name(static_cast<ReserveStatus>(200)));
  EXPECT_STREQ(memcg_charge_status_name(12345),
               charge_status_name(static_cast<ChargeStatus>(200)));
}

}  // namespace
}  // namespace memcg
