// The admission queue completes items that will never run without a free worker
// (admission_queue.hpp): a stop token fired, a deadline passed, while every worker is in a run;
// such items stop counting as queued at once. The stop callbacks are counted exactly, and an
// expired item is not held up by another item's try. On the SystemClock: the deadlines are real
// time, and "at once" is measured against a run that takes 1.5 s.
#include "memcg/core/admission/admission_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stop_token>
#include <thread>

#include "admission_queue_support.hpp"
#include "charge_wait_support.hpp"
#include "memcg/core/admission/internal/admission_queue_state.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/tree/controller.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using testing_queue::Outcome;
using testing_wait::eventually;
using testing_wait::kUnit;
using Clk = std::chrono::steady_clock;
using Shape = internal::AdmissionQueueAccess;

// A run that holds its worker for `busy` (or until release()).
struct Busy {
  std::atomic<bool> running{false}, go{false}, ended{false};
  WorkItem item(std::chrono::milliseconds busy) {
    WorkItem w;
    w.run = [this, busy](Reservation&) {
      running = true;
      const auto end = Clk::now() + busy;
      while (!go.load() && Clk::now() < end) std::this_thread::sleep_for(200us);
      ended = true;
    };
    return w;
  }
  void release() { go = true; }
};

uint64_t now_ns(Controller& ctl) { return ctl.clock().now_ns(); }

TEST(AdmissionQueueStop, StoppedAndExpiredItemsCompleteWhileEveryWorkerRuns) {
  testing::Watchdog dog("stop while busy");
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  AdmissionQueueOptions o;
  o.workers = 1;
  o.max_queued = 2;
  AdmissionQueue q(ctl, o);
  Busy busy;
  ASSERT_EQ(q.submit(*g, busy.item(1500ms)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return busy.running.load(); }));
  const auto start = Clk::now();
  Outcome stopped, expired;
  std::stop_source src;
  WorkItem a = stopped.item();
  a.stop = src.get_token();
  ASSERT_EQ(q.submit(*g, std::move(a)), SubmitStatus::kOk);
  WorkItem b = expired.item();
  b.deadline_ns = now_ns(ctl) + 20'000'000;
  ASSERT_EQ(q.submit(*g, std::move(b)), SubmitStatus::kOk);
  Outcome refused;
  EXPECT_EQ(q.submit(*g, refused.item()), SubmitStatus::kFull);  // 2 queued
  src.request_stop();
  // Both are done long before the running item ends, and no longer count as queued.
  while ((stopped.status.load() == -1 || expired.status.load() == -1) &&
         Clk::now() - start < 1200ms)
    std::this_thread::sleep_for(1ms);
  const auto took = Clk::now() - start;
  EXPECT_TRUE(stopped.is(ReserveStatus::kCancelled));
  EXPECT_TRUE(expired.is(ReserveStatus::kTimedOut));
  EXPECT_LT(took, 1000ms);
  EXPECT_FALSE(busy.ended.load());
  EXPECT_NE(stopped.thread, std::this_thread::get_id());  // not on the requesting thread
  EXPECT_EQ(q.queued(), 0u);
  Outcome later1, later2;
  EXPECT_EQ(q.submit(*g, later1.item()), SubmitStatus::kOk);  // dead items are not counted
  EXPECT_EQ(q.submit(*g, later2.item()), SubmitStatus::kOk);
  busy.release();
  ASSERT_TRUE(eventually([&] { return later1.ran.load() == 1 && later2.ran.load() == 1; }));
  EXPECT_EQ(stopped.ran.load() + expired.ran.load(), 0);
  EXPECT_EQ(admit_queue_stats(*g).cancelled, 1u);
  EXPECT_EQ(admit_queue_stats(*g).timed_out, 1u);
}

// A stop requested before the item was queued (the token given already stopped) is seen too.
TEST(AdmissionQueueStop, AnAlreadyStoppedTokenIsCompletedAtOnce) {
  testing::Watchdog dog("stopped before");
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  AdmissionQueueOptions o;
  o.workers = 1;
  AdmissionQueue q(ctl, o);
  Busy busy;
  ASSERT_EQ(q.submit(*g, busy.item(5000ms)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return busy.running.load(); }));
  std::stop_source src;
  src.request_stop();
  Outcome out;
  WorkItem w = out.item();
  w.stop = src.get_token();
  ASSERT_EQ(q.submit(*g, std::move(w)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return out.status.load() != -1; }));
  EXPECT_TRUE(out.is(ReserveStatus::kCancelled));
  EXPECT_FALSE(busy.ended.load());
  busy.release();
}

// The count of stop callbacks follows the queued items: it returns to 0 when they leave, also
// when the token's last stop_source was destroyed without a stop.
TEST(AdmissionQueueStop, StopCallbacksAreCountedExactly) {
  testing::Watchdog dog("stop count");
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  AdmissionQueueOptions o;
  o.workers = 1;
  AdmissionQueue q(ctl, o);
  Busy busy;
  ASSERT_EQ(q.submit(*g, busy.item(5000ms)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return busy.running.load(); }));
  Outcome kept, gone, stopped, plain;
  std::stop_source stays;
  std::optional<std::stop_source> dies{std::in_place};
  WorkItem a = kept.item();
  a.stop = stays.get_token();
  ASSERT_EQ(q.submit(*g, std::move(a)), SubmitStatus::kOk);
  WorkItem b = gone.item();
  b.stop = dies->get_token();
  ASSERT_EQ(q.submit(*g, std::move(b)), SubmitStatus::kOk);
  std::stop_source fires;
  WorkItem c = stopped.item();
  c.stop = fires.get_token();
  ASSERT_EQ(q.submit(*g, std::move(c)), SubmitStatus::kOk);
  ASSERT_EQ(q.submit(*g, plain.item()), SubmitStatus::kOk);  // no token: nothing registered
  EXPECT_EQ(Shape::shape(q).stop_callbacks, 3u);
  dies.reset();  // b's token can never be stopped now
  fires.request_stop();
  ASSERT_TRUE(eventually([&] { return stopped.status.load() != -1; }));
  // Unregistered when the item is destroyed, right after its done returned.
  EXPECT_TRUE(eventually([&] { return Shape::shape(q).stop_callbacks == 2; }));
  busy.release();
  ASSERT_TRUE(eventually([&] { return kept.ran.load() + gone.ran.load() + plain.ran.load() == 3; }));
  ASSERT_TRUE(eventually([&] { return q.running() == 0; }));
  EXPECT_EQ(Shape::shape(q).stop_callbacks, 0u);
  EXPECT_EQ(q.queued(), 0u);
}

// A cache whose reclaim blocks until released: a try that reclaims it holds its worker.
class SlowCache final : public Reclaimer {
 public:
  explicit SlowCache(Group& g) : g_(g) {}
  ~SlowCache() override {
    reg_.reset();
    uncharge_direct(g_, held_.exchange(0));
  }
  void fill(int64_t units) {
    ASSERT_EQ(try_charge(g_, units, kMayBlock | kNoSpin), ChargeStatus::kOk);
    held_ += units;
    reg_ = ReclaimerRegistration(g_, *this);
  }
  int64_t reclaimable() const noexcept override { return held_.load(); }
  ReclaimResult reclaim(int64_t, int) override {
    entered = true;
    const auto end = Clk::now() + 3s;
    while (!go.load() && Clk::now() < end) std::this_thread::sleep_for(200us);
    return {0, 0};  // frees nothing
  }
  std::atomic<bool> entered{false}, go{false};

 private:
  Group& g_;
  std::atomic<int64_t> held_{0};
  ReclaimerRegistration reg_;
};

// The deadline sweep passes over an item being tried: an item whose deadline passed later is
// completed while the first one's try goes on.
TEST(AdmissionQueueStop, AnExpiredItemIsNotHeldUpByAnotherItemsTry) {
  testing::Watchdog dog("sweep past a try");
  Controller ctl;
  GroupRef slow, full;
  ASSERT_EQ(ctl.create("slow", &slow), 0);
  ASSERT_EQ(ctl.create("full", &full), 0);
  slow->set_max(100 * kUnit);
  full->set_max(10 * kUnit);
  SlowCache cache(*slow);
  cache.fill(100);
  Reservation hog(*full);
  ASSERT_EQ(hog.reserve(10 * kUnit), ReserveStatus::kOk);
  AdmissionQueueOptions o;
  o.workers = 2;
  AdmissionQueue q(ctl, o);
  Outcome tried, later;
  WorkItem a = tried.item(10 * kUnit);
  a.deadline_ns = now_ns(ctl) + 50'000'000;
  ASSERT_EQ(q.submit(*slow, std::move(a)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return cache.entered.load(); }));  // its try is in the reclaim
  const auto start = Clk::now();
  // b waits behind a head of its group that does not fit (tried at every poll by the other
  // worker): b itself is never tried, only the deadline sweep can complete it.
  Outcome head;
  WorkItem h = head.item(5 * kUnit);
  h.priority = 1;
  ASSERT_EQ(q.submit(*full, std::move(h)), SubmitStatus::kOk);
  WorkItem b = later.item(5 * kUnit);
  b.deadline_ns = now_ns(ctl) + 100'000'000;  // after a's: behind it in deadline order
  ASSERT_EQ(q.submit(*full, std::move(b)), SubmitStatus::kOk);
  while (later.status.load() == -1 && Clk::now() - start < 2s) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(later.is(ReserveStatus::kTimedOut));
  EXPECT_LT(Clk::now() - start, 1500ms);
  EXPECT_EQ(tried.status.load(), -1);  // still in its try
  EXPECT_EQ(head.status.load(), -1);  // still queued
  cache.go = true;
  ASSERT_TRUE(eventually([&] { return tried.status.load() != -1; }));
  EXPECT_TRUE(tried.is(ReserveStatus::kTimedOut));
  hog.release();
  ASSERT_TRUE(eventually([&] { return head.ran.load() == 1; }));
}

}  // namespace
}  // namespace memcg
