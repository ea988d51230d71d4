// What an OOM report keeps of its users' text and how OOMs are counted: every string of an entry
// of the OOM log capped by one helper on a UTF-8 boundary (memcg/core/oom/oom_log.hpp), totals by
// outcome, and OOM handler statistics that do not trust a handler's claim (memcg/core/oom/oom.hpp).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "memcg/base/internal/utf8.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/files/prometheus.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;

constexpr size_t kMiB = size_t{1} << 20;

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  return o;
}

// A member that releases everything when killed and `spill` units when asked to spill.
struct Query {
  Query(Group& g, std::string name, int64_t spill = 0)
      : m(g, std::move(name), [spill](Member& self) {
          if (Member::cancel_reason() == CancelReason::kSpill)
            self.uncharge(spill);
          else
            self.uncharge(self.charged());
        }) {}
  void hold(int64_t units) {
    for (int64_t i = 0; i < units; ++i) ASSERT_TRUE(charged(m.charge(1)));
  }
  Member m;
};

struct Scene {
  Controller ctl{one_shard()};
  GroupRef d;
  Scene() {
    EXPECT_EQ(ctl.create("d", &d), 0);
    d->set_max(100 * ctl.unit_size());
  }
};

bool valid_utf8(std::string_view s) {
  while (!s.empty()) {
    const size_t n = internal::utf8_char_length(s);
    if (n == 0) return false;
    s.remove_prefix(n);
  }
  return true;
}

// Every string of an entry, for the bound checks.
std::vector<const std::string*> strings_of(const OomLogEntry& e) {
  std::vector<const std::string*> v;
  const OomReport& o = e.oom;
  for (const std::string* s : {&o.domain, &o.victim, &o.oom_group, &o.handler}) v.push_back(s);
  for (const auto& c : o.top) v.push_back(&c.member), v.push_back(&c.group);
  for (const auto& k : o.killed) v.push_back(&k);
  for (const auto& f : o.failed) v.push_back(&f.member), v.push_back(&f.error);
  for (const auto& h : o.handlers)
    v.push_back(&h.handler), v.push_back(&h.group), v.push_back(&h.outcome);
  for (const auto& s : o.spilled) v.push_back(&s);
  const PreemptReport& p = e.preempt;
  v.push_back(&p.domain);
  v.push_back(&p.waiter_group);
  for (const auto& a : p.asked) v.push_back(&a.member), v.push_back(&a.group);
  for (const auto& f : p.failed) v.push_back(&f.member), v.push_back(&f.error);
  for (const auto* list : {&e.members, &e.groups})
    for (const auto& c : *list) v.push_back(&c.name), v.push_back(&c.group);
  return v;
}

void expect_bounded(const OomLogEntry& e) {
  size_t total = 0;
  for (const std::string* s : strings_of(e)) {
    EXPECT_LE(s->size(), OomLog::kMaxName);
    EXPECT_TRUE(valid_utf8(*s)) << *s;
    total += s->size();
  }
  EXPECT_LE(total, OomLog::kMaxEntryText);
  for (size_t n : {e.oom.handlers.size(), e.oom.spilled.size(), e.oom.killed.size(),
                   e.oom.failed.size()})
    EXPECT_LE(n, OomLog::kMaxListed);
}

// ---- the cap ---------------------------------------------------------------------------------

TEST(Utf8Cap, CutsOnACharacterBoundaryAndRepairsInvalidBytes) {
  using internal::utf8_capped;
  // "é" is 2 bytes, "€" 3, "😀" 4: a cut that would split one drops it whole.
  EXPECT_EQ(utf8_capped("ab\xC3\xA9", 3), "ab");
  EXPECT_EQ(utf8_capped("ab\xC3\xA9", 4), "ab\xC3\xA9");
  EXPECT_EQ(utf8_capped("a\xE2\x82\xAC", 3), "a");
  EXPECT_EQ(utf8_capped("a\xF0\x9F\x98\x80", 4), "a");
  EXPECT_EQ(utf8_capped("a\xF0\x9F\x98\x80", 5), "a\xF0\x9F\x98\x80");
  // Invalid: a lone continuation byte, a truncated character, an overlong form, a surrogate,
  // past U+10FFFF, 0xFF. Each maximal invalid prefix becomes one U+FFFD.
  EXPECT_EQ(utf8_capped("\x80x", 10), "\xEF\xBF\xBDx");
  EXPECT_EQ(utf8_capped("\xE2\x82x", 10), "\xEF\xBF\xBDx");
  EXPECT_EQ(utf8_capped("\xC0\xAF", 10), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_capped("\xED\xA0\x80", 10), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_capped("\xF4\x90\x80\x80", 3), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8_capped("\xFF", 2), "");  // the replacement does not fit: nothing
  std::string s(300, 'a');
  s[255] = '\xC3';
  s[256] = '\xA9';
  internal::utf8_cap(s, 256);
  EXPECT_EQ(s, std::string(255, 'a'));
}

// A 1 MiB handler name, member name and exception text: every string of the entry the
// OOM leaves in the log is at most kMaxName bytes, and the entry at most kMaxEntryText.
TEST(OomReportBounds, HugeHandlerNamesAndMessagesAreCapped) {
  Scene s;
  const std::string huge_handler(kMiB, 'h');
  const std::string huge_what(kMiB, 'w');
  // One handler: a second one may be skipped when the first outlasts the chain's budget (1 MiB
  // copies under a sanitizer on a loaded machine), which is not what this test is about.
  OomHandler thrower;
  ASSERT_EQ(OomHandler::add(*s.d, huge_handler,
                            [&](const OomContext&) -> int64_t {
                              throw std::runtime_error(huge_what);
                            },
                            &thrower),
            0);
  Query spiller(*s.d, std::string(kMiB, 's'), /*spill=*/0);  // spills nothing: then killed
  ASSERT_EQ(spiller.m.set_spill_grace(1ms), 0);
  spiller.hold(100);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*s.d, 4, &r));
  EXPECT_TRUE(spiller.m.killed());
  // The report itself carries the handler's strings at the cap already.
  ASSERT_EQ(r.handlers.size(), 1u);
  EXPECT_EQ(r.handlers[0].handler.size(), OomLog::kMaxName);
  EXPECT_EQ(r.handlers[0].outcome.size(), OomLog::kMaxName);
  EXPECT_EQ(r.handlers[0].outcome.rfind("threw: www", 0), 0u) << r.handlers[0].outcome;

  const std::vector<OomLogEntry> log = oom_log(s.ctl).snapshot();
  ASSERT_EQ(log.size(), 1u);
  const OomLogEntry& e = log[0];
  expect_bounded(e);
  ASSERT_EQ(e.oom.handlers.size(), 1u);
  EXPECT_EQ(e.oom.handlers[0].handler, huge_handler.substr(0, OomLog::kMaxName));
  ASSERT_EQ(e.oom.spilled.size(), 1u);
  EXPECT_EQ(e.oom.spilled[0].size(), OomLog::kMaxName);
  EXPECT_EQ(e.oom.victim.size(), OomLog::kMaxName);
}

// Lists of any length and strings of any size appended directly: the same bounds, and the
// worst case stays within kMaxEntryText.
TEST(OomReportBounds, EveryListAndStringOfAnEntryIsCapped) {
  Scene s;
  OomReport r;
  const std::string big(4096, 'x');
  r.domain = r.victim = r.oom_group = r.handler = big;
  r.top.assign(5, OomCandidate{big, big});
  r.killed.assign(100, big);
  r.failed.assign(100, OomFailure{big, big});
  r.handlers.assign(100, OomHandlerCall{big, big, 1, big});
  r.spilled.assign(100, big);
  oom_log(s.ctl).append(*s.d, r);
  PreemptReport p;
  p.domain = p.waiter_group = big;
  p.asked.assign(100, PreemptVictim{big, big});
  p.failed.assign(100, OomFailure{big, big});
  oom_log(s.ctl).append(*s.d, p);
  const auto log = oom_log(s.ctl).snapshot();
  ASSERT_EQ(log.size(), 2u);
  for (const OomLogEntry& e : log) expect_bounded(e);
  EXPECT_EQ(log[0].oom.handlers.size(), OomLog::kMaxListed);
  EXPECT_EQ(log[0].oom.spilled.size(), OomLog::kMaxListed);
  EXPECT_EQ(log[0].oom.handler.size(), OomLog::kMaxName);
  EXPECT_EQ(log[1].preempt.asked.size(), OomLog::kMaxListed);
}

// Multi-byte names at the cut, and bytes that are not UTF-8: the entry's strings are valid
// UTF-8, cut before the character that does not fit.
TEST(OomReportBounds, NamesAreCutOnACharacterBoundary) {
  Scene s;
  // 255 ASCII bytes then "é" (bytes 255 and 256): a cut at 256 bytes would split it.
  const std::string at_cut = std::string(255, 'a') + "\xC3\xA9";
  Query victim(*s.d, at_cut);
  Query bad(*s.d, "bad\xFF\xFEname");
  victim.hold(60);
  bad.hold(40);
  ASSERT_TRUE(OomKiller::kill(*s.d, 4, nullptr));
  const auto log = oom_log(s.ctl).snapshot();
  ASSERT_EQ(log.size(), 1u);
  expect_bounded(log[0]);
  EXPECT_EQ(log[0].oom.victim, std::string(255, 'a'));
  bool found_bad = false;
  for (const OomConsumer& c : log[0].members)
    found_bad |= c.name == "bad\xEF\xBF\xBD\xEF\xBF\xBDname";
  EXPECT_TRUE(found_bad);
  const std::string line = format_oom_log_line(log[0]);
  EXPECT_TRUE(valid_utf8(line));
}

// ---- totals by outcome -----------------------------------------------------------------------

uint64_t outcome(Controller& ctl, OomOutcome o) {
  return oom_log(ctl).totals().by_outcome[static_cast<int>(o)];
}

TEST(OomOutcomes, CountWhatHappened) {
  Scene s;
  Query a(*s.d, "a", /*spill=*/10);
  a.hold(100);
  // A handler makes room: handled, not "no victim".
  OomHandler h;
  ASSERT_EQ(OomHandler::add(*s.d, "frees",
                            [&](const OomContext&) { return a.m.uncharge(10); }, &h),
            0);
  ASSERT_TRUE(OomKiller::kill(*s.d, 4, nullptr));
  h.reset();
  a.hold(10);
  // A spill makes room: spilled, not a kill.
  ASSERT_EQ(a.m.set_spill_grace(100ms), 0);
  ASSERT_TRUE(OomKiller::kill(*s.d, 4, nullptr));
  EXPECT_FALSE(a.m.killed());
  a.hold(10);
  // Nothing makes room and the member is killed.
  ASSERT_EQ(a.m.set_spill_grace(0ns), 0);
  ASSERT_TRUE(OomKiller::kill(*s.d, 4, nullptr));
  EXPECT_TRUE(a.m.killed());
  // Nobody left to kill.
  Member immune(*s.d, "immune", nullptr, Member::kImmune);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(charged(immune.charge(1)));
  EXPECT_FALSE(OomKiller::kill(*s.d, 4, nullptr));

  const OomLogTotals t = oom_log(s.ctl).totals();
  EXPECT_EQ(t.reports, 4u);
  EXPECT_EQ(outcome(s.ctl, OomOutcome::kHandled), 1u);
  EXPECT_EQ(outcome(s.ctl, OomOutcome::kSpilled), 1u);
  EXPECT_EQ(outcome(s.ctl, OomOutcome::kKill), 1u);
  EXPECT_EQ(outcome(s.ctl, OomOutcome::kNone), 1u);
  EXPECT_EQ(t.kills, 1u);
  const std::string text = render_prometheus(s.ctl);
  for (const char* line : {"memcg_oom_reports_total{group=\"/\",outcome=\"kill\"} 1\n",
                           "memcg_oom_reports_total{group=\"/\",outcome=\"handled\"} 1\n",
                           "memcg_oom_reports_total{group=\"/\",outcome=\"spilled\"} 1\n",
                           "memcg_oom_reports_total{group=\"/\",outcome=\"none\"} 1\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
  immune.uncharge(immune.charged());
}

// ---- handler statistics ----------------------------------------------------------------------

// A handler that claims more than its group held: each claim is clamped to that and counted,
// and the total never wraps (run under UBSan: the asan preset).
TEST(OomHandlerStats, AClaimPastWhatTheGroupHeldIsClampedAndCounted) {
  Scene s;
  Query a(*s.d, "a"), b(*s.d, "b"), c(*s.d, "c");
  a.hold(50);
  b.hold(50);
  OomHandler liar;
  ASSERT_EQ(OomHandler::add(*s.d, "liar", [](const OomContext&) { return INT64_MAX; }, &liar),
            0);
  // Two OOMs, each calling the liar (it frees nothing) and then killing a member; before, the
  // second claim wrapped the total negative.
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*s.d, 4, &r));
  ASSERT_EQ(r.handlers.size(), 1u);
  EXPECT_EQ(r.handlers[0].freed, 100);  // what d held
  c.hold(50);
  ASSERT_TRUE(OomKiller::kill(*s.d, 4, &r));
  ASSERT_EQ(r.handlers.size(), 1u);
  EXPECT_EQ(r.handlers[0].freed, 100);
  const OomHandlerStats st = liar.stats();
  EXPECT_EQ(st.calls, 2u);
  EXPECT_EQ(st.overclaimed, 2u);
  EXPECT_EQ(st.freed_units, 200);
}

// Honest claims are kept as they are.
TEST(OomHandlerStats, AnHonestClaimIsKept) {
  Scene s;
  Query a(*s.d, "a");
  a.hold(100);
  OomHandler h;
  ASSERT_EQ(OomHandler::add(*s.d, "honest",
                            [&](const OomContext&) { return a.m.uncharge(10); }, &h),
            0);
  ASSERT_TRUE(OomKiller::kill(*s.d, 4, nullptr));
  EXPECT_EQ(h.stats().freed_units, 10);
  EXPECT_EQ(h.stats().overclaimed, 0u);
}

}  // namespace
}  // namespace memcg
