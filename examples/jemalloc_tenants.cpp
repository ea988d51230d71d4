// Two tenants, each with a jemalloc arena of its own (memcg::jemalloc): every thread of a tenant
// allocates with plain new/malloc, and the tenant's group is charged for the pages its arena
// commits. Tenant "a" has a 64 MiB memory.max and code written to take a failure (kRefuse): it
// runs out. Tenant "c" has a 32 MiB memory.max and the default never-fail arena, as for code
// that cannot take a failure: it runs to the end past its limit, the overshoot counted as forced
// bytes, and is back under its limit once it frees. Tenant "b" is never affected.
// Exits non-zero when that is not what happened.
#include <cstdio>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include <memcg/memcg.hpp>
#include <memcg/jemalloc/arena.hpp>

namespace {

// What a tenant's request handler might do: build a table of strings until told to stop.
size_t fill(size_t entries) {
  std::map<std::string, std::string> table;
  for (size_t i = 0; i < entries; ++i)
    table.emplace("key-" + std::to_string(i) + "-padding-padding", std::string(100, 'v'));
  return table.size();
}

// The README's sample, as written there.
void readme_sample(memcg::GroupRef& tenant) {
  std::unique_ptr<memcg::jemalloc::Arena> arena;
  if (memcg::jemalloc::Arena::create(*tenant, &arena) != 0) { /* EINVAL, ENOENT, EAGAIN */ }
  {
    memcg::jemalloc::ScopedArenaAttach in_tenant(*arena);  // group attachment + thread.arena
    std::map<std::string, std::string> table;               // plain containers, plain new
    table.emplace("key", std::string(1000, 'v'));            // pages charged to *tenant
  }
  std::printf("%s", arena->format_stats().c_str());         // jemalloc's figures, charged bytes
}

}  // namespace

int main() {
  memcg::Controller ctl;
  memcg::GroupRef a, b, c, sample;
  if (ctl.create("a", &a) != 0 || ctl.create("b", &b) != 0 || ctl.create("c", &c) != 0 ||
      ctl.create("sample", &sample) != 0)
    return 1;
  readme_sample(sample);
  a->set_max(64ull << 20);
  c->set_max(32ull << 20);
  memcg::jemalloc::ArenaOptions refuse;
  refuse.failure = memcg::jemalloc::ArenaFailure::kRefuse;
  std::unique_ptr<memcg::jemalloc::Arena> arena_a, arena_b, arena_c;
  if (memcg::jemalloc::Arena::create(*a, &arena_a, refuse) != 0 ||
      memcg::jemalloc::Arena::create(*b, &arena_b) != 0 ||
      memcg::jemalloc::Arena::create(*c, &arena_c) != 0)
    return 1;

  bool a_refused = false, b_refused = false;
  size_t b_entries = 0;
  std::thread ta([&] {
    memcg::jemalloc::ScopedArenaAttach in(*arena_a);
    try {
      fill(2000000);  // about 400 MiB: far past a's 64 MiB
    } catch (const std::bad_alloc&) {
      a_refused = true;
    }
  });
  std::thread tb([&] {
    memcg::jemalloc::ScopedArenaAttach in(*arena_b);
    try {
      b_entries = fill(300000);
    } catch (const std::bad_alloc&) {
      b_refused = true;
    }
  });
  ta.join();
  tb.join();
  size_t c_entries = 0;
  bool c_refused = false;
  std::thread tc([&] {
    memcg::jemalloc::ScopedArenaAttach in(*arena_c);
    try {
      c_entries = fill(500000);  // about 100 MiB against c's 32 MiB, freed on return
    } catch (const std::bad_alloc&) {
      c_refused = true;
    }
  });
  tc.join();

  std::printf("a: memory.max 64 MiB, peak %.1f MiB, refused: %s\n", a->peak() / 1048576.0,
              a_refused ? "yes" : "no");
  std::printf("b: no limit, peak %.1f MiB, %zu entries, refused: %s\n", b->peak() / 1048576.0,
              b_entries, b_refused ? "yes" : "no");
  const memcg::jemalloc::ArenaStats sa = arena_a->stats();
  std::printf("a now: memory.current %llu, jemalloc mapped %llu, dirty %llu\n",
              static_cast<unsigned long long>(a->current()),
              static_cast<unsigned long long>(sa.mapped),
              static_cast<unsigned long long>(sa.dirty));
  const memcg::jemalloc::ArenaStats sc = arena_c->stats();
  std::printf("c: memory.max 32 MiB, never-fail, peak %.1f MiB, %zu entries, forced %.1f MiB, "
              "now %.1f MiB\n",
              c->peak() / 1048576.0, c_entries, sc.forced / 1048576.0, c->current() / 1048576.0);
  const bool ok = a_refused && !b_refused && b_entries == 300000 && a->peak() <= a->max() &&
                  a->current() == sa.mapped && !c_refused && c_entries == 500000 &&
                  c->peak() > c->max() && sc.forced > 0 && c->current() <= c->max() &&
                  c->current() == sc.mapped;
  arena_a.reset();
  arena_b.reset();
  arena_c.reset();
  memcg::jemalloc::collect_released();
  std::printf("%s\n", ok ? "ok" : "UNEXPECTED");
  return ok ? 0 : 1;
}
