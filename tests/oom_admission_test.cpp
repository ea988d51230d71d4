// Admitted work that grows (oom.hpp "Victim choice, admission-aware"; reservation.hpp): what a
// reservation counts as admitted, the OOM killer's order by excess past it (and the kernel's
// order kept by memory.oom.order), and requests that can never fit refused at once.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/files/files.hpp"

namespace memcg {
namespace {

constexpr uint64_t kUnit = 4096;

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  o.batch = 1;  // no stock: the counters show every unit
  return o;
}

// A query: a member whose kill callback records the kill and gives back what it holds.
struct Query {
  Query(Group& g, const char* name, std::vector<std::string>* log)
      : member(g, name, [log](Member& m) {
          log->push_back(m.name());
          m.uncharge(m.charged());
        }),
        mem(member) {}
  Member member;
  Reservation mem;
};

TEST(Admitted, ReserveCallsAdmitGrowAddsPastShrinksLowerIt) {
  Controller ctl(one_shard());
  GroupRef pool;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  pool->set_max(100 * kUnit);
  Member m(*pool, "q", nullptr);
  {
    Reservation a(m), b(m);
    ASSERT_EQ(a.reserve_for(10 * kUnit, std::chrono::seconds(1)), ReserveStatus::kOk);
    EXPECT_EQ(a.admitted_units(), 10);
    ASSERT_EQ(a.grow(5 * kUnit), ReserveStatus::kOk);  // growth: past the admitted size
    EXPECT_EQ(a.admitted_units(), 10);
    EXPECT_EQ(m.charged(), 15);
    ASSERT_EQ(b.reserve(4 * kUnit), ReserveStatus::kOk);  // a second piece of work
    EXPECT_EQ(m.admitted(), 14);
    ASSERT_EQ(a.grow_for(kUnit, std::chrono::seconds(1)), ReserveStatus::kOk);
    EXPECT_EQ(a.admitted_units(), 10);  // waiting growth is still growth
    a.shrink(9 * kUnit);                // 16 -> 7 units: below what was admitted
    EXPECT_EQ(a.admitted_units(), 7);
    EXPECT_EQ(m.admitted(), 11);
    ASSERT_EQ(a.reserve(12 * kUnit), ReserveStatus::kOk);  // a new stated total admits again
    EXPECT_EQ(a.admitted_units(), 12);
    Reservation moved(std::move(a));  // the member's sum moves with it, unchanged
    EXPECT_EQ(m.admitted(), 16);
    moved.release();
    EXPECT_EQ(m.admitted(), 4);
  }
  EXPECT_EQ(m.admitted(), 0);
  EXPECT_EQ(m.charged(), 0);
}

// The kernel's order kills the largest member, a well-behaved query within its estimate; the
// admission-aware order kills the one that grew past its own.
struct Service {
  Controller ctl{one_shard()};
  GroupRef pool;
  std::vector<std::string> killed;
  std::unique_ptr<Query> big, runaway;
  std::unique_ptr<Member> cache;
  explicit Service(const char* order) {
    EXPECT_EQ(ctl.create("pool", &pool), 0);
    pool->set_max(40 * kUnit);
    if (order != nullptr) {
      EXPECT_EQ(write_file(*pool, "memory.oom.order", order), 0);
    }
    big = std::make_unique<Query>(*pool, "big", &killed);
    runaway = std::make_unique<Query>(*pool, "runaway", &killed);
    EXPECT_EQ(big->mem.reserve_for(16 * kUnit, std::chrono::seconds(1)), ReserveStatus::kOk);
    EXPECT_EQ(runaway->mem.reserve_for(4 * kUnit, std::chrono::seconds(1)), ReserveStatus::kOk);
    EXPECT_EQ(runaway->mem.grow(8 * kUnit), ReserveStatus::kOk);  // 12 units, 8 past admission
    // Memory that is not a query (no reservation): never counted as excess.
    cache = std::make_unique<Member>(*pool, "cache", [this](Member& m) {
      killed.push_back(m.name());
      m.uncharge(m.charged());
    });
    EXPECT_EQ(cache->charge(12), ChargeStatus::kOk);  // the pool is full: 16 + 12 + 12
  }
  // A small charge that finds no room: the OOM killer chooses.
  void oom() {
    Member newcomer(*pool, "newcomer", nullptr);
    EXPECT_EQ(newcomer.charge(2), ChargeStatus::kOk);
    newcomer.uncharge(2);
  }
};

TEST(OomOrder, ByDefaultGrowthPastAdmissionIsKilledFirst) {
  Service s(nullptr);
  s.oom();
  ASSERT_EQ(s.killed, std::vector<std::string>{"runaway"});
  const OomReport r = OomKiller::last_report(s.ctl);
  EXPECT_EQ(r.order, OomOrder::kExcess);
  EXPECT_EQ(r.victim, "runaway");
  ASSERT_FALSE(r.top.empty());
  EXPECT_EQ(r.top[0].member, "runaway");
  EXPECT_EQ(r.top[0].admitted, 4);
  EXPECT_NE(r.format().find("order excess"), std::string::npos) << r.format();
}

TEST(OomOrder, TheKernelOrderStaysAvailablePerGroup) {
  Service s("kernel");
  s.oom();
  // The kernel's badness: the largest charge (big, 16 units).
  ASSERT_EQ(s.killed, std::vector<std::string>{"big"});
  EXPECT_EQ(OomKiller::last_report(s.ctl).order, OomOrder::kKernel);
}

TEST(OomOrder, WithinAdmissionTheLowerWaitClassGoesFirst) {
  Controller ctl(one_shard());
  GroupRef pool, lo, hi;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  ASSERT_EQ(ctl.create("pool/lo", &lo), 0);
  ASSERT_EQ(ctl.create("pool/hi", &hi), 0);
  ASSERT_EQ(set_wait_priority(*lo, WaitPriority::kLow), 0);
  pool->set_max(20 * kUnit);
  std::vector<std::string> killed;
  Query small(*lo, "small-batch", &killed), large(*hi, "large-interactive", &killed);
  ASSERT_EQ(small.mem.reserve(6 * kUnit), ReserveStatus::kOk);
  ASSERT_EQ(large.mem.reserve(14 * kUnit), ReserveStatus::kOk);
  Member newcomer(*pool, "newcomer", nullptr);
  EXPECT_EQ(newcomer.charge(2), ChargeStatus::kOk);
  newcomer.uncharge(2);
  EXPECT_EQ(killed, std::vector<std::string>{"small-batch"});
}

TEST(OomOrder, WithoutAdmittedWorkAutoIsTheKernelOrder) {
  Controller ctl(one_shard());
  GroupRef pool;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  pool->set_max(10 * kUnit);
  std::vector<std::string> killed;
  auto kill = [&](Member& m) {
    killed.push_back(m.name());
    m.uncharge(m.charged());
  };
  Member a(*pool, "a", kill), b(*pool, "b", kill);
  ASSERT_EQ(a.charge(6), ChargeStatus::kOk);
  ASSERT_EQ(b.charge(4), ChargeStatus::kOk);
  Member newcomer(*pool, "newcomer", nullptr);
  EXPECT_EQ(newcomer.charge(1), ChargeStatus::kOk);
  newcomer.uncharge(1);
  EXPECT_EQ(killed, std::vector<std::string>{"a"});
  EXPECT_EQ(OomKiller::last_report(ctl).order, OomOrder::kKernel);
}

TEST(OomOrder, TheFileReadsWritesAndRefusesBadValues) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::string text;
  ASSERT_EQ(read_file(*g, "memory.oom.order", &text), 0);
  EXPECT_EQ(text, "auto\n");
  EXPECT_EQ(write_file(*g, "memory.oom.order", "excess\n"), 0);
  EXPECT_EQ(oom_order(*g), OomOrder::kExcess);
  EXPECT_EQ(write_file(*g, "memory.oom.order", "largest"), EINVAL);
  EXPECT_EQ(write_file(*g, "memory.oom.order", ""), EINVAL);
  EXPECT_EQ(oom_order(*g), OomOrder::kExcess);  // a refused write changes nothing
  ASSERT_EQ(read_file(*g, "memory.oom.order", &text), 0);
  EXPECT_EQ(text, "excess\n");
  EXPECT_EQ(read_file(ctl.root(), "memory.oom.order", &text), ENOENT);  // not on the root
}

// A request over the smallest memory.max on its path: refused at once at every reservation
// entry point, naming that group; nothing charged, no reclaim or OOM kill.
TEST(NeverFits, EveryReservationEntryPointRefusesAtOnce) {
  Controller ctl(one_shard());
  GroupRef tenant, q;
  ASSERT_EQ(ctl.create("tenant", &tenant), 0);
  ASSERT_EQ(ctl.create("tenant/q", &q), 0);
  tenant->set_max(32 * kUnit);
  std::vector<std::string> killed;
  Query other(*q, "other", &killed);
  ASSERT_EQ(other.mem.reserve(8 * kUnit), ReserveStatus::kOk);
  Member m(*q, "big", nullptr);
  Reservation r(m, {.oom = OomPolicy::kPieces});
  EXPECT_EQ(r.reserve_for(40 * kUnit, std::chrono::seconds(10)), ReserveStatus::kNeverFits);
  EXPECT_EQ(r.limiting_group(), tenant.get());
  EXPECT_EQ(r.reserve_until(40 * kUnit, ctl.clock().now_ns() + 1'000'000'000),
            ReserveStatus::kNeverFits);
  EXPECT_EQ(r.reserve(33 * kUnit), ReserveStatus::kNeverFits);
  ASSERT_EQ(r.reserve(20 * kUnit), ReserveStatus::kOk);
  EXPECT_EQ(r.limiting_group(), nullptr);
  // grow(): the growth alone is the request (a total past the limit goes to the OOM killer);
  // grow_for() never kills: its total is the request.
  EXPECT_EQ(r.grow(33 * kUnit), ReserveStatus::kNeverFits);
  EXPECT_EQ(r.grow_for(13 * kUnit, std::chrono::seconds(10)), ReserveStatus::kNeverFits);
  EXPECT_EQ(r.units(), 20);
  EXPECT_EQ(m.charged(), 20);
  EXPECT_TRUE(killed.empty());
  EXPECT_EQ(tenant->events().get(Event::kOom), 0u);
  EXPECT_EQ(wait_stats(*tenant).never_fits, 5u);
  EXPECT_STREQ(reserve_status_name(ReserveStatus::kNeverFits), "never-fits");
  // A member's waiting charge too.
  EXPECT_EQ(m.charge_wait(40, std::chrono::seconds(10)), WaitStatus::kNeverFits);
  EXPECT_EQ(wait_stats(*tenant).never_fits, 6u);
}

}  // namespace
}  // namespace memcg
