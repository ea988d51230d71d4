// The process budget (budget.hpp): bad input changes nothing; a budget is reached by dropping
// caches above their protection, then by asking lower classes; it fails without `force` and
// kills by policy with it; a second budget while one is being reached is refused; an outside
// limit (memcg::host's) and the budget hold the root together, each counted once.
#include "memcg/core/admission/budget.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/core/wait/charge_wait.hpp"

namespace memcg {
namespace {

constexpr uint64_t kUnit = 4096;

// A cache of `units` units in `g` that gives back whatever reclaim asks.
class Cache final : public Reclaimer {
 public:
  Cache(Group& g, int64_t units) : g_(g), left_(units) {
    for (int64_t i = 0; i < units; ++i) EXPECT_TRUE(charged(try_charge(g, 1)));
    reg_ = ReclaimerRegistration(g, *this);
  }
  ~Cache() override {
    reg_.reset();
    uncharge_direct(g_, left_.load());
  }
  int64_t reclaimable() const noexcept override { return left_.load(); }
  ReclaimResult reclaim(int64_t n, int) override {
    const int64_t freed = std::min(n, left_.load());
    left_ -= freed;
    uncharge_direct(g_, freed);
    return {freed, freed};
  }
  int64_t left() const { return left_.load(); }

 private:
  Group& g_;
  std::atomic<int64_t> left_;
  ReclaimerRegistration reg_;  // last: unregistered first
};

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  return o;
}

template <class F>
bool wait_for(F&& f, std::chrono::seconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

BudgetState state(const ProcessBudget& b) { return b.status().state; }

TEST(Budget, BadInputChangesNothing) {
  Controller ctl(one_shard());
  ProcessBudget b(ctl);
  std::string why;
  EXPECT_EQ(b.set(0, false, &why), EINVAL);
  EXPECT_NE(why.find("0 bytes"), std::string::npos) << why;
  EXPECT_EQ(b.set(kUnit - 1), EINVAL);
  EXPECT_EQ(b.set(UINT64_MAX, false, &why), ERANGE);
  EXPECT_EQ(b.set(uint64_t{1} << 63), ERANGE);
  EXPECT_EQ(state(b), BudgetState::kNone);
  EXPECT_EQ(ctl.root().max(), kUnlimited);
  EXPECT_EQ(b.clear(), ENOENT);
}

// Caches above their protection go first; the protected tenant keeps all it holds.
TEST(Budget, ReachedByDroppingCachesAboveProtection) {
  Controller ctl(one_shard());
  GroupRef cache_g, tenant;
  ASSERT_EQ(ctl.create("cache", &cache_g), 0);
  ASSERT_EQ(ctl.create("tenant", &tenant), 0);
  tenant->set_min(100 * kUnit);
  Member t(*tenant, "t", [](Member&) { ADD_FAILURE() << "the protected tenant was acted on"; });
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(charged(t.charge(1)));
  Cache cache(*cache_g, 300);
  ctl.drain_stocks();
  std::mutex mu;
  std::vector<BudgetState> seen;
  ASSERT_EQ(ctl.events().enable(), 0);
  ProcessBudget b(ctl);
  b.set_listener([&](const BudgetStatus& s) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(s.state);
  });
  ASSERT_EQ(b.set(250 * kUnit), 0);
  EXPECT_EQ(ctl.root().max(), 250 * kUnit);  // at once
  ASSERT_TRUE(wait_for([&] { return state(b) != BudgetState::kReaching; }));
  const BudgetStatus s = b.status();
  EXPECT_EQ(s.state, BudgetState::kReached) << s.error;
  EXPECT_LE(ctl.root().current(), 250 * kUnit);
  EXPECT_EQ(tenant->current(), 100 * kUnit);
  EXPECT_LE(cache.left(), 150);
  EXPECT_GE(s.reclaimed_bytes, 50 * kUnit);
  EXPECT_GE(s.drains, 1u);
  EXPECT_EQ(s.preempted, 0u);
  EXPECT_EQ(s.killed, 0u);
  EXPECT_STREQ(s.limited_by, "budget");
  EXPECT_EQ(s.limit_bytes, 250 * kUnit);
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_GE(seen.size(), 2u);
    EXPECT_EQ(seen.front(), BudgetState::kReaching);
    EXPECT_EQ(seen.back(), BudgetState::kReached);
  }
  // The same progress on the controller's event stream.
  BusFilter budget_only;
  budget_only.types = bus_type_bit(BusEventType::kBudget);
  const std::vector<BusEvent> events = ctl.events().snapshot(budget_only);
  ASSERT_GE(events.size(), 2u);
  EXPECT_NE(events.front().payload.find("\"state\":\"reaching\""), std::string::npos)
      << events.front().payload;
  EXPECT_NE(events.back().payload.find("\"state\":\"reached\""), std::string::npos)
      << events.back().payload;
  // Removed: the root's limit is what it was.
  ASSERT_EQ(b.clear(), 0);
  EXPECT_EQ(ctl.root().max(), kUnlimited);
  EXPECT_EQ(state(b), BudgetState::kNone);
  t.uncharge(100);
}

// No cache: the low class is asked for memory back (reason "operator"), the high class never.
TEST(Budget, AsksTheLowerClassesThenReaches) {
  Controller ctl(one_shard());
  GroupRef low, high;
  ASSERT_EQ(ctl.create("low", &low), 0);
  ASSERT_EQ(ctl.create("high", &high), 0);
  ASSERT_EQ(set_wait_priority(*low, WaitPriority::kLow), 0);
  ASSERT_EQ(set_wait_priority(*high, WaitPriority::kHigh), 0);
  std::atomic<int> asked{0};
  std::atomic<bool> operator_reason{false};
  Member batch(*low, "batch", [&](Member& self) {
    asked.fetch_add(1);
    operator_reason.store(Member::cancel_reason() == CancelReason::kOperator && !self.killed());
    self.uncharge(self.charged());
  });
  Member serving(*high, "serving", [](Member&) { ADD_FAILURE() << "the high class was asked"; });
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(charged(batch.charge(1)));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(charged(serving.charge(1)));
  ProcessBudget b(ctl);
  ASSERT_EQ(b.set(150 * kUnit), 0);
  ASSERT_TRUE(wait_for([&] { return state(b) != BudgetState::kReaching; }));
  const BudgetStatus s = b.status();
  EXPECT_EQ(s.state, BudgetState::kReached) << s.error;
  EXPECT_EQ(asked.load(), 1);
  EXPECT_TRUE(operator_reason.load());
  EXPECT_EQ(s.preempted, 1u);
  EXPECT_EQ(s.killed, 0u);
  EXPECT_EQ(serving.charged(), 100);
  serving.uncharge(100);
}

// Nothing gives: without force the budget fails (nobody killed); a second budget meanwhile is
// refused; with force the OOM killer kills by policy (never an immune member).
TEST(Budget, FailsWithoutForceKillsByPolicyWithIt) {
  Controller ctl(one_shard());
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  std::atomic<int> kills{0};
  Member stubborn(*a, "stubborn", [&](Member& self) {
    if (self.killed()) {
      kills.fetch_add(1);
      self.uncharge(self.charged());
    }
  });
  Member keeper(*a, "keeper", [](Member&) { ADD_FAILURE() << "an immune member was killed"; },
                Member::kImmune);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(charged(stubborn.charge(1)));
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(charged(keeper.charge(1)));
  ProcessBudget b(ctl);
  ASSERT_EQ(b.set(100 * kUnit), 0);
  std::string why;
  EXPECT_EQ(b.set(120 * kUnit, false, &why), EBUSY);  // one at a time
  EXPECT_EQ(b.status().target_bytes, 100 * kUnit);
  ASSERT_TRUE(wait_for([&] { return state(b) != BudgetState::kReaching; }));
  BudgetStatus s = b.status();
  EXPECT_EQ(s.state, BudgetState::kFailed);
  EXPECT_NE(s.error.find("not forced"), std::string::npos) << s.error;
  EXPECT_EQ(kills.load(), 0);
  EXPECT_EQ(s.preempted, 1u);  // the normal class was asked (it ignored the request)
  EXPECT_EQ(ctl.root().max(), 100 * kUnit);  // the limit stays until cleared

  ASSERT_EQ(b.set(100 * kUnit, true), 0);  // failed: a new one may be set
  ASSERT_TRUE(wait_for([&] { return state(b) != BudgetState::kReaching; }));
  s = b.status();
  EXPECT_EQ(s.state, BudgetState::kReached) << s.error;
  EXPECT_EQ(kills.load(), 1);
  EXPECT_EQ(s.killed, 1u);
  EXPECT_EQ(keeper.charged(), 50);
  keeper.uncharge(50);
}

// memcg::host's limit and the budget: min of the two, each counted once.
TEST(Budget, OutsideLimitAndBudgetHoldTheRootTogether) {
  Controller ctl(one_shard());
  ProcessBudget b(ctl);
  BudgetOutside out;
  out.max = 1000 * kUnit;
  out.extra = 50 * kUnit;
  out.headroom = 10 * kUnit;
  b.set_outside(out);
  EXPECT_EQ(ctl.root().max(), 1000 * kUnit);  // no budget: the outside limit
  ASSERT_EQ(b.set(600 * kUnit), 0);
  // The budget in the kernel's terms: target - headroom - what the kernel counts beyond the root.
  EXPECT_EQ(ctl.root().max(), 540 * kUnit);
  ASSERT_TRUE(wait_for([&] { return state(b) == BudgetState::kReached; }));
  BudgetStatus s = b.status();
  EXPECT_TRUE(s.bound);
  EXPECT_STREQ(s.limited_by, "budget");
  EXPECT_EQ(s.limit_bytes, 540 * kUnit);
  EXPECT_EQ(s.current_bytes, ctl.root().current() + 50 * kUnit);
  // The kernel's limit drops to the target: the outside limit (derived from it by the binding:
  // 600 - 10 - 50 = 540) takes over; nothing is taken off twice.
  out.max = 540 * kUnit;
  b.set_outside(out);
  EXPECT_EQ(ctl.root().max(), 540 * kUnit);
  EXPECT_STREQ(b.status().limited_by, "host");
  out.max = 500 * kUnit;
  b.set_outside(out);
  EXPECT_EQ(ctl.root().max(), 500 * kUnit);
  // Removed: the outside limit alone.
  ASSERT_EQ(b.clear(), 0);
  EXPECT_EQ(ctl.root().max(), 500 * kUnit);
  // An increase: the outside limit rises, then a larger budget follows it.
  out.max = 2000 * kUnit;
  b.set_outside(out);
  EXPECT_EQ(ctl.root().max(), 2000 * kUnit);
  ASSERT_EQ(b.set(1500 * kUnit), 0);
  EXPECT_EQ(ctl.root().max(), 1440 * kUnit);
}

// Sets, clears and status reads from several threads: one budget at a time, never a torn state.
TEST(Budget, ConcurrentRequests) {
  Controller ctl(one_shard());
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  Cache cache(*a, 400);
  ProcessBudget b(ctl);
  std::atomic<int> ok{0}, busy{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int j = 0; j < 50; ++j) {
        const int err = b.set((300 + i) * kUnit);
        if (err == 0) {
          ++ok;
        } else if (err == EBUSY) {
          ++busy;
        } else {
          ADD_FAILURE() << err;
        }
        const BudgetStatus s = b.status();
        if (s.state != BudgetState::kNone) {
          EXPECT_GE(s.target_bytes, 300 * kUnit);
        }
        if (j % 7 == 0) static_cast<void>(b.clear());
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(ok.load() + busy.load(), 200);
}

}  // namespace
}  // namespace memcg
