// Checked lifetimes: destroying a controller while something of it is still alive aborts, with
// a message naming what is left (Options::check_lifetimes; on by default in debug and
// sanitizer builds). Each death test sets the option, so it runs in every build.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "memcg/memcg.hpp"
#include "memcg/core/admission/reservation.hpp"

namespace memcg {
namespace {

Options checked() {
  Options o;
  o.nr_shards = 1;
  o.check_lifetimes = true;
  return o;
}

TEST(LifetimeCheckDeathTest, GroupReferenceLeftAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto ctl = std::make_unique<Controller>(checked());
        GroupRef g;
        (void)ctl->create("tenants", &g);
        GroupRef leaked;
        (void)ctl->create("tenants/a", &leaked);
        g.reset();
        ctl.reset();  // `leaked` still refers to tenants/a
      },
      "Controller destroyed while still in use.*group tenants/a: 1 reference");
}

TEST(LifetimeCheckDeathTest, MemberListenerTriggerAndReservationAreNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto ctl = std::make_unique<Controller>(checked());
        GroupRef g;
        (void)ctl->create("pool", &g);
        auto q = std::make_unique<Member>(*g, "q17", nullptr);
        PressureListener l;
        (void)l.listen(*g, "low", [](PressureLevel) {});
        PsiTrigger t;
        (void)t.arm(*g, "some 1000 1000000", [] {});
        Reservation r(*g);
        (void)r.reserve(4096);
        g.reset();
        ctl.reset();
      },
      "group pool: .*references.*1 attached thread or member, 1 member \\(q17\\), "
      "1 vmpressure listener, 1 PSI trigger");
}

TEST(LifetimeCheckDeathTest, ReclaimerRegistrationIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto ctl = std::make_unique<Controller>(checked());
        GroupRef g;
        (void)ctl->create("c", &g);
        auto cache = std::make_unique<LruCache>(*g, "blocks");
        g.reset();
        ctl.reset();
      },
      "group c: .*1 reclaimer registration");
}

// Everything destroyed first: no abort, also with a memory.high record that another thread,
// still alive, keeps (such a record may outlive its controller).
TEST(LifetimeCheck, CleanTeardownWithAPendingHighRecordOnALiveThread) {
  auto ctl = std::make_unique<Controller>(checked());
  GroupRef g;
  ASSERT_EQ(ctl->create("a", &g), 0);
  g->set_high(0);
  std::atomic<int> step{0};
  std::thread t([&] {
    EXPECT_EQ(try_charge(*g, 1, /*flags=*/0), ChargeStatus::kOk);  // cannot block: pending
    uncharge_direct(*g, 1);
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
  });
  while (step.load() != 1) std::this_thread::yield();
  EXPECT_EQ(g->thread_record_refs().load(), 1);
  {
    Member m(*g, "m", nullptr);
    Reservation r(m);
    EXPECT_EQ(r.reserve(4096), ReserveStatus::kOk);
  }
  g.reset();
  ctl.reset();  // the thread's record does not count as a leak
  step = 2;
  t.join();
}

// The environment variable MEMCG_CHECK_LIFETIMES sets the default of Options::check_lifetimes in
// any build ("0" off, anything else on; unset or empty: the build's default).
class LifetimeEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("MEMCG_CHECK_LIFETIMES")) saved_ = v;
  }
  void TearDown() override {
    if (saved_) {
      ::setenv("MEMCG_CHECK_LIFETIMES", saved_->c_str(), 1);
    } else {
      ::unsetenv("MEMCG_CHECK_LIFETIMES");
    }
  }
  std::optional<std::string> saved_;
};

TEST_F(LifetimeEnv, TheVariableSetsTheDefaultEitherWay) {
  ::unsetenv("MEMCG_CHECK_LIFETIMES");
  const bool built = lifetime_checks_default();
  ::setenv("MEMCG_CHECK_LIFETIMES", "", 1);
  EXPECT_EQ(lifetime_checks_default(), built) << "an empty value is the build's default";
  ::setenv("MEMCG_CHECK_LIFETIMES", "1", 1);
  EXPECT_TRUE(lifetime_checks_default());
  EXPECT_TRUE(Options{}.check_lifetimes);
  ::setenv("MEMCG_CHECK_LIFETIMES", "0", 1);
  EXPECT_FALSE(lifetime_checks_default());
  EXPECT_FALSE(Options{}.check_lifetimes);
  ::setenv("MEMCG_CHECK_LIFETIMES", "yes", 1);
  EXPECT_TRUE(Options{}.check_lifetimes);
}

// A controller made with default options checks its lifetime when the variable says so, whatever
// the build (a release build's default is off).
TEST_F(LifetimeEnv, TheVariableTurnsTheCheckOnForDefaultOptions) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ::setenv("MEMCG_CHECK_LIFETIMES", "1", 1);
        auto ctl = std::make_unique<Controller>(Options{});
        GroupRef leaked;
        (void)ctl->create("env", &leaked);
        ctl.reset();  // `leaked` still refers to env
      },
      "Controller destroyed while still in use.*group env: 1 reference");
}

}  // namespace
}  // namespace memcg
