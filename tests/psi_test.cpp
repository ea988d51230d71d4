// PSI: stall accounting, averages on virtual time, triggers, memory.pressure (psi.md).
#include "memcg/core/signal/psi.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "memcg/core/admission/admission_queue.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/core/charge/attach.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/charge/limits.hpp"

#include "manual_controller.hpp"

namespace memcg {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSec = 1'000'000'000;

struct Sim : testing::ManualController {
  Sim() : ManualController(0) {
    a = make("a");
    b = make("a/b");
    sib = make("s");
  }
  void stall(Group& g, uint64_t ns) {
    MemStall s(g);
    clock.advance(ns);
  }
  std::string text(Group& g) {
    std::string out;
    EXPECT_EQ(read_file(g, "memory.pressure", &out), 0);
    return out;
  }
  GroupRef a, b, sib;
};

std::string avg_text(uint64_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llu.%02llu", static_cast<unsigned long long>(a >> 11),
                static_cast<unsigned long long>(((a & 2047) * 100) >> 11));
  return buf;
}

// ---- the file -----------------------------------------------------------------------------------

TEST(PsiFile, FreshGroupAndRoot) {
  Sim s;
  const std::string zero =
      "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
      "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  EXPECT_EQ(s.text(*s.b), zero);
  EXPECT_EQ(s.text(s.ctl.root()), zero);
  const auto names = file_names(s.ctl.root());
  EXPECT_NE(std::find(names.begin(), names.end(), "memory.pressure"), names.end());
  const auto child = file_names(*s.b);
  EXPECT_NE(std::find(child.begin(), child.end(), "memory.pressure"), child.end());
}

// ---- averages -----------------------------------------------------------------------------------

TEST(PsiAverages, OneSecondInEveryTwo) {
  Sim s;
  // The hand computation: pct 50 -> x = 102400; avg10 = 102400 x 371 / 2048 = 18550 = 9.05.
  s.stall(*s.b, kSec);
  s.clock.advance(kSec);
  PsiStats st = psi_stats(*s.b);
  EXPECT_EQ(st.avg[0][0], 18550u);
  EXPECT_EQ(avg_text(st.avg[0][0]), "9.05");
  EXPECT_EQ(avg_text(st.avg[0][1]), "1.63");  // 102400 x 67 / 2048 = 3350
  EXPECT_EQ(avg_text(st.avg[0][2]), "0.34");  // 102400 x 14 / 2048 = 700
  EXPECT_EQ(st.total_us[0], 1'000'000u);
  // One unattached thread is every task of the group: FULL too.
  EXPECT_EQ(st.total_us[1], 1'000'000u);
  EXPECT_EQ(s.text(*s.b),
            "some avg10=9.05 avg60=1.63 avg300=0.34 total=1000000\n"
            "full avg10=9.05 avg60=1.63 avg300=0.34 total=1000000\n");
  for (int period = 2; period <= 5; ++period) {
    s.stall(*s.b, kSec);
    s.clock.advance(kSec);
  }
  st = psi_stats(*s.b);
  EXPECT_EQ(avg_text(st.avg[0][0]), "31.59");
  EXPECT_EQ(st.total_us[0], 5'000'000u);
  EXPECT_LT(st.avg[0][1], st.avg[0][0]);
  EXPECT_LT(st.avg[0][2], st.avg[0][1]);
  // The same whether the group is read every period or only at the end: the periods are folded
  // in at their grid points.
  Sim lazy;
  for (int period = 1; period <= 5; ++period) {
    lazy.stall(*lazy.b, kSec);
    lazy.clock.advance(kSec);
    if (period == 3) (void)psi_stats(*lazy.b);
  }
  const PsiStats st2 = psi_stats(*lazy.b);
  for (int w = 0; w < 3; ++w) EXPECT_EQ(st2.avg[0][w], st.avg[0][w]);
}

// The accessors read the fixed-point averages as percent: 2048 is 1 %, a whole-period stall
// tends to 100 %, and centipercent() is the memory.pressure figure without its dot.
TEST(PsiAverages, PercentAccessorsMatchTheFile) {
  Sim s;
  s.stall(*s.b, kSec);
  s.clock.advance(kSec);
  PsiStats st = psi_stats(*s.b);
  EXPECT_EQ(kPsiOnePercent, internal::PsiAverages::kFixed1);  // 1.0 of a percent
  EXPECT_DOUBLE_EQ(st.percent(PsiState::kSome, PsiWindow::k10s), 18550.0 / 2048.0);  // 9.057 %
  EXPECT_EQ(st.centipercent(PsiState::kSome, PsiWindow::k10s), 905u);                // "9.05"
  EXPECT_EQ(st.centipercent(PsiState::kSome, PsiWindow::k60s), 163u);                // "1.63"
  EXPECT_EQ(st.centipercent(PsiState::kFull, PsiWindow::k300s), 34u);                // "0.34"
  EXPECT_EQ(st.raw(PsiState::kFull, PsiWindow::k60s), st.avg[1][1]);
  // Stalled through 60 s of periods: avg10 close to 100 %, never above.
  for (int period = 0; period < 30; ++period) s.stall(*s.b, 2 * kSec);
  st = psi_stats(*s.b);
  EXPECT_GT(st.percent(PsiState::kSome, PsiWindow::k10s), 99.0);
  EXPECT_LE(st.percent(PsiState::kSome, PsiWindow::k10s), 100.0);
  EXPECT_LE(st.avg[0][0], 100 * kPsiOnePercent);
  // Every figure agrees with the text of memory.pressure.
  const std::string text = format_psi(st);
  for (int state = 0; state < 2; ++state)
    for (int w = 0; w < 3; ++w) {
      const uint64_t c = st.centipercent(state ? PsiState::kFull : PsiState::kSome,
                                         static_cast<PsiWindow>(w));
      char want[32];
      std::snprintf(want, sizeof want, "=%llu.%02llu ", static_cast<unsigned long long>(c / 100),
                    static_cast<unsigned long long>(c % 100));
      EXPECT_NE(text.find(want), std::string::npos) << want << " in " << text;
    }
}

TEST(PsiAverages, IntegerPercentRounding) {
  Sim s;
  s.stall(*s.b, 999 * kMs);
  s.clock.advance(2 * kSec - 999 * kMs);
  // 0.999 s of 2 s is 49 %, not 50: 49 x 2048 x 371 / 2048 = 18179.
  EXPECT_EQ(psi_stats(*s.b).avg[0][0], 18179u);
  EXPECT_EQ(avg_text(18179), "8.87");
}

TEST(PsiAverages, IdlePeriodsDecayInOneStep) {
  Sim s;
  s.stall(*s.b, kSec);
  s.clock.advance(kSec);
  const uint64_t first = psi_stats(*s.b).avg[0][0];
  s.clock.advance(20 * kSec);  // ten idle periods
  const uint64_t after = psi_stats(*s.b).avg[0][0];
  // Nine missed periods decayed at once, then the period that ends now.
  const uint64_t e9 = internal::fixed_power(1677, 11, 9);
  uint64_t expect = first * e9 / 2048;
  expect = expect * 1677 / 2048;
  EXPECT_EQ(after, expect);
  // Within 1 % of ten single steps (e^9 is itself rounded to 11 bits).
  uint64_t stepwise = first;
  for (int i = 0; i < 10; ++i) stepwise = stepwise * 1677 / 2048;
  EXPECT_NEAR(static_cast<double>(after), static_cast<double>(stepwise), stepwise / 100.0);
}

TEST(PsiAverages, FixedPower) {
  EXPECT_EQ(internal::fixed_power(1677, 11, 0), 2048u);
  EXPECT_EQ(internal::fixed_power(1677, 11, 1), 1677u);
  EXPECT_EQ(internal::fixed_power(1677, 11, 2), (1677u * 1677 + 1024) >> 11);
}

TEST(PsiAverages, SampleBeyondThePeriodIsClampedAndCarried) {
  internal::PsiAverages avg;
  avg.reset(0);
  const uint64_t t1[2] = {3 * kSec, 0};
  avg.update(2 * kSec, t1);  // 3 s of stall reported in a 2 s period: 100 %
  EXPECT_EQ(avg.reported(0), 2 * kSec);
  EXPECT_EQ(avg.avg(0, 0), (100 * 2048 * 371 + 2047) / 2048);
  const uint64_t a1 = avg.avg(0, 0);
  avg.update(4 * kSec, t1);  // the excess second shows up now: 50 %
  EXPECT_EQ(avg.reported(0), 3 * kSec);
  const uint64_t x = 50 * 2048;
  EXPECT_EQ(avg.avg(0, 0), (a1 * 1677 + x * 371 + (x >= a1 ? 2047 : 0)) / 2048);
  // A late run keeps the grid and decays the missed periods.
  avg.update(9 * kSec, t1);
  EXPECT_EQ(avg.next_update_ns(), 10 * kSec);
}

// ---- SOME, FULL and the tree ------------------------------------------------------------------

TEST(PsiStates, OneOfTwoTasksStalledIsSomeNotFull) {
  Sim s;
  ScopedAttach me(*s.b);
  ASSERT_TRUE(me.ok());
  std::atomic<int> phase{0};
  std::thread other([&] {
    ScopedAttach att(*s.b);
    phase = 1;
    while (phase != 2) std::this_thread::yield();
    {
      MemStall st(*s.b);
      phase = 3;
      while (phase != 4) std::this_thread::yield();
    }
    phase = 5;
    while (phase != 6) std::this_thread::yield();
  });
  while (phase != 1) std::this_thread::yield();
  s.stall(*s.b, kSec);  // one of two attached threads stalls
  PsiStats st = psi_stats(*s.b);
  EXPECT_EQ(st.total_us[0], 1'000'000u);
  EXPECT_EQ(st.total_us[1], 0u);
  phase = 2;
  while (phase != 3) std::this_thread::yield();
  s.stall(*s.b, kSec);  // both stall
  phase = 4;
  while (phase != 5) std::this_thread::yield();
  st = psi_stats(*s.b);
  EXPECT_EQ(st.total_us[0], 2'000'000u);
  EXPECT_EQ(st.total_us[1], 1'000'000u);
  phase = 6;
  other.join();
}

TEST(PsiStates, AncestorSeesDescendantSiblingDoesNot) {
  Sim s;
  s.stall(*s.b, 300 * kMs);
  EXPECT_EQ(psi_stats(*s.b).total_us[0], 300'000u);
  EXPECT_EQ(psi_stats(*s.a).total_us[0], 300'000u);
  EXPECT_EQ(psi_stats(s.ctl.root()).total_us[0], 300'000u);
  EXPECT_EQ(psi_stats(*s.sib).total_us[0], 0u);
}

TEST(PsiStates, AttachedThreadElsewhereKeepsTheAncestorFromFull) {
  Sim s;
  // A thread attached to the sibling is a running task of the root: the root is SOME only.
  std::atomic<int> phase{0};
  std::thread other([&] {
    ScopedAttach att(*s.sib);
    phase = 1;
    while (phase != 2) std::this_thread::yield();
  });
  while (phase != 1) std::this_thread::yield();
  s.stall(*s.b, kSec);
  EXPECT_EQ(psi_stats(*s.b).total_us[1], 1'000'000u);
  EXPECT_EQ(psi_stats(s.ctl.root()).total_us[0], 1'000'000u);
  EXPECT_EQ(psi_stats(s.ctl.root()).total_us[1], 0u);
  phase = 2;
  other.join();
}

TEST(PsiStates, SectionsNest) {
  Sim s;
  {
    MemStall outer(*s.b);
    s.clock.advance(100 * kMs);
    {
      MemStall inner(*s.sib);  // no-op: the thread already stalls
      s.clock.advance(100 * kMs);
    }
    s.clock.advance(100 * kMs);
  }
  EXPECT_EQ(psi_stats(*s.b).total_us[0], 300'000u);
  EXPECT_EQ(psi_stats(*s.sib).total_us[0], 0u);
}

// ---- tasks: threads working for a group ---------------------------------------------------------

// Waits (bounded) until `pred` holds; false after 10 s.
template <typename Pred>
bool wait_for(Pred pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(PsiTasks, TwoWorkersOneThrottledIsSomeNotFull) {
  // Two unattached workers of a pool, each working for b in a scope; one is throttled on b's
  // memory.high while the other keeps running: b and its ancestors are SOME, never FULL.
  Sim s;
  s.b->set_high(uint64_t{100} << 20);
  std::atomic<int> phase{0};
  std::thread other([&] {
    WorkScope work(*s.b);
    phase = 1;
    while (phase != 2) std::this_thread::yield();
  });
  ASSERT_TRUE(wait_for([&] { return phase == 1; }));
  {
    WorkScope work(*s.b);
    ASSERT_TRUE(charged(try_charge(*s.b, 120 * 256)));  // over high: a 2 s throttling sleep
  }
  EXPECT_EQ(s.clock.total_slept_ns(), 2 * kSec);
  for (Group* g : {s.b.get(), s.a.get(), &s.ctl.root()}) {
    const PsiStats st = psi_stats(*g);
    EXPECT_EQ(st.total_us[0], 2'000'000u) << g->path();
    EXPECT_EQ(st.total_us[1], 0u) << g->path();
  }
  phase = 2;
  other.join();
  // Alone, the throttled worker is every task of b: FULL as well.
  {
    WorkScope work(*s.b);
    ASSERT_TRUE(charged(try_charge(*s.b, 40 * 256)));
  }
  const PsiStats st = psi_stats(*s.b);
  EXPECT_GT(st.total_us[1], 0u);
  EXPECT_EQ(st.total_us[0] - 2'000'000u, st.total_us[1]);
  uncharge(*s.b, 160 * 256);
}

TEST(PsiTasks, ScopesNestAndOverrideTheAttachment) {
  Sim s;
  ScopedAttach att(*s.sib);  // a task of sib and the root
  ASSERT_TRUE(att.ok());
  std::atomic<int> phase{0};
  std::thread other([&] {
    WorkScope outer(*s.sib);
    {
      WorkScope inner(*s.b);  // now a task of b, a and the root; no longer of sib
      phase = 1;
      while (phase != 2) std::this_thread::yield();
    }
    phase = 3;
    while (phase != 4) std::this_thread::yield();
  });
  ASSERT_TRUE(wait_for([&] { return phase == 1; }));
  s.stall(*s.sib, kSec);  // the attached thread alone in sib: FULL there
  s.stall(*s.a, kSec);    // b's worker runs: SOME in a
  EXPECT_EQ(psi_stats(*s.sib).total_us[1], 1'000'000u);
  EXPECT_EQ(psi_stats(*s.a).total_us[0], 1'000'000u);
  EXPECT_EQ(psi_stats(*s.a).total_us[1], 0u);
  phase = 2;
  ASSERT_TRUE(wait_for([&] { return phase == 3; }));
  s.stall(*s.sib, kSec);  // back in the outer scope: a second task of sib
  EXPECT_EQ(psi_stats(*s.sib).total_us[0], 2'000'000u);
  EXPECT_EQ(psi_stats(*s.sib).total_us[1], 1'000'000u);
  s.stall(*s.a, kSec);    // nobody works for a: the stalling thread is its only task
  EXPECT_EQ(psi_stats(*s.a).total_us[1], 1'000'000u);
  phase = 4;
  other.join();
}

TEST(PsiTasks, AdmissionQueueItemsAreTasksOfTheirGroup) {
  // Two items of b on two workers: one stalls while the other runs: SOME only.
  Sim s;
  std::atomic<int> phase{0};
  {
    AdmissionQueue q(s.ctl, {.workers = 2});
    WorkItem runs;
    runs.run = [&](Reservation&) {
      phase = 1;
      while (phase != 2) std::this_thread::yield();
    };
    WorkItem stalls;
    stalls.run = [&](Reservation&) {
      s.stall(*s.b, kSec);
      phase = 2;
    };
    ASSERT_EQ(q.submit(*s.b, std::move(runs)), SubmitStatus::kOk);
    ASSERT_TRUE(wait_for([&] { return phase == 1; }));
    ASSERT_EQ(q.submit(*s.b, std::move(stalls)), SubmitStatus::kOk);
    ASSERT_TRUE(wait_for([&] { return phase == 2; }));
  }
  const PsiStats st = psi_stats(*s.b);
  EXPECT_EQ(st.total_us[0], 1'000'000u);
  EXPECT_EQ(st.total_us[1], 0u);
}

// ---- stall sections of the charge path --------------------------------------------------------

TEST(PsiCharge, FailingChargeStallsInReclaimAndOom) {
  Sim s;
  s.ctl.set_reclaim_hook([&](Group&, int64_t) {
    s.clock.advance(10 * kMs);
    return int64_t{0};
  });
  s.ctl.set_oom_hook([&](Group&, int64_t) {
    s.clock.advance(5 * kMs);
    return false;
  });
  s.b->set_max(0);
  EXPECT_EQ(try_charge(*s.b, 1), ChargeStatus::kNoMem);
  // 18 reclaim passes (first, after the drain, 16 retries) and one OOM attempt.
  EXPECT_EQ(psi_stats(*s.b).total_us[0], 18 * 10'000u + 5'000u);
  EXPECT_EQ(psi_stats(s.ctl.root()).total_us[0], 185'000u);
  EXPECT_EQ(psi_stats(*s.sib).total_us[0], 0u);
}

TEST(PsiCharge, StockHitsDoNotStall) {
  Sim s;
  ASSERT_EQ(try_charge(*s.b, 1), ChargeStatus::kOk);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(try_charge(*s.b, 1), ChargeStatus::kOk);
    uncharge(*s.b, 1);
    s.clock.advance(kMs);
  }
  EXPECT_EQ(psi_stats(*s.b).total_us[0], 0u);
}

TEST(PsiCharge, HighThrottlingSleepIsAStall) {
  Sim s;
  s.b->set_high(uint64_t{100} << 20);
  // 120 MiB charged at once over a 100 MiB high: nothing to reclaim, a 2 s penalty.
  ASSERT_TRUE(charged(try_charge(*s.b, 120 * 256)));
  EXPECT_EQ(s.clock.total_slept_ns(), 2 * kSec);
  EXPECT_EQ(psi_stats(*s.b).total_us[0], 2'000'000u);
}

// ---- triggers -----------------------------------------------------------------------------------

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

uint64_t drain(int fd) {
  uint64_t v = 0;
  if (read(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return 0;
  return v;
}

TEST(PsiTrigger, OncePerWindowAndPendingCarriesOver) {
  Sim s;
  std::unique_ptr<File> f;
  ASSERT_EQ(open_file(*s.b, "memory.pressure", &f), 0);
  ASSERT_EQ(f->write("some 150000 1000000"), 0);
  const int fd = pressure_file_eventfd(*f);
  ASSERT_GE(fd, 0);
  s.clock.advance(5 * kSec);
  s.stall(*s.b, 100 * kMs);  // below the threshold
  EXPECT_FALSE(readable(fd));
  s.stall(*s.b, 100 * kMs);  // 200 ms in the window: one event
  ASSERT_TRUE(readable(fd));
  EXPECT_EQ(drain(fd), 1u);
  const uint64_t first = s.clock.now_ns();
  s.clock.advance(100 * kMs);
  s.stall(*s.b, 300 * kMs);  // breach again inside the rate limit: pending
  EXPECT_FALSE(readable(fd));
  s.clock.advance(first + kSec - s.clock.now_ns() - kMs);
  { MemStall st(*s.b); }  // a state change 1 ms before the limit ends: still held
  EXPECT_FALSE(readable(fd));
  s.clock.advance(2 * kMs);
  { MemStall st(*s.b); }  // past the limit: the pending event fires
  ASSERT_TRUE(readable(fd));
  EXPECT_EQ(drain(fd), 1u);
}

TEST(PsiTrigger, IdleGapStartsAFreshWindow) {
  Sim s;
  PsiTrigger t;
  int events = 0;
  ASSERT_EQ(t.arm(*s.b, "some 150000 1000000", [&] { ++events; }), 0);
  s.stall(*s.b, 120 * kMs);
  s.clock.advance(10 * kSec);
  s.stall(*s.b, 50 * kMs);  // 170 ms in total, but only 50 ms in the last second
  EXPECT_EQ(events, 0);
}

TEST(PsiTrigger, WindowGrowthInterpolatesThePreviousWindow) {
  Sim s;
  PsiTrigger t;
  int events = 0;
  ASSERT_EQ(t.arm(*s.b, "some 610000 1000000", [&] { ++events; }), 0);
  s.clock.advance(500 * kMs);
  s.stall(*s.b, 600 * kMs);  // ends at 1.1 s: the window restarts with 600 ms behind it
  EXPECT_EQ(events, 0);
  s.clock.advance(100 * kMs);
  s.stall(*s.b, 200 * kMs);  // at 1.4 s: 200 ms + 600 ms x 0.7 = 620 ms >= 610 ms
  EXPECT_EQ(events, 1);
}

TEST(PsiTrigger, FullTriggerIgnoresSomeOnlyStalls) {
  Sim s;
  PsiTrigger t;
  int events = 0;
  ASSERT_EQ(t.arm(*s.a, PsiTriggerSpec{PsiState::kFull, 100'000, 1'000'000}, [&] { ++events; }), 0);
  std::atomic<int> phase{0};
  std::thread other([&] {
    ScopedAttach att(*s.sib);  // not below a: does not keep a from FULL
    ScopedAttach att2(*s.a);   // now below a: a is only SOME while the main thread stalls
    phase = 1;
    while (phase != 2) std::this_thread::yield();
  });
  while (phase != 1) std::this_thread::yield();
  s.stall(*s.b, 500 * kMs);
  EXPECT_EQ(events, 0);
  EXPECT_EQ(psi_stats(*s.a).total_us[0], 500'000u);
  phase = 2;
  other.join();
  s.stall(*s.b, 200 * kMs);
  EXPECT_EQ(events, 1);
}

TEST(PsiTrigger, UnprivilegedTriggersRunOnTheGrid) {
  Sim s;
  PsiTrigger t;
  int events = 0;
  EXPECT_EQ(t.arm(
                *s.b, "some 100000 1000000", [&] { ++events; }, -1, false),
            EINVAL);
  EXPECT_FALSE(t);
  ASSERT_EQ(t.arm(
                *s.b, "some 500000 2000000", [&] { ++events; }, -1, false),
            0);
  s.stall(*s.b, 800 * kMs);
  EXPECT_EQ(events, 0);  // not evaluated before the grid point at 2 s
  s.clock.advance(1300 * kMs);
  (void)psi_stats(*s.b);
  EXPECT_EQ(events, 1);
}

TEST(PsiTrigger, BadTriggersRegisterNothing) {
  Sim s;
  std::unique_ptr<File> f;
  ASSERT_EQ(open_file(*s.b, "memory.pressure", &f), 0);
  for (const char* bad :
       {"some 0 1000000", "some 2000000 1000000", "full 1 20000000", "none 1 2", "", "some 1"}) {
    EXPECT_EQ(f->write(bad), EINVAL) << bad;
    EXPECT_EQ(pressure_file_eventfd(*f), -1);
  }
  ASSERT_EQ(f->write("full 1 1"), 0);
  EXPECT_EQ(f->write("some 100000 1000000"), EBUSY);
  EXPECT_EQ(f->write("junk"), EBUSY);  // the one-trigger rule comes first
  PsiTrigger t;
  EXPECT_EQ(t.arm(*s.b, "some 1 2", nullptr), EINVAL);  // nowhere to deliver
  ASSERT_EQ(t.arm(*s.b, "some 1 2", [] {}), 0);
  EXPECT_EQ(t.arm(*s.b, "some 1 2", [] {}), EBUSY);
}

TEST(PsiTrigger, EventfdSeenThroughPollFromAnotherThread) {
  Sim s;
  std::unique_ptr<File> f;
  ASSERT_EQ(open_file(s.ctl.root(), "memory.pressure", &f), 0);
  ASSERT_EQ(f->write("some 150000 1000000"), 0);
  const int fd = pressure_file_eventfd(*f);
  std::atomic<bool> ready{false};
  uint64_t value = 0;
  std::thread waiter([&] {
    ready = true;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) == 1) value = drain(fd);
  });
  while (!ready) std::this_thread::yield();
  s.stall(*s.b, 200 * kMs);  // a descendant's stall reaches the root's trigger
  waiter.join();
  EXPECT_EQ(value, 1u);
}

TEST(PsiTrigger, CallbackMayRemoveItself) {
  Sim s;
  PsiTrigger t;
  int events = 0;
  ASSERT_EQ(t.arm(*s.b, "some 1000 1000000",
                  [&] {
                    ++events;
                    t.reset();
                  }),
            0);
  s.stall(*s.b, 10 * kMs);
  EXPECT_EQ(events, 1);
  EXPECT_FALSE(t);
  s.clock.advance(2 * kSec);
  s.stall(*s.b, 10 * kMs);
  EXPECT_EQ(events, 1);
}

TEST(PsiRace, TriggersComeAndGoWhileThreadsStall) {
  SystemClock& clock = SystemClock::instance();
  Options o;
  o.nr_shards = 1;
  o.clock = &clock;
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> events{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k)
    threads.emplace_back([&] {
      ScopedAttach att(*g);
      while (!stop) {
        MemStall st(*g);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  threads.emplace_back([&] {
    while (!stop) {
      PsiTrigger t;
      EXPECT_EQ(t.arm(*g, "some 1 1000", [&] { events.fetch_add(1); }), 0);
      std::string text;
      EXPECT_EQ(read_file(*g, "memory.pressure", &text), 0);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_GT(psi_stats(*g).total_us[0], 0u);
}

}  // namespace
}  // namespace memcg
