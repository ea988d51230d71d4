// MirroredCharge: a charge that follows a size reported by another library.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "memcg/memcg.hpp"
#include "memcg/core/charge/mirror.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

GroupRef make(Controller& ctl, const char* path) {
  GroupRef g;
  EXPECT_EQ(ctl.create(path, &g), 0);
  return g;
}

TEST(MirroredCharge, SetChargesAndUnchargesTheDifference) {
  Controller ctl;
  GroupRef g = make(ctl, "/t");
  {
    MirroredCharge m(*g);
    EXPECT_EQ(m.set(10'000), 0);
    EXPECT_EQ(g->current(), 12'288u);  // 3 units of 4 KiB, rounded up
    EXPECT_EQ(m.charged_bytes(), 12'288u);
    EXPECT_EQ(m.set(100'000), 0);
    EXPECT_EQ(g->current(), 102'400u);
    EXPECT_EQ(m.set(4'096), 0);
    EXPECT_EQ(g->current(), 4'096u);
    EXPECT_EQ(m.reported(), 4'096u);
    EXPECT_EQ(m.set(50'000), 0);
  }
  EXPECT_EQ(g->current(), 0u);  // the destructor uncharged the rest
}

TEST(MirroredCharge, BadInputChangesNothing) {
  Controller ctl;
  GroupRef g = make(ctl, "/t");
  MirroredCharge m(*g);
  ASSERT_EQ(m.set(8'192), 0);
  EXPECT_EQ(m.set(ObjStock::kMaxBytes + 1), EINVAL);
  EXPECT_EQ(g->current(), 8'192u);
  EXPECT_EQ(m.reported(), 8'192u);
}

// A report from inside reclaim is refused: a mirror is refreshed from a safe point.
class SetFromReclaim final : public Reclaimer {
 public:
  explicit SetFromReclaim(MirroredCharge& m) : m_(m) {}
  int64_t reclaimable() const noexcept override { return 1; }
  ReclaimResult reclaim(int64_t, int) override {
    rc_ = m_.set(0);
    return {};
  }
  MirroredCharge& m_;
  int rc_ = -1;
};

TEST(MirroredCharge, RefusedFromInsideReclaim) {
  Controller ctl;
  GroupRef g = make(ctl, "/t");
  MirroredCharge m(*g);
  ASSERT_EQ(m.set(40'960), 0);
  SetFromReclaim r(m);
  ReclaimerRegistration reg(*g, r);
  EXPECT_GT(reclaim(*g, 8, ReclaimReason::kProactive), -1);
  EXPECT_EQ(r.rc_, EBUSY);
  EXPECT_EQ(g->current(), 40'960u);
}

TEST(MirroredCharge, GrowthPastMaxIsForcedAndCounted) {
  Controller ctl;
  GroupRef g = make(ctl, "/t");
  g->set_max(64 * 1024);
  MirroredCharge m(*g);
  EXPECT_EQ(m.set(128 * 1024), 0);
  EXPECT_EQ(g->current(), 128u * 1024);
  EXPECT_EQ(m.forced(), 1u);
  EXPECT_EQ(m.forced_bytes(), 128u * 1024);
  EXPECT_EQ(g->events().get(Event::kOomKill), 0u);
  // Without kNoFail the growth is refused and the previous report stays charged.
  MirroredCharge strict(*g, kDefaultKind, kMayBlock | kRetryMayFail);
  EXPECT_EQ(strict.set(4096), ENOMEM);
  EXPECT_EQ(strict.charged_bytes(), 0u);
}

TEST(MirroredCharge, ConcurrentReportsEndAtTheLastOne) {
  testing::Watchdog dog("MirroredCharge concurrent", std::chrono::seconds(30));
  Controller ctl;
  GroupRef g = make(ctl, "/t");
  MirroredCharge m(*g);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&m, t] {
      for (int i = 0; i < 20'000; ++i)
        EXPECT_EQ(m.set(static_cast<uint64_t>((i * 7 + t) % 97) * 4096), 0);  // kNoFail
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(m.set(5 * 4096), 0);
  EXPECT_EQ(g->current(), 5u * 4096);
  EXPECT_EQ(m.charged_bytes(), 5u * 4096);
}

}  // namespace
}  // namespace memcg
