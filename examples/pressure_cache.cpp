// A cache that shrinks itself when reclaim of its group becomes inefficient.
//
// The group "app" has memory.max = 16 MiB. The cache keeps growing; once it fills the group,
// every growth step reclaims from it. Most of its units are in use (referenced), so reclaim
// scans much more than it frees: vmpressure reports `medium`. The listener only raises a flag;
// the cache's owner then gives back a quarter of the cache on its own terms (oldest first), which
// leaves room for new entries without reclaim, until the next pressure event.
#include <atomic>
#include <cstdio>

#include "memcg/core/tree/controller.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"

int main() {
  using namespace memcg;
  Controller ctl;
  GroupRef app;
  if (ctl.create("app", &app) != 0) return 1;
  app->set_max(uint64_t{16} << 20);

  LruCache cache(*app, "blocks", /*referenced_percent=*/70);
  std::atomic<int> medium_events{0};
  PressureListener listener;
  // Called on the reclaiming thread at the end of the reclaim that completed the window.
  if (listener.listen(*app, "medium", [&](PressureLevel) { medium_events.fetch_add(1); }) != 0)
    return 1;

  const int64_t step = 256;  // 1 MiB of 4 KiB units per round
  int seen = 0;
  int64_t shrunk = 0;
  for (int round = 1; round <= 40; ++round) {
    cache.grow(step);
    const int events = medium_events.load();
    if (events != seen) {
      seen = events;
      const int64_t give_back = cache.size() / 4;
      shrunk += cache.shrink(give_back);
      std::printf(
          "round %2d: medium pressure (%d events so far), socket pressure %s: shrank by "
          "%lld units to %lld\n",
          round, events, under_socket_pressure(*app) ? "on" : "off",
          static_cast<long long>(give_back), static_cast<long long>(cache.size()));
    }
  }
  const PsiStats psi = psi_stats(*app);
  std::printf(
      "cache: %lld units (%.1f MiB), %llu evicted by reclaim, %lld given back on pressure\n",
      static_cast<long long>(cache.size()), static_cast<double>(app->current()) / (1 << 20),
      static_cast<unsigned long long>(cache.evicted()), static_cast<long long>(shrunk));
  std::printf("memory stall of app: %llu us (some), %llu us (full)\n",
              static_cast<unsigned long long>(psi.total_us[0]),
              static_cast<unsigned long long>(psi.total_us[1]));
  // The point of the example: the cache shrank itself on pressure and stayed within its limit.
  if (seen == 0 || shrunk == 0 || app->current() > app->max()) {
    std::fprintf(stderr, "pressure_cache: expected the cache to shrink on medium pressure\n");
    return 1;
  }
  return 0;
}
