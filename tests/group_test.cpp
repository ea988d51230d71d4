// Tests of the group tree: creation, lookup and removal by path, byte-denominated knobs,
// memory.events propagation, dying groups and their references, memory.peak handles.

#include "memcg/core/tree/group.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "memcg/core/tree/controller.hpp"

namespace memcg {
namespace {

constexpr uint64_t kPage = 4096;
// The largest byte value a knob can hold before it reads "max": the sentinel in 4 KiB units.
constexpr uint64_t kSentinelBytes = static_cast<uint64_t>(PageCounter::sentinel(12)) << 12;

std::vector<std::string> ChildNames(const Group& g) {
  std::vector<std::string> out;
  for (const GroupRef& c : g.children()) out.push_back(c->name());
  return out;
}

TEST(GroupTest, CreateLookupRemove) {
  Controller ctl;
  EXPECT_EQ(ctl.nr_groups(), 1u);
  EXPECT_TRUE(ctl.root().is_root());
  EXPECT_EQ(ctl.root().path(), "/");
  EXPECT_EQ(ctl.lookup("/").get(), &ctl.root());
  EXPECT_EQ(ctl.lookup("").get(), &ctl.root());

  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name(), "a");
  EXPECT_EQ(a->path(), "a");
  EXPECT_EQ(a->parent(), &ctl.root());
  EXPECT_TRUE(a->is_online());
  EXPECT_FALSE(a->is_root());
  ASSERT_EQ(ctl.create("a/b"), 0);
  ASSERT_EQ(ctl.create("/a/c/"), 0);  // leading and trailing slashes are tolerated
  ASSERT_EQ(ctl.create(*a, "a0"), 0);
  EXPECT_EQ(ctl.nr_groups(), 5u);

  GroupRef b = ctl.lookup("a/b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->path(), "a/b");
  EXPECT_EQ(b->parent(), a.get());
  EXPECT_TRUE(b->is_descendant_of(*a));
  EXPECT_TRUE(b->is_descendant_of(ctl.root()));
  EXPECT_TRUE(b->is_descendant_of(*b));
  EXPECT_FALSE(a->is_descendant_of(*b));
  EXPECT_EQ(ctl.lookup("/a/b").get(), b.get());
  EXPECT_NE(a->id(), b->id());
  EXPECT_EQ((std::vector<std::string>{"a0", "b", "c"}), ChildNames(*a));

  EXPECT_FALSE(ctl.lookup("a/x"));
  EXPECT_FALSE(ctl.lookup("x/b"));
  EXPECT_FALSE(ctl.lookup("a//b"));

  // Errors of create.
  EXPECT_EQ(ctl.create(""), EINVAL);
  EXPECT_EQ(ctl.create("/"), EINVAL);
  EXPECT_EQ(ctl.create("a//d"), EINVAL);
  EXPECT_EQ(ctl.create("a/.."), EINVAL);
  EXPECT_EQ(ctl.create("a/sp ace"), EINVAL);
  EXPECT_EQ(ctl.create(*a, "x/y"), EINVAL);
  EXPECT_EQ(ctl.create("x/y"), ENOENT);
  EXPECT_EQ(ctl.create("a/b"), EEXIST);
  EXPECT_EQ(ctl.create(*a, "b"), EEXIST);
  EXPECT_EQ(ctl.nr_groups(), 5u);

  // Errors of remove.
  EXPECT_EQ(ctl.remove("/"), EINVAL);
  EXPECT_EQ(ctl.remove(ctl.root()), EINVAL);
  EXPECT_EQ(ctl.remove("a/x"), ENOENT);
  EXPECT_EQ(ctl.remove("a"), EBUSY);  // has children
  EXPECT_TRUE(ctl.lookup("a"));

  EXPECT_EQ(ctl.remove("a/b"), 0);
  EXPECT_FALSE(ctl.lookup("a/b"));
  EXPECT_EQ(ctl.remove("a/b"), ENOENT);
  EXPECT_EQ(ctl.remove(*b), ENOENT);  // already offline
  EXPECT_EQ(ctl.nr_groups(), 4u);
  EXPECT_EQ(ctl.remove("a/c"), 0);
  EXPECT_EQ(ctl.remove(*a), EBUSY);
  EXPECT_EQ(ctl.remove("a/a0"), 0);
  EXPECT_EQ(ctl.remove(*a), 0);  // only dying children left
  EXPECT_EQ(ctl.nr_groups(), 1u);
  EXPECT_EQ(ctl.create(*a, "late"), ENOENT);  // no creation under a dying group

  // A name can be reused once the group is gone from the tree.
  GroupRef a2;
  ASSERT_EQ(ctl.create("a", &a2), 0);
  EXPECT_NE(a2.get(), a.get());
  EXPECT_EQ(ctl.lookup("a").get(), a2.get());
}

TEST(GroupTest, KnobsInBytesFloorAndClamp) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  EXPECT_EQ(g->max(), kUnlimited);
  EXPECT_EQ(g->high(), kUnlimited);
  EXPECT_EQ(g->min(), 0u);
  EXPECT_EQ(g->low(), 0u);

  g->set_max(4097);
  EXPECT_EQ(g->max(), kPage);
  EXPECT_EQ(g->memory().max(), 1);
  g->set_max(4095);
  EXPECT_EQ(g->max(), 0u);
  g->set_high(3 * kPage + 1);
  EXPECT_EQ(g->high(), 3 * kPage);
  g->set_min(8191);
  EXPECT_EQ(g->min(), kPage);
  g->set_low(2 * kPage);
  EXPECT_EQ(g->low(), 2 * kPage);

  for (uint64_t v : {kUnlimited, kSentinelBytes, kSentinelBytes + kPage, kSentinelBytes + 1,
                     uint64_t{INT64_MAX}, kUnlimited - 1}) {
    g->set_max(v);
    EXPECT_EQ(g->max(), kUnlimited) << v;
    EXPECT_EQ(g->memory().max(), PageCounter::sentinel(12)) << v;
    g->set_high(v);
    EXPECT_EQ(g->high(), kUnlimited) << v;
    g->set_min(v);
    EXPECT_EQ(g->min(), kUnlimited) << v;
    g->set_low(v);
    EXPECT_EQ(g->low(), kUnlimited) << v;
  }
  // Just below the sentinel is an ordinary value.
  g->set_max(kSentinelBytes - 1);
  EXPECT_EQ(g->max(), kSentinelBytes - kPage);

  // set_max_checked floors too and refuses a limit below usage.
  g->set_max(kUnlimited);
  g->memory().charge(3);
  EXPECT_EQ(g->set_max_checked(3 * kPage - 1), EBUSY);
  EXPECT_EQ(g->max(), kUnlimited);
  EXPECT_EQ(g->set_max_checked(3 * kPage + 4095), 0);
  EXPECT_EQ(g->max(), 3 * kPage);
  EXPECT_EQ(g->set_max_checked(kUnlimited), 0);
  EXPECT_EQ(g->max(), kUnlimited);
  // set_max never refuses, even below usage.
  g->set_max(kPage);
  EXPECT_EQ(g->max(), kPage);
  EXPECT_EQ(g->current(), 3 * kPage);
  g->memory().uncharge(3);

  g->set_oom_group(true);
  EXPECT_TRUE(g->oom_group());
}

TEST(GroupTest, KnobsWithLargerUnit) {
  Options o;
  o.unit_shift = 16;
  Controller ctl(o);
  EXPECT_EQ(ctl.unit_size(), 65536u);
  EXPECT_EQ(ctl.max_units(), PageCounter::sentinel(16));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  EXPECT_EQ(g->max(), kUnlimited);
  g->set_max(65536 + 65535);
  EXPECT_EQ(g->max(), 65536u);
  g->set_max(kUnlimited);
  EXPECT_EQ(g->max(), kUnlimited);
  EXPECT_EQ(g->memory().max(), PageCounter::sentinel(16));
  g->memory().charge(2);
  EXPECT_EQ(g->current(), 2u * 65536);
  g->memory().uncharge(2);
}

TEST(GroupTest, CurrentAndPeakInBytes) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->memory().charge(5);
  g->memory().uncharge(2);
  EXPECT_EQ(g->current(), 3 * kPage);
  EXPECT_EQ(g->peak(), 5 * kPage);
  EXPECT_EQ(ctl.root().current(), 3 * kPage);
  g->memory().uncharge(3);
}

TEST(GroupTest, EventsHierarchicalAndLocal) {
  Controller ctl;
  GroupRef a, b, c;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("a/b", &b), 0);
  ASSERT_EQ(ctl.create("a/b/c", &c), 0);
  c->raise(Event::kMax);
  c->raise(Event::kMax);
  b->raise(Event::kOom);

  EXPECT_EQ(c->events_local().get(Event::kMax), 2u);
  EXPECT_EQ(b->events_local().get(Event::kMax), 0u);
  EXPECT_EQ(a->events_local().get(Event::kMax), 0u);
  EXPECT_EQ(c->events().get(Event::kMax), 2u);
  EXPECT_EQ(b->events().get(Event::kMax), 2u);
  EXPECT_EQ(a->events().get(Event::kMax), 2u);
  EXPECT_EQ(ctl.root().events().get(Event::kMax), 0u);
  EXPECT_EQ(ctl.root().events_local().get(Event::kMax), 0u);

  EXPECT_EQ(b->events_local().get(Event::kOom), 1u);
  EXPECT_EQ(c->events().get(Event::kOom), 0u);
  EXPECT_EQ(b->events().get(Event::kOom), 1u);
  EXPECT_EQ(a->events().get(Event::kOom), 1u);
  EXPECT_EQ(ctl.root().events().get(Event::kOom), 0u);

  // Raising on the root itself never shows in its memory.events.
  ctl.root().raise(Event::kHigh);
  EXPECT_EQ(ctl.root().events().get(Event::kHigh), 0u);

  EXPECT_EQ(c->events().format(),
            "low 0\nhigh 0\nmax 2\noom 0\noom_kill 0\noom_group_kill 0\nwait 0\npreempt 0\n"
            "oom_handled 0\noom_spill 0\n");
  EXPECT_STREQ(event_name(Event::kOomGroupKill), "oom_group_kill");
  EXPECT_STREQ(event_name(Event::kWait), "wait");  // the library's extensions, last
  EXPECT_STREQ(event_name(Event::kPreempt), "preempt");
  EXPECT_STREQ(event_name(Event::kLow), "low");
}

TEST(GroupTest, LocalEventsOption) {
  Options o;
  o.local_events = true;
  Controller ctl(o);
  GroupRef a, b;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("a/b", &b), 0);
  b->raise(Event::kOomKill);
  EXPECT_EQ(b->events_local().get(Event::kOomKill), 1u);
  EXPECT_EQ(b->events().get(Event::kOomKill), 1u);
  EXPECT_EQ(a->events().get(Event::kOomKill), 0u);
  EXPECT_EQ(a->events_local().get(Event::kOomKill), 0u);
  EXPECT_EQ(ctl.root().events().get(Event::kOomKill), 0u);
  ctl.root().raise(Event::kOomKill);
  EXPECT_EQ(ctl.root().events().get(Event::kOomKill), 0u);
}

TEST(GroupTest, RemovedGroupIsDyingUntilLastReference) {
  Controller ctl;
  GroupRef p, g;
  ASSERT_EQ(ctl.create("p", &p), 0);
  ASSERT_EQ(ctl.create("p/g", &g), 0);
  const int64_t parent_refs = p->nr_refs();
  ASSERT_EQ(g->memory().try_charge(10), nullptr);
  g->set_min(4 * kPage);
  g->set_low(6 * kPage);
  EXPECT_EQ(p->memory().children_min_usage(), 4);
  EXPECT_EQ(p->memory().children_low_usage(), 6);

  ASSERT_EQ(ctl.remove("p/g"), 0);
  EXPECT_FALSE(g->is_online());
  EXPECT_FALSE(ctl.lookup("p/g"));
  EXPECT_TRUE(p->children().empty());
  EXPECT_EQ(ctl.nr_groups(), 2u);
  EXPECT_EQ(ctl.nr_dying(), 1u);
  // Offline groups protect nothing.
  EXPECT_EQ(g->min(), 0u);
  EXPECT_EQ(g->low(), 0u);
  EXPECT_EQ(p->memory().children_min_usage(), 0);
  EXPECT_EQ(p->memory().children_low_usage(), 0);
  // Its charges stay in the parent, and it is still usable through the reference.
  EXPECT_EQ(p->current(), 10 * kPage);
  EXPECT_EQ(g->current(), 10 * kPage);
  g->raise(Event::kLow);
  EXPECT_EQ(p->events().get(Event::kLow), 1u);
  EXPECT_TRUE(g->memory().uncharge(4));
  EXPECT_EQ(p->current(), 6 * kPage);
  EXPECT_EQ(ctl.root().current(), 6 * kPage);

  // A dying child keeps the parent alive; the walk still sees it when asked to.
  int seen_dying = 0;
  ctl.walk(ctl.root(), [&](Group& x) { seen_dying += x.is_online() ? 0 : 1; });
  EXPECT_EQ(seen_dying, 1);
  seen_dying = 0;
  ctl.walk(
      ctl.root(), [&](Group& x) { seen_dying += x.is_online() ? 0 : 1; }, false);
  EXPECT_EQ(seen_dying, 0);

  GroupRef extra = g;
  g.reset();
  EXPECT_EQ(ctl.nr_dying(), 1u);
  extra.reset();  // last reference: freed
  EXPECT_EQ(ctl.nr_dying(), 0u);
  EXPECT_EQ(p->nr_refs(), parent_refs - 1);
  // What it still held stays counted in the ancestors (reparented) and can be released there.
  EXPECT_EQ(p->current(), 6 * kPage);
  EXPECT_TRUE(p->memory().uncharge(6));
  EXPECT_EQ(ctl.root().current(), 0u);
}

TEST(GroupTest, DyingParentFreedAfterDyingChild) {
  Controller ctl;
  GroupRef a, b;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("a/b", &b), 0);
  ASSERT_EQ(ctl.remove("a/b"), 0);
  ASSERT_EQ(ctl.remove("a"), 0);
  EXPECT_EQ(ctl.nr_dying(), 2u);
  a.reset();  // b still refers to a
  EXPECT_EQ(ctl.nr_dying(), 2u);
  EXPECT_EQ(b->parent()->name(), "a");
  b.reset();
  EXPECT_EQ(ctl.nr_dying(), 0u);
  EXPECT_EQ(ctl.nr_groups(), 1u);
}

TEST(GroupTest, RemovedGroupWithoutOtherReferencesIsFreedAtOnce) {
  Controller ctl;
  ASSERT_EQ(ctl.create("g"), 0);
  ASSERT_EQ(ctl.remove("g"), 0);
  EXPECT_EQ(ctl.nr_dying(), 0u);
  EXPECT_EQ(ctl.nr_groups(), 1u);
}

// ---- memory.peak handles -------------------------------------------------------------------

class PeakTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(ctl_.create("g", &g_), 0); }
  void TearDown() override { g_->memory().uncharge(g_->memory().usage()); }
  void Charge(int64_t n) { g_->memory().charge(n); }
  void Uncharge(int64_t n) { g_->memory().uncharge(n); }

  Controller ctl_;
  GroupRef g_;
};

TEST_F(PeakTest, UnwrittenHandleShowsAllTimeWatermark) {
  Charge(100);
  Uncharge(60);
  Group::PeakWatcher a(*g_);
  EXPECT_EQ(a.read(), 100 * kPage);
  Group::PeakWatcher b(*g_);
  b.reset();
  EXPECT_EQ(b.read(), 40 * kPage);
  EXPECT_EQ(a.read(), 100 * kPage);  // still the all-time peak
  Charge(70);                        // 110
  EXPECT_EQ(a.read(), 110 * kPage);
  EXPECT_EQ(b.read(), 110 * kPage);
  EXPECT_EQ(g_->peak(), 110 * kPage);
}

TEST_F(PeakTest, ResetOnOneHandleDoesNotChangeTheOther) {
  Group::PeakWatcher a(*g_);
  Group::PeakWatcher b(*g_);
  Charge(50);
  Uncharge(30);  // usage 20, peak 50
  a.reset();
  EXPECT_EQ(a.read(), 20 * kPage);
  EXPECT_EQ(b.read(), 50 * kPage);
  b.reset();
  EXPECT_EQ(a.read(), 20 * kPage);
  EXPECT_EQ(b.read(), 20 * kPage);
  Charge(15);    // 35
  Uncharge(25);  // 10
  uint64_t before = b.read();
  EXPECT_EQ(before, 35 * kPage);
  a.reset();
  EXPECT_EQ(a.read(), 10 * kPage);
  EXPECT_EQ(b.read(), before);
  before = a.read();
  b.reset();
  EXPECT_EQ(a.read(), before);
  EXPECT_EQ(b.read(), 10 * kPage);
}

// The deviation documented on Group::PeakWatcher: when B resets the shared local watermark, A
// keeps the peak it could have seen (50), where the kernel would lower it to the current usage.
TEST_F(PeakTest, PeerKeepsPeakSeenBeforeAnotherReset) {
  Group::PeakWatcher a(*g_);
  Group::PeakWatcher b(*g_);
  Charge(10);
  a.reset();
  b.reset();
  Charge(40);    // 50
  Uncharge(30);  // 20
  EXPECT_EQ(a.read(), 50 * kPage);
  b.reset();
  EXPECT_EQ(b.read(), 20 * kPage);
  EXPECT_EQ(a.read(), 50 * kPage);
  Charge(10);  // 30
  EXPECT_EQ(a.read(), 50 * kPage);
  EXPECT_EQ(b.read(), 30 * kPage);
  a.reset();
  EXPECT_EQ(a.read(), 30 * kPage);
}

TEST_F(PeakTest, DestroyedHandleIsForgotten) {
  Group::PeakWatcher a(*g_);
  {
    Group::PeakWatcher b(*g_);
    b.reset();
  }
  Charge(5);
  a.reset();  // must not touch the destroyed handle
  EXPECT_EQ(a.read(), 5 * kPage);
}

}  // namespace
}  // namespace memcg
