// Model-based test of the group tree and its counters. A reference model made of plain integers
// and a table of nodes replays random sequences of operations (charges, try-charges, uncharges,
// knob writes, creation, removal, release of dying groups, events, watermark resets); after every
// operation every observable value of the library is compared with the model. Sequences are
// reproducible from their seed, which every failure prints.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {
namespace {

// One node of the reference model. Counts are in units, as in the counter.
struct Node {
  std::string path;
  int parent = -1;
  bool online = true;
  bool freed = false;
  bool held = true;       // the test still holds a reference
  int live_children = 0;  // children not yet freed (online or dying)
  int64_t usage = 0;      // hierarchical
  int64_t own = 0;        // charged here directly and not yet uncharged (what may be uncharged)
  int64_t max, high, min = 0, low = 0;
  int64_t watermark = 0, local_watermark = 0;
  uint64_t failcnt = 0;
  std::array<uint64_t, kNumEvents> events{}, events_local{};
};

class Model {
 public:
  Model(unsigned shift, bool local_events) : shift_(shift), local_events_(local_events) {
    sentinel_ = PageCounter::sentinel(shift);
    Node root;
    root.path = "/";
    root.max = root.high = sentinel_;
    nodes_.push_back(root);
  }

  int64_t units_floor(uint64_t bytes) const {
    const uint64_t u = bytes >> shift_;
    return u >= static_cast<uint64_t>(sentinel_) ? sentinel_ : static_cast<int64_t>(u);
  }
  uint64_t bytes(int64_t units) const {
    return units >= sentinel_ ? kUnlimited : static_cast<uint64_t>(units) << shift_;
  }

  // Index of the online node with this path, or -1.
  int find(const std::string& path) const {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].online && nodes_[i].path == path) return static_cast<int>(i);
    return -1;
  }

  int create(int parent, const std::string& name) {
    const std::string path = parent == 0 ? name : nodes_[parent].path + "/" + name;
    if (find(path) >= 0) return -EEXIST;
    Node n;
    n.path = path;
    n.parent = parent;
    n.max = n.high = sentinel_;
    nodes_.push_back(n);
    ++nodes_[parent].live_children;
    return static_cast<int>(nodes_.size()) - 1;
  }

  bool has_online_children(int i) const {
    for (const Node& n : nodes_)
      if (n.online && n.parent == i) return true;
    return false;
  }

  void remove(int i) {
    nodes_[i].online = false;
    nodes_[i].min = nodes_[i].low = 0;
  }

  void release(int i) {
    nodes_[i].held = false;
    maybe_free(i);
  }

  void charge(int i, int64_t n) {
    nodes_[i].own += n;
    for (int c = i; c >= 0; c = nodes_[c].parent) {
      nodes_[c].usage += n;
      bump_watermarks(c, nodes_[c].usage);
    }
  }

  // Returns the failing level or -1. Levels below the failing one were charged speculatively
  // before the failure was seen, so their watermarks took the value (the kernel does the same).
  int try_charge(int i, int64_t n) {
    int failed = -1;
    for (int c = i; c >= 0; c = nodes_[c].parent) {
      if (nodes_[c].usage + n > nodes_[c].max) {
        failed = c;
        break;
      }
    }
    if (failed < 0) {
      charge(i, n);
      return -1;
    }
    for (int c = i; c != failed; c = nodes_[c].parent) bump_watermarks(c, nodes_[c].usage + n);
    ++nodes_[failed].failcnt;
    return failed;
  }

  void uncharge(int i, int64_t n) {
    nodes_[i].own -= n;
    for (int c = i; c >= 0; c = nodes_[c].parent) nodes_[c].usage -= n;
  }

  void raise(int i, Event e) {
    const int k = static_cast<int>(e);
    ++nodes_[i].events_local[k];
    if (local_events_) {
      if (i != 0) ++nodes_[i].events[k];
      return;
    }
    for (int c = i; c > 0; c = nodes_[c].parent) ++nodes_[c].events[k];
  }

  void reset_watermark(int i) { nodes_[i].watermark = nodes_[i].local_watermark = nodes_[i].usage; }

  // Sum over the children that still exist of min(usage, setting).
  int64_t children_protected(int i, bool low) const {
    int64_t sum = 0;
    for (const Node& n : nodes_)
      if (!n.freed && n.parent == i) sum += std::min(n.usage, low ? n.low : n.min);
    return sum;
  }

  size_t nr_online() const {
    size_t k = 0;
    for (const Node& n : nodes_) k += n.online;
    return k;
  }
  size_t nr_dying() const {
    size_t k = 0;
    for (const Node& n : nodes_) k += !n.online && !n.freed;
    return k;
  }

  std::vector<Node>& nodes() { return nodes_; }
  int64_t sentinel() const { return sentinel_; }

 private:
  void bump_watermarks(int c, int64_t value) {
    nodes_[c].local_watermark = std::max(nodes_[c].local_watermark, value);
    nodes_[c].watermark = std::max(nodes_[c].watermark, value);
  }

  // A group goes when nothing refers to it: not online, not held, no child left. What it still
  // holds stays in its ancestors' usage and becomes the parent's to uncharge.
  void maybe_free(int i) {
    Node& n = nodes_[i];
    if (n.online || n.freed || n.held || n.live_children > 0) return;
    n.freed = true;
    nodes_[n.parent].own += n.own;
    n.own = 0;
    --nodes_[n.parent].live_children;
    maybe_free(n.parent);
  }

  unsigned shift_;
  bool local_events_;
  int64_t sentinel_;
  std::vector<Node> nodes_;
};

struct Params {
  uint64_t seed;
  unsigned shift;
  bool local_events;
  int ops;
};

void PrintTo(const Params& p, std::ostream* os) {
  *os << "seed " << p.seed << ", unit_shift " << p.shift << (p.local_events ? ", local_events" : "")
      << ", " << p.ops << " operations";
}

class ModelTest : public ::testing::TestWithParam<Params> {};

// Compares every observable value; returns a description of the first difference, or "".
// `groups[i]` is node i's group; valid while the model says the node is not freed (a dying
// group the test no longer holds may still be kept alive by its dying children).
std::string Compare(Controller& ctl, Model& m, const std::vector<Group*>& groups) {
  std::ostringstream out;
  auto& nodes = m.nodes();
  if (ctl.nr_groups() != m.nr_online())
    out << "nr_groups " << ctl.nr_groups() << " want " << m.nr_online() << "; ";
  if (ctl.nr_dying() != m.nr_dying())
    out << "nr_dying " << ctl.nr_dying() << " want " << m.nr_dying() << "; ";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.freed) continue;
    Group& g = i == 0 ? ctl.root() : *groups[i];
    const PageCounter& c = g.memory();
    auto check = [&](const char* what, auto got, auto want) {
      if (got != static_cast<decltype(got)>(want))
        out << n.path << (n.online ? "" : " (dying)") << ": " << what << " " << got << " want "
            << want << "; ";
    };
    check("online", g.is_online(), n.online);
    check("usage", c.usage(), n.usage);
    check("current", g.current(), m.bytes(n.usage));
    check("max", c.max(), n.max);
    check("max bytes", g.max(), m.bytes(n.max));
    check("high", c.high(), n.high);
    check("high bytes", g.high(), m.bytes(n.high));
    check("min", c.min(), n.min);
    check("min bytes", g.min(), m.bytes(n.min));
    check("low", c.low(), n.low);
    check("low bytes", g.low(), m.bytes(n.low));
    check("watermark", c.watermark(), n.watermark);
    check("peak", g.peak(), m.bytes(n.watermark));
    check("local_watermark", c.local_watermark(), n.local_watermark);
    check("failcnt", c.failcnt(), n.failcnt);
    check("underflows", c.underflows(), 0);
    check("children_min_usage", c.children_min_usage(), m.children_protected(i, false));
    check("children_low_usage", c.children_low_usage(), m.children_protected(i, true));
    if (i != 0) {
      check("min_usage", c.min_usage(), std::min(n.usage, n.min));
      check("low_usage", c.low_usage(), std::min(n.usage, n.low));
    }
    for (int e = 0; e < kNumEvents; ++e) {
      check(event_name(static_cast<Event>(e)), g.events().get(static_cast<Event>(e)), n.events[e]);
      check("local", g.events_local().get(static_cast<Event>(e)), n.events_local[e]);
    }
    // Lookup by path finds the online group with that path, whichever it is.
    const int want = m.find(n.path);
    GroupRef found = ctl.lookup(n.path);
    const Group* want_group = want < 0 ? nullptr : want == 0 ? &ctl.root() : groups[want];
    if (found.get() != want_group) out << "lookup(" << n.path << ") mismatch; ";
    if (n.online && i != 0 && found.get() != &g) out << "lookup(" << n.path << ") not self; ";
  }
  return out.str();
}

TEST_P(ModelTest, RandomOperationsMatchModel) {
  const Params p = GetParam();
  Options o;
  o.unit_shift = p.shift;
  o.local_events = p.local_events;
  Controller ctl(o);
  Model m(p.shift, p.local_events);
  std::vector<GroupRef> refs(1);  // index 0 is the root, held by the controller
  std::vector<Group*> groups{&ctl.root()};
  std::mt19937_64 rng(p.seed);
  const uint64_t unit = uint64_t{1} << p.shift;
  auto pick = [&](auto pred) -> int {
    std::vector<int> c;
    for (size_t i = 0; i < m.nodes().size(); ++i)
      if (pred(m.nodes()[i], static_cast<int>(i))) c.push_back(static_cast<int>(i));
    return c.empty() ? -1 : c[rng() % c.size()];
  };
  auto live = [](const Node& n, int i) { return i != 0 && !n.freed; };
  auto online = [](const Node& n, int i) { return i != 0 && n.online; };
  auto knob_bytes = [&]() -> uint64_t {
    switch (rng() % 10) {
      case 0:
        return kUnlimited;
      case 1:
        return static_cast<uint64_t>(m.sentinel()) << p.shift;  // reads "max"
      case 2:
        return (static_cast<uint64_t>(m.sentinel()) << p.shift) + unit + rng() % unit;
      case 3:
        return 0;
      default:
        return (rng() % 400) * unit + rng() % unit;  // floored to whole units
    }
  };
  const char* kNames[] = {"a", "b", "c", "d"};
  // What the sequence exercised; checked at the end so that a seed that covers too little fails.
  int failed_charges = 0, busy_sets = 0, busy_removes = 0, removes = 0;

  for (int op = 0; op < p.ops; ++op) {
    std::ostringstream what;
    const int kind = static_cast<int>(rng() % 100);
    if (kind < 14) {  // create
      const int parent = rng() % 5 == 0 ? 0 : pick([](const Node& n, int) {
        return n.online && std::count(n.path.begin(), n.path.end(), '/') < 3;
      });
      const std::string name = kNames[rng() % 4];
      const std::string path = parent == 0 ? name : m.nodes()[parent].path + "/" + name;
      what << "create " << path;
      GroupRef g;
      const int rc = ctl.create(path, &g);
      const int idx = m.create(parent, name);
      if (idx < 0) {
        ASSERT_EQ(rc, -idx) << "seed " << p.seed << " op " << op << " " << what.str();
      } else {
        ASSERT_EQ(rc, 0) << "seed " << p.seed << " op " << op << " " << what.str();
        refs.push_back(g);
        groups.push_back(g.get());
      }
    } else if (kind < 17) {  // create below a missing parent, or with a bad name
      const bool bad_name = rng() % 2;
      const std::string path = bad_name ? "a/b c" : "zz/a";
      what << "create " << path;
      ASSERT_EQ(ctl.create(path), bad_name ? EINVAL : ENOENT)
          << "seed " << p.seed << " op " << op << " " << what.str();
    } else if (kind < 22) {  // remove an online group (leaf or not)
      const int i = pick(online);
      if (i < 0) continue;
      what << "remove " << m.nodes()[i].path;
      const bool busy = m.has_online_children(i);
      const int rc = rng() % 2 ? ctl.remove(m.nodes()[i].path) : ctl.remove(*refs[i]);
      ASSERT_EQ(rc, busy ? EBUSY : 0) << "seed " << p.seed << " op " << op << " " << what.str();
      if (!busy) m.remove(i);
      (busy ? busy_removes : removes)++;
    } else if (kind < 25) {  // drop the test's reference to a dying group
      const int i = pick([](const Node& n, int i) { return i != 0 && !n.online && n.held; });
      if (i < 0) continue;
      what << "release " << m.nodes()[i].path;
      refs[i].reset();
      m.release(i);
    } else if (kind < 40) {  // forced charge
      const int i = pick(live);
      if (i < 0) continue;
      const int64_t n = 1 + rng() % 40;
      what << "charge " << m.nodes()[i].path << " " << n;
      groups[i]->memory().charge(n);
      m.charge(i, n);
    } else if (kind < 60) {  // try_charge
      const int i = pick(live);
      if (i < 0) continue;
      const int64_t n = 1 + rng() % 60;
      what << "try_charge " << m.nodes()[i].path << " " << n;
      const PageCounter* failed = groups[i]->memory().try_charge(n);
      const int want = m.try_charge(i, n);
      failed_charges += want >= 0;
      const PageCounter* want_counter = want < 0    ? nullptr
                                        : want == 0 ? &ctl.root().memory()
                                                    : &groups[want]->memory();
      ASSERT_EQ(failed, want_counter) << "seed " << p.seed << " op " << op << " " << what.str();
    } else if (kind < 78) {  // uncharge, never more than was charged there
      const int i = pick([](const Node& n, int) { return !n.freed && n.own > 0; });
      if (i < 0) continue;
      const int64_t n = 1 + rng() % m.nodes()[i].own;
      what << "uncharge " << m.nodes()[i].path << " " << n;
      ASSERT_TRUE(groups[i]->memory().uncharge(n))
          << "seed " << p.seed << " op " << op << " " << what.str();
      m.uncharge(i, n);
    } else if (kind < 90) {  // knob writes on online groups
      const int i = pick(online);
      if (i < 0) continue;
      const uint64_t v = knob_bytes();
      const int64_t u = m.units_floor(v);
      Node& n = m.nodes()[i];
      switch (rng() % 5) {
        case 0:
          what << "set_min " << n.path << " " << v;
          groups[i]->set_min(v);
          n.min = u;
          break;
        case 1:
          what << "set_low " << n.path << " " << v;
          groups[i]->set_low(v);
          n.low = u;
          break;
        case 2:
          what << "set_high " << n.path << " " << v;
          groups[i]->set_high(v);
          n.high = u;
          break;
        case 3:
          what << "set_max " << n.path << " " << v;
          groups[i]->set_max(v);
          n.max = u;
          break;
        default: {
          what << "set_max_checked " << n.path << " " << v;
          const int rc = groups[i]->set_max_checked(v);
          const int want = n.usage > u ? EBUSY : 0;
          ASSERT_EQ(rc, want) << "seed " << p.seed << " op " << op << " " << what.str();
          if (want == 0) n.max = u;
          busy_sets += want != 0;
        }
      }
    } else if (kind < 97) {  // events
      const int i = pick(live);
      if (i < 0) continue;
      const Event e = static_cast<Event>(rng() % kNumEvents);
      what << "raise " << m.nodes()[i].path << " " << event_name(e);
      groups[i]->raise(e);
      m.raise(i, e);
    } else {  // watermark reset
      const int i = pick(live);
      if (i < 0) continue;
      what << "reset_watermark " << m.nodes()[i].path;
      groups[i]->memory().reset_watermark();
      m.reset_watermark(i);
    }
    const std::string diff = Compare(ctl, m, groups);
    ASSERT_EQ(diff, "") << "seed " << p.seed << " op " << op << " after " << what.str();
  }

  EXPECT_GT(failed_charges, 50) << "seed " << p.seed;
  EXPECT_GT(busy_sets, 5) << "seed " << p.seed;
  EXPECT_GT(busy_removes, 5) << "seed " << p.seed;
  EXPECT_GT(removes, 20) << "seed " << p.seed;
  EXPECT_GT(m.nodes().size(), 40u) << "seed " << p.seed;

  // Wind down: uncharge everything that can be, drop every reference, and check the tree is
  // back to the root alone with nothing charged.
  for (size_t i = 0; i < m.nodes().size(); ++i) {
    Node& n = m.nodes()[i];
    if (n.freed || n.own == 0) continue;
    groups[i]->memory().uncharge(n.own);
    m.uncharge(static_cast<int>(i), n.own);
  }
  ASSERT_EQ(Compare(ctl, m, groups), "") << "seed " << p.seed << " wind-down";
  for (size_t i = m.nodes().size(); i-- > 1;) {
    if (m.nodes()[i].online && m.has_online_children(static_cast<int>(i))) continue;
    if (m.nodes()[i].online) {
      ASSERT_EQ(ctl.remove(*groups[i]), 0) << "seed " << p.seed;
      m.remove(static_cast<int>(i));
    }
  }
  for (size_t i = 1; i < m.nodes().size(); ++i) {
    if (!m.nodes()[i].held) continue;
    refs[i].reset();
    m.release(static_cast<int>(i));
  }
  EXPECT_EQ(ctl.nr_groups(), 1u) << "seed " << p.seed;
  EXPECT_EQ(ctl.nr_dying(), 0u) << "seed " << p.seed;
  EXPECT_EQ(ctl.root().current(), 0u) << "seed " << p.seed;
  EXPECT_EQ(ctl.root().memory().children_min_usage(), 0) << "seed " << p.seed;
  EXPECT_EQ(ctl.root().memory().children_low_usage(), 0) << "seed " << p.seed;
}

INSTANTIATE_TEST_SUITE_P(Seeds, ModelTest,
                         ::testing::Values(Params{1, 12, false, 5000}, Params{2, 12, false, 5000},
                                           Params{3, 12, true, 5000}, Params{4, 16, false, 5000},
                                           Params{5, 12, false, 5000}),
                         [](const ::testing::TestParamInfo<Params>& info) {
                           return "seed" + std::to_string(info.param.seed);
                         });

}  // namespace
}  // namespace memcg
