// Uses the installed memcg::jemalloc component: a group's arena, one bound allocation, and the
// charge it made.
#include <memcg/jemalloc/arena.hpp>
#include <memcg/memcg.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>

int main() {
  memcg::Controller ctl;
  memcg::GroupRef g;
  if (ctl.create("a", &g) != 0) return 1;
  std::unique_ptr<memcg::jemalloc::Arena> arena;
  if (memcg::jemalloc::Arena::create(*g, &arena) != 0) return 2;
  void* p;
  {
    memcg::jemalloc::ScopedArenaAttach in(*arena);
    p = std::malloc(1 << 20);
  }
  if (p == nullptr || memcg::jemalloc::arena_of(p) != arena->index()) return 3;
  const bool ok = g->current() == arena->stats().mapped && g->current() >= (1u << 20);
  std::printf("arena current=%llu\n", static_cast<unsigned long long>(g->current()));
  std::free(p);
  arena.reset();
  return ok && memcg::jemalloc::collect_released() == 0 && g->current() == 0 ? 0 : 4;
}
