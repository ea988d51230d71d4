// Admission by learned peak (memcg/core/admission.hpp): the model (learning, decay, bounds, no
// history, a fixed factor, the file) and what a waiting admission holds with it.
#include "memcg/core/admission.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "memcg/core/charge_wait.hpp"
#include "memcg/core/controller.hpp"
#include "memcg/core/reservation.hpp"
#include "memcg/files/files.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kUnit = 4096;

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  o.batch = 1;
  return o;
}

// `n` reservations admitted with `admitted` units that grew to `peak` units, then finished.
void finish(Group& g, int n, uint64_t admitted, uint64_t peak) {
  for (int i = 0; i < n; ++i) {
    Reservation r(g);
    ASSERT_EQ(r.reserve(admitted * kUnit), ReserveStatus::kOk);
    if (peak > admitted) {
      ASSERT_EQ(r.grow((peak - admitted) * kUnit), ReserveStatus::kOk);
    }
  }
}

struct Pool {
  Controller ctl{one_shard()};
  GroupRef g;
  Pool() {
    EXPECT_EQ(ctl.create("pool", &g), 0);
    g->set_max(1000 * kUnit);
  }
};

TEST(Admission, NoHistoryAdmitsAsAsked) {
  Pool p;
  EXPECT_EQ(admit_growth_permille(*p.g), 1000u);
  finish(*p.g, 7, 10, 20);  // 7 samples: not yet enough
  EXPECT_EQ(admit_growth_permille(*p.g), 1000u);
  Reservation r(*p.g);
  ASSERT_EQ(r.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);
  EXPECT_EQ(r.units(), 10);
}

TEST(Admission, LearnsTheNinetiethPercentileOfPeakOverAdmitted) {
  Pool p;
  finish(*p.g, 18, 10, 10);  // 90 % stay within their admission
  finish(*p.g, 2, 10, 15);   // 10 % grow by half
  // The 90th percentile of the weights is at 1.0, or just past it where the decay favours the
  // recent ones: in any case far below the runaways' 1.5.
  EXPECT_LE(admit_growth_permille(*p.g), 1500u);
  finish(*p.g, 20, 10, 15);  // now most grow by half
  EXPECT_EQ(admit_growth_permille(*p.g), 1500u);
  std::string text;
  ASSERT_EQ(read_file(*p.g, "memory.admit.growth", &text), 0);
  EXPECT_EQ(text, "auto 1.5\n");
}

TEST(Admission, OldBehaviourDecaysAway) {
  Pool p;
  finish(*p.g, 20, 10, 20);
  EXPECT_EQ(admit_growth_permille(*p.g), 2000u);
  finish(*p.g, 80, 10, 10);  // the work changed: it no longer grows
  EXPECT_EQ(admit_growth_permille(*p.g), 1000u);
}

TEST(Admission, TheFactorIsBoundedAtFour) {
  Pool p;
  finish(*p.g, 20, 1, 100);  // 100x growth
  EXPECT_EQ(admit_growth_permille(*p.g), 4000u);
}

TEST(Admission, AWaitingAdmissionHoldsTheExpectedPeakAndGrowthUsesIt) {
  Pool p;
  finish(*p.g, 20, 10, 20);
  ASSERT_EQ(admit_growth_permille(*p.g), 2000u);
  Reservation r(*p.g);
  ASSERT_EQ(r.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);
  EXPECT_EQ(r.units(), 20);
  EXPECT_EQ(r.bytes(), 10 * kUnit);
  EXPECT_EQ(r.admitted_units(), 20);
  const int64_t before = p.g->memory().usage();
  ASSERT_EQ(r.grow(8 * kUnit), ReserveStatus::kOk);  // within the held peak: no charge
  EXPECT_EQ(p.g->memory().usage(), before);
  EXPECT_EQ(r.units(), 20);
  ASSERT_EQ(r.grow(4 * kUnit), ReserveStatus::kOk);  // past it: charged
  EXPECT_EQ(r.units(), 22);
  r.shrink(12 * kUnit);  // a shrink gives back the rest of the headroom too
  EXPECT_EQ(r.units(), 10);
  // A non-waiting reserve holds just its total.
  Reservation plain(*p.g);
  ASSERT_EQ(plain.reserve(10 * kUnit), ReserveStatus::kOk);
  EXPECT_EQ(plain.units(), 10);
}

// With growth expected, a second query is admitted only when its expected peak fits beside the
// first one's: it waits until the first finishes, instead of both overflowing the pool later.
TEST(Admission, ASecondQueryWaitsForRoomForItsExpectedPeak) {
  Pool p;
  p.g->set_max(40 * kUnit);
  finish(*p.g, 20, 10, 20);
  Reservation a(*p.g), b(*p.g);
  ASSERT_EQ(a.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);  // holds 20
  ASSERT_EQ(b.reserve_for(15 * kUnit, 0s), ReserveStatus::kTimedOut);  // 30 does not fit
  EXPECT_EQ(b.units(), 0);
  a.release();
  ASSERT_EQ(b.reserve_for(15 * kUnit, 1s), ReserveStatus::kOk);
  EXPECT_EQ(b.units(), 30);
  // The expected peak is capped at the smallest limit of the path: a large request can still be
  // admitted alone.
  b.release();
  Reservation c(*p.g);
  ASSERT_EQ(c.reserve_for(30 * kUnit, 1s), ReserveStatus::kOk);
  EXPECT_EQ(c.units(), 40);
}

TEST(Admission, AFixedFactorReplacesTheLearnedOneAndTheFileRefusesBadValues) {
  Pool p;
  EXPECT_EQ(write_file(*p.g, "memory.admit.growth", "1.25\n"), 0);
  EXPECT_EQ(admit_growth_permille(*p.g), 1250u);
  std::string text;
  ASSERT_EQ(read_file(*p.g, "memory.admit.growth", &text), 0);
  EXPECT_EQ(text, "1.25\n");
  for (const char* bad : {"", "0.5", "4.5", "1.2345", "x", "1.", "auto1", "-1", "1e3"})
    EXPECT_EQ(write_file(*p.g, "memory.admit.growth", bad), EINVAL) << bad;
  EXPECT_EQ(admit_growth_permille(*p.g), 1250u);  // a refused write changes nothing
  Reservation r(*p.g);
  ASSERT_EQ(r.reserve_for(8 * kUnit, 1s), ReserveStatus::kOk);
  EXPECT_EQ(r.units(), 10);
  r.release();
  EXPECT_EQ(write_file(*p.g, "memory.admit.growth", "auto"), 0);
  EXPECT_EQ(admit_growth_permille(*p.g), 1000u);  // the learned one (no history yet)
  ASSERT_EQ(read_file(*p.g, "memory.wait", &text), 0);
  EXPECT_NE(text.find("admit_growth_permille 1000\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace memcg
