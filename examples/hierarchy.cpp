// A first look at memcg: build a small hierarchy, set limits and protection, charge it, hit a
// limit, and print what the cgroup-v2 files would show.
//
// What to look at: a's usage is the sum of its children's; the failed charge in a/batch raises
// `max` on the level that hit its limit (a), in its events.local and in memory.events of a only
// (never the root); a/interactive's memory.min is reflected in a's children_min_usage.
#include <cstdio>

#include "memcg/memcg.hpp"

namespace {

void print_group(const memcg::Group& g) {
  auto limit = [](uint64_t v) {
    return v == memcg::kUnlimited ? std::string("max") : std::to_string(v);
  };
  std::printf("%-16s current=%-9llu peak=%-9llu min=%-9s max=%-9s events: max=%llu local.max=%llu\n",
              g.path().c_str(), static_cast<unsigned long long>(g.current()),
              static_cast<unsigned long long>(g.peak()), limit(g.min()).c_str(),
              limit(g.max()).c_str(),
              static_cast<unsigned long long>(g.events().get(memcg::Event::kMax)),
              static_cast<unsigned long long>(g.events_local().get(memcg::Event::kMax)));
}

}  // namespace

int main() {
  memcg::Controller ctl;  // 4 KiB charge units
  memcg::GroupRef a, interactive, batch;
  if (ctl.create("a", &a) != 0 || ctl.create("a/interactive", &interactive) != 0 ||
      ctl.create("a/batch", &batch) != 0) {
    std::fprintf(stderr, "hierarchy: cannot create the groups\n");
    return 1;
  }

  a->set_max(64 << 20);            // 64 MiB for the whole tenant
  interactive->set_min(16 << 20);  // 16 MiB the batch jobs can never take away

  const int64_t mib = (1 << 20) / ctl.unit_size();
  interactive->memory().charge(20 * mib);
  int64_t batch_units = 0;
  while (batch->memory().try_charge(mib) == nullptr) batch_units += mib;
  // The 45th MiB did not fit: the failing level is `a`, where the `max` event belongs.
  if (auto* failed = batch->memory().try_charge(mib)) {
    (failed == &a->memory() ? a : batch)->raise(memcg::Event::kMax);
  }

  std::printf("charged %lld MiB to a/batch before a's 64 MiB limit\n",
              static_cast<long long>(batch_units / mib));
  std::printf("a.children_min_usage = %lld units (min(usage, min) of its children)\n",
              static_cast<long long>(a->memory().children_min_usage()));
  ctl.walk(ctl.root(), print_group);

  batch->memory().uncharge(batch_units);
  interactive->memory().uncharge(20 * mib);
  return a->current() == 0 ? 0 : 1;
}
