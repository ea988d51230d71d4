// Per-group jemalloc arenas: the extent hooks that charge pages, binding, the pmr resource
// (arena.hpp says what maps to what).
#include "memcg/jemalloc/arena.hpp"

#include <jemalloc/jemalloc.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/internal/alloc_hook.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/charge/safe_point.hpp"

#include "internal.hpp"

namespace memcg::jemalloc {

constexpr int kMaxArenasPerGroup = ArenaOptions::kMaxArenas;

struct Arena::State {
  // First member: jemalloc hands this pointer back to every hook.
  extent_hooks_t hooks;
  GroupRef group;
  int kind = kDefaultKind;
  int forced_kind = -1;  // memory.stat item of forced bytes (kArenaForcedKindName), or -1
  uint32_t flags = kDefaultCharge;
  bool never_fail = true;
  unsigned unit_shift = 12;
  unsigned index = 0;
  // Bytes charged and not uncharged. Relaxed: a mirror of what the group's counters hold for this
  // arena, read for statistics and reclaim sizing; a reader that races with a hook sees the
  // count just before or after that hook's charge, which the group's counter decides anyway.
  std::atomic<int64_t> charged{0};
  // Set (release) just before arena.<i>.destroy, which runs the dalloc calls on this thread:
  // dalloc then unmaps instead of keeping the range. Read (acquire) by dalloc.
  std::atomic<bool> destroying{false};
  // Hook counters for statistics only (relaxed).
  std::atomic<uint64_t> commits{0};
  std::atomic<uint64_t> decommits{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> forced_bytes{0};
  // The most units this arena's forced charges put the group past memory.max since it last took
  // one of its charges within the limit (relaxed: statistics; count_forced()).
  std::atomic<int64_t> excess_peak{0};
  State* next_released = nullptr;  // guarded by released_mutex()

  // The library's own bookkeeping lives in arena 0, never in a tenant's arena.
  static void* operator new(size_t n) {
    void* p = ::mallocx(n, MALLOCX_ARENA(0) | MALLOCX_TCACHE_NONE);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  static void operator delete(void* p) noexcept {
    if (p != nullptr) ::dallocx(p, MALLOCX_TCACHE_NONE);
  }
};

namespace {

using State = Arena::State;

State* state_of(extent_hooks_t* hooks) noexcept {
  return reinterpret_cast<State*>(hooks);  // hooks is State's first member
}

// Set while this thread creates an arena: jemalloc holds its control lock then, which a
// reclaimer's purge (a mallctl) would take again on this thread.
thread_local int tl_creating = 0;

// Units by which the group stands past memory.max at the level furthest past it (0: none).
int64_t units_past_max(Group& group) noexcept {
  int64_t worst = 0;
  for (Group* g = &group; g != nullptr && !g->is_root(); g = g->parent()) {
    const int64_t over = g->memory().usage() - g->memory().max();
    if (over > worst) worst = over;
  }
  return worst;
}

// What a forced charge of `units` adds to the forced count (arena.hpp, ArenaStats::forced): the
// part of it that puts the group further past memory.max than this arena's forced charges had
// since the group last charged within its limit. A page purged and committed again while the
// group stays over the limit raises nothing: the count is the overshoot, not the traffic.
int64_t count_forced(State* st, int64_t units) noexcept {
  const int64_t excess = units_past_max(*st->group);
  int64_t peak = st->excess_peak.load(std::memory_order_relaxed);
  while (excess > peak &&
         !st->excess_peak.compare_exchange_weak(peak, excess, std::memory_order_relaxed)) {
  }
  if (excess <= peak) return 0;
  return excess - peak < units ? excess - peak : units;
}

// Charges `bytes` (whole pages, so whole units) for the arena; false when refused.
// The hooks run with jemalloc's locks held: the charge takes or is refused the counters only,
// and the rest of the ladder waits for the thread's next safe point (alloc_hook.hpp).
bool charge_pages(State* st, size_t bytes) noexcept {
  internal::AllocHookScope in_hook;
  const int64_t units = static_cast<int64_t>(bytes >> st->unit_shift);
  // Never-fail arenas force what does not fit; so does a charge under a library lock (the
  // library's own allocation cannot fail) and the arena's first metadata.
  const bool force = st->never_fail || internal::tl_hook_bypass != 0 || tl_creating != 0;
  const uint32_t flags = (force ? st->flags | kNoFail : st->flags) | kNoSpin;
  const uint64_t refusals = internal::tl_deferred_refusals;
  const ChargeStatus status = try_charge(*st->group, units, flags, st->kind);
  if (!charged(status)) {
    // Once per safe-point interval, whatever jemalloc retries (the core counts the same way).
    if (internal::tl_deferred_refusals != refusals)
      st->failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (status == ChargeStatus::kForced) {
    const int64_t counted = count_forced(st, units);
    if (counted > 0) {
      const int64_t counted_bytes = counted << st->unit_shift;
      st->forced_bytes.fetch_add(static_cast<uint64_t>(counted_bytes), std::memory_order_relaxed);
      if (st->forced_kind >= 0) st->group->stat_add(st->forced_kind, counted_bytes, counted);
    }
  } else if (st->excess_peak.load(std::memory_order_relaxed) != 0) {
    // The charge fitted at every level: the group is within its limit, an overshoot after this
    // one counts from zero again.
    st->excess_peak.store(0, std::memory_order_relaxed);
  }
  st->charged.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  return true;
}

void uncharge_pages(State* st, size_t bytes) noexcept {
  internal::AllocHookScope in_hook;  // the wake of waiting charges is deferred
  st->charged.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  uncharge_direct(*st->group, static_cast<int64_t>(bytes >> st->unit_shift), st->kind);
}

size_t page_size() noexcept {
  static const size_t page = [] {
    size_t p = 0;
    size_t sz = sizeof p;
    if (::mallctl("arenas.page", &p, &sz, nullptr, 0) != 0 || p == 0) p = 4096;
    return p;
  }();
  return page;
}

void* map_anon(void* hint, size_t size) noexcept {
  void* p = ::mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// ---- extent hooks -----------------------------------------------------------------------------

void* hook_alloc(extent_hooks_t* hooks, void* new_addr, size_t size, size_t alignment, bool* zero,
                 bool* commit, unsigned /*arena_ind*/) {
  State* st = state_of(hooks);
  const size_t page = page_size();
  if (alignment < page) alignment = page;
  void* p = nullptr;
  if (new_addr != nullptr) {
    // Only the exact address will do (jemalloc extends an extent in place).
    p = map_anon(new_addr, size);
    if (p != nullptr && p != new_addr) {
      ::munmap(p, size);
      return nullptr;
    }
  } else {
    if (size + alignment < size) return nullptr;
    const size_t span = size + alignment - page;
    char* raw = static_cast<char*>(map_anon(nullptr, span));
    if (raw == nullptr) return nullptr;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(raw);
    char* aligned = reinterpret_cast<char*>((addr + alignment - 1) & ~(uintptr_t{alignment} - 1));
    const size_t head = static_cast<size_t>(aligned - raw);
    const size_t tail = span - head - size;
    if (head != 0) ::munmap(raw, head);
    if (tail != 0) ::munmap(aligned + size, tail);
    p = aligned;
  }
  if (p == nullptr) return nullptr;
  if (*commit) {
    // jemalloc needs it committed (its metadata, or a fallback after the arena's growth
    // failed): charge it all now.
    if (!charge_pages(st, size)) {
      ::munmap(p, size);
      return nullptr;
    }
  }
  // Otherwise reported uncommitted: only what jemalloc commits of it is charged.
  *zero = true;  // a fresh anonymous mapping reads as zeros
  return p;
}

bool hook_dalloc(extent_hooks_t* hooks, void* addr, size_t size, bool committed,
                 unsigned /*arena_ind*/) {
  State* st = state_of(hooks);
  if (!st->destroying.load(std::memory_order_acquire)) return true;  // kept, decommitted
  if (::munmap(addr, size) != 0) return true;
  if (committed) uncharge_pages(st, size);
  return false;
}

void hook_destroy(extent_hooks_t* hooks, void* addr, size_t size, bool committed,
                  unsigned /*arena_ind*/) {
  State* st = state_of(hooks);
  ::munmap(addr, size);
  if (committed) uncharge_pages(st, size);
}

bool hook_commit(extent_hooks_t* hooks, void* /*addr*/, size_t /*size*/, size_t /*offset*/,
                 size_t length, unsigned /*arena_ind*/) {
  State* st = state_of(hooks);
  // The mapping is readable and writable already: committing is the charge.
  if (!charge_pages(st, length)) return true;
  st->commits.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool hook_decommit(extent_hooks_t* hooks, void* addr, size_t /*size*/, size_t offset,
                   size_t length, unsigned /*arena_ind*/) {
  State* st = state_of(hooks);
  if (::madvise(static_cast<char*>(addr) + offset, length, MADV_DONTNEED) != 0) return true;
  uncharge_pages(st, length);
  st->decommits.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool hook_refuse_purge(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) {
  return true;  // jemalloc decommits instead (arena.hpp)
}

bool hook_split(extent_hooks_t*, void*, size_t, size_t, size_t, bool, unsigned) {
  return false;
}

bool hook_merge(extent_hooks_t*, void*, size_t, void*, size_t, bool, unsigned) {
  return false;
}

// ---- statistics -------------------------------------------------------------------------------

void refresh_epoch() noexcept {
  uint64_t epoch = 1;
  size_t sz = sizeof epoch;
  ::mallctl("epoch", &epoch, &sz, &epoch, sz);
}

template <typename T>
T read_ctl(const std::string& name) noexcept {
  T v{};
  size_t sz = sizeof v;
  if (::mallctl(name.c_str(), &v, &sz, nullptr, 0) != 0) return T{};
  return v;
}

void purge_arena(unsigned index) noexcept {
  const std::string name = "arena." + std::to_string(index) + ".purge";
  ::mallctl(name.c_str(), nullptr, nullptr, nullptr, 0);
}

// ---- released arenas --------------------------------------------------------------------------

std::mutex& released_mutex() {
  static std::mutex m;
  return m;
}
State* g_released = nullptr;  // guarded by released_mutex()

// Destroys the jemalloc arena of `st` if it holds no block; true when done (`st` is then to be
// deleted by the caller, with no lock held: it drops a group reference).
bool try_destroy(State* st) noexcept {
  purge_arena(st->index);
  refresh_epoch();
  const std::string prefix = "stats.arenas." + std::to_string(st->index) + ".";
  if (read_ctl<size_t>(prefix + "pactive") != 0) return false;
  if (read_ctl<unsigned>(prefix + "nthreads") != 0) return false;
  st->destroying.store(true, std::memory_order_release);
  const std::string name = "arena." + std::to_string(st->index) + ".destroy";
  if (::mallctl(name.c_str(), nullptr, nullptr, nullptr, 0) != 0) {
    st->destroying.store(false, std::memory_order_release);
    return false;
  }
  return true;
}

// Deletes `st` and with it its group reference, which may be the last: call with no lock held.
void delete_state(State* st) noexcept {
  delete st;
}

// Every jemalloc arena of one Arena (ArenaOptions::nr_arenas), fixed after creation.
struct StateSet {
  State* items[kMaxArenasPerGroup] = {};
  unsigned size = 0;
};

class ArenaReclaimer final : public Reclaimer {
 public:
  explicit ArenaReclaimer(const StateSet* set) : set_(set) {}
  int64_t reclaimable() const noexcept override {
    // An upper bound: the dirty pages are part of what is charged (reading jemalloc's exact
    // figure would refresh its statistics epoch on every reclaim sizing).
    if (set_->size == 0) return 0;
    int64_t bytes = 0;
    for (unsigned i = 0; i < set_->size; ++i)
      bytes += set_->items[i]->charged.load(std::memory_order_relaxed);
    return bytes > 0 ? bytes >> set_->items[0]->unit_shift : 0;
  }
  ReclaimResult reclaim(int64_t nr_to_scan, int /*priority*/) override {
    if (set_->size == 0) return {};
    int64_t freed = 0;
    for (unsigned i = 0; i < set_->size; ++i) {
      State* st = set_->items[i];
      const int64_t before = st->charged.load(std::memory_order_relaxed);
      purge_arena(st->index);
      freed += before - st->charged.load(std::memory_order_relaxed);
    }
    // A purge returns every dirty page, possibly more than asked: the report stays within what
    // was asked (the driver distrusts more; the counters show the rest freed anyway).
    ReclaimResult r;
    r.scanned = nr_to_scan > 0 ? nr_to_scan : 0;
    const int64_t units = freed > 0 ? freed >> set_->items[0]->unit_shift : 0;
    r.reclaimed = units < r.scanned ? units : r.scanned;
    return r;
  }

 private:
  const StateSet* set_;
};

// Creates one jemalloc arena with the group's hooks; null when jemalloc refuses.
State* create_state(Group& group, int kind, const ArenaOptions& options) noexcept {
  State* st;
  try {
    st = new State();
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  st->hooks.alloc = hook_alloc;
  st->hooks.dalloc = hook_dalloc;
  st->hooks.destroy = hook_destroy;
  st->hooks.commit = hook_commit;
  st->hooks.decommit = hook_decommit;
  st->hooks.purge_lazy = hook_refuse_purge;
  st->hooks.purge_forced = hook_refuse_purge;
  st->hooks.split = hook_split;
  st->hooks.merge = hook_merge;
  st->group = GroupRef(&group);
  st->kind = kind;
  st->forced_kind = group.controller().stat_index(kArenaForcedKindName);
  st->flags = options.charge_flags;
  st->never_fail = options.failure == ArenaFailure::kNeverFail;
  st->unit_shift = group.controller().unit_shift();

  // The hooks run during creation (metadata): everything they read is set above.
  unsigned index = 0;
  size_t sz = sizeof index;
  extent_hooks_t* hooks = &st->hooks;
  ++tl_creating;
  const int rc = ::mallctl("arenas.create", &index, &sz, &hooks, sizeof hooks);
  --tl_creating;
  if (rc != 0) {
    // jemalloc's own cleanup gives back what the failed creation took, through the hooks;
    // anything it kept stays counted rather than being uncharged twice.
    delete_state(st);
    return nullptr;
  }
  st->index = index;
  if (options.dirty_decay_ms != ArenaOptions::kKeepDefault) {
    ssize_t ms = static_cast<ssize_t>(options.dirty_decay_ms);
    const std::string name = "arena." + std::to_string(index) + ".dirty_decay_ms";
    ::mallctl(name.c_str(), nullptr, nullptr, &ms, sizeof ms);
  }
  return st;
}

// Destroys `st`'s jemalloc arena now if it holds no block, else queues it for
// collect_released() and the collector.
void release_state(State* st) noexcept {
  bool destroyed;
  {
    internal::HookBypass bypass;
    std::lock_guard<std::mutex> lock(released_mutex());
    destroyed = try_destroy(st);
    if (!destroyed) {
      st->next_released = g_released;
      g_released = st;
    }
  }
  if (destroyed) {
    delete_state(st);  // no lock held: may drop the last group reference
  } else {
    wake_collector();
  }
}

void start_background_purge() noexcept {
  static const bool started = [] {
    bool on = true;
    return ::mallctl("background_thread", nullptr, nullptr, &on, sizeof on) == 0;
  }();
  (void)started;
}

}  // namespace

struct Arena::Registration {
  Registration() : reclaimer(&set) {}
  StateSet set;  // filled before the reclaimer is registered
  ArenaReclaimer reclaimer;
  ReclaimerRegistration registration;
};

int Arena::create(Group& group, std::unique_ptr<Arena>* out, const ArenaOptions& options) {
  internal::HookBypass bypass;
  if (out == nullptr || group.is_root()) return EINVAL;
  Controller& ctl = group.controller();
  if (uint64_t{1} << ctl.unit_shift() > page_size()) return EINVAL;
  int kind = options.kind;
  if (kind == kAutoKind) {
    kind = ctl.stat_index(kArenaKindName);
    if (kind < 0) kind = kDefaultKind;
  } else if (kind < 0 || static_cast<size_t>(kind) >= ctl.stats().size()) {
    return EINVAL;
  }
  if (options.dirty_decay_ms != ArenaOptions::kKeepDefault && options.dirty_decay_ms < -1)
    return EINVAL;
  if (options.nr_arenas < 1 || options.nr_arenas > kMaxArenasPerGroup) return EINVAL;
  if (options.failure != ArenaFailure::kRefuse && options.failure != ArenaFailure::kNeverFail)
    return EINVAL;
  if (!jemalloc_serves_malloc()) return ENOTSUP;
  if (!group.is_online()) return ENOENT;
  if (options.background_purge) start_background_purge();
  install_ladder_scope();
  collect_released();

  std::unique_ptr<Arena> arena;
  try {
    arena.reset(new Arena());
    arena->states_ = std::make_unique<Registration>();
  } catch (...) {
    return EAGAIN;
  }
  StateSet& set = arena->states_->set;
  for (int i = 0; i < options.nr_arenas; ++i) {
    State* st = create_state(group, kind, options);
    if (st == nullptr) {
      for (unsigned j = 0; j < set.size; ++j) release_state(set.items[j]);
      set.size = 0;
      return EAGAIN;
    }
    set.items[set.size++] = st;
  }
  try {
    arena->states_->registration = ReclaimerRegistration(group, arena->states_->reclaimer);
  } catch (...) {
    for (unsigned j = 0; j < set.size; ++j) release_state(set.items[j]);
    set.size = 0;
    return EAGAIN;
  }
  *out = std::move(arena);
  return 0;
}

Arena::~Arena() {
  if (!states_) return;
  states_->registration.reset();  // waits for a reclaim in flight
  StateSet& set = states_->set;
  for (unsigned i = 0; i < set.size; ++i) release_state(set.items[i]);
  set.size = 0;
  collect_released();
}

Group& Arena::group() const noexcept {
  return *states_->set.items[0]->group;
}
unsigned Arena::index() const noexcept {
  return states_->set.items[0]->index;
}
int Arena::nr_arenas() const noexcept {
  return static_cast<int>(states_->set.size);
}
unsigned Arena::index(int i) const noexcept {
  const StateSet& set = states_->set;
  return i >= 0 && static_cast<unsigned>(i) < set.size ? set.items[i]->index : UINT32_MAX;
}
bool Arena::owns(unsigned index) const noexcept {
  const StateSet& set = states_->set;
  for (unsigned i = 0; i < set.size; ++i)
    if (set.items[i]->index == index) return true;
  return false;
}
unsigned Arena::next_index() noexcept {
  const StateSet& set = states_->set;
  return set.items[next_.fetch_add(1, std::memory_order_relaxed) % set.size]->index;
}
int Arena::kind() const noexcept {
  return states_->set.items[0]->kind;
}
int Arena::mallocx_flags() const noexcept {
  return static_cast<int>(MALLOCX_ARENA(index())) | MALLOCX_TCACHE_NONE;
}
uint64_t Arena::charged_bytes() const noexcept {
  int64_t c = 0;
  const StateSet& set = states_->set;
  for (unsigned i = 0; i < set.size; ++i)
    c += set.items[i]->charged.load(std::memory_order_relaxed);
  return c > 0 ? static_cast<uint64_t>(c) : 0;
}

uint64_t Arena::purge() noexcept {
  const uint64_t before = charged_bytes();
  const StateSet& set = states_->set;
  for (unsigned i = 0; i < set.size; ++i) purge_arena(set.items[i]->index);
  const uint64_t after = charged_bytes();
  return before > after ? before - after : 0;
}

ArenaStats Arena::stats() const noexcept {
  ArenaStats s;
  refresh_epoch();
  const size_t page = page_size();
  const StateSet& set = states_->set;
  for (unsigned i = 0; i < set.size; ++i) {
    const State* st = set.items[i];
    const std::string prefix = "stats.arenas." + std::to_string(st->index) + ".";
    s.active += read_ctl<size_t>(prefix + "pactive") * page;
    s.dirty += read_ctl<size_t>(prefix + "pdirty") * page;
    s.muzzy += read_ctl<size_t>(prefix + "pmuzzy") * page;
    s.mapped += read_ctl<size_t>(prefix + "mapped");
    s.retained += read_ctl<size_t>(prefix + "retained");
    s.metadata += read_ctl<size_t>(prefix + "base");
    s.resident += read_ctl<size_t>(prefix + "resident");
    s.commits += st->commits.load(std::memory_order_relaxed);
    s.decommits += st->decommits.load(std::memory_order_relaxed);
    s.failed_charges += st->failed.load(std::memory_order_relaxed);
    s.forced += st->forced_bytes.load(std::memory_order_relaxed);
  }
  s.charged = charged_bytes();
  return s;
}

std::string Arena::format_stats() const {
  internal::HookBypass bypass;
  const ArenaStats s = stats();
  std::string out;
  auto line = [&out](const char* name, uint64_t v) {
    out += name;
    out += ' ';
    out += std::to_string(v);
    out += '\n';
  };
  line("charged", s.charged);
  line("active", s.active);
  line("dirty", s.dirty);
  line("muzzy", s.muzzy);
  line("mapped", s.mapped);
  line("retained", s.retained);
  line("metadata", s.metadata);
  line("resident", s.resident);
  line("forced", s.forced);
  return out;
}

size_t collect_released() noexcept {
  State* done = nullptr;
  size_t remaining = 0;
  {
    internal::HookBypass bypass;
    std::lock_guard<std::mutex> lock(released_mutex());
    State** link = &g_released;
    while (*link != nullptr) {
      State* st = *link;
      if (try_destroy(st)) {
        *link = st->next_released;
        st->next_released = done;
        done = st;
      } else {
        ++remaining;
        link = &st->next_released;
      }
    }
  }
  // Group references dropped with no lock held (they may be the last).
  while (done != nullptr) {
    State* next = done->next_released;
    delete_state(done);
    done = next;
  }
  return remaining;
}

}  // namespace memcg::jemalloc
