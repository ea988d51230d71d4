#include "memcg/sqlite/engine.hpp"

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "memcg/core/charge/attach.hpp"
#include "memcg/percpu/stat_registry.hpp"
#include "page_cache.hpp"

namespace memcg::sqlite {

namespace internal {
extern const sqlite3_mem_methods kHeapMethods;  // heap.cpp
}

namespace {
std::atomic<Engine*> g_engine{nullptr};
std::mutex g_install_mu;  // one install or teardown at a time

int fail(std::string* error, int code, std::string why) {
  if (error != nullptr) *error = std::move(why);
  return code;
}
}  // namespace

void add_stat_kinds(Options& options) {
  for (const char* name : {kCacheKindName, kHeapKindName}) {
    if (std::find(options.stat_kinds.begin(), options.stat_kinds.end(), name) ==
        options.stat_kinds.end())
      options.stat_kinds.emplace_back(name);
  }
}

Engine* Engine::current() noexcept { return g_engine.load(std::memory_order_acquire); }

Engine::Engine(Controller& controller, Group& fallback)
    : controller_(&controller), fallback_(&fallback) {
  cache_kind_ = controller.stat_index(kCacheKindName);
  if (cache_kind_ < 0) cache_kind_ = StatRegistry::kFile;
  heap_kind_ = controller.stat_index(kHeapKindName);
  if (heap_kind_ < 0) heap_kind_ = StatRegistry::kAnon;
}

int Engine::install(Controller& controller, const EngineOptions& options,
                    std::unique_ptr<Engine>* out, std::string* error) {
  Group& fallback = options.fallback != nullptr ? *options.fallback : controller.root();
  if (&fallback.controller() != &controller)
    return fail(error, EINVAL, "memcg::sqlite: the fallback group belongs to another controller");
  if (!fallback.is_online())
    return fail(error, EINVAL,
                "memcg::sqlite: the fallback group " + fallback.path() + " was removed");
  std::lock_guard lock(g_install_mu);
  if (g_engine.load(std::memory_order_acquire) != nullptr)
    return fail(error, EBUSY, "memcg::sqlite: another Engine is installed in this process");
  std::unique_ptr<Engine> e(new Engine(controller, fallback));
  // GETMALLOC is refused like every configuration once SQLite is initialized: the check that
  // nothing used SQLite first, before anything changes.
  if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &e->saved_malloc_) != SQLITE_OK ||
      sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &e->saved_pcache_) != SQLITE_OK)
    return fail(error, EBUSY,
                "memcg::sqlite: SQLite is already initialized in this process (sqlite3_config "
                "returned SQLITE_MISUSE): install the Engine before any other SQLite call, or "
                "call sqlite3_shutdown() first");
  g_engine.store(e.get(), std::memory_order_release);
  auto undo = [&] {
    (void)sqlite3_config(SQLITE_CONFIG_MALLOC, &e->saved_malloc_);
    (void)sqlite3_config(SQLITE_CONFIG_PCACHE2, &e->saved_pcache_);
    g_engine.store(nullptr, std::memory_order_release);
  };
  int rc = SQLITE_OK;
  if (options.heap) {
    rc = sqlite3_config(SQLITE_CONFIG_MALLOC, &internal::kHeapMethods);
    e->heap_ = rc == SQLITE_OK;
  }
  if (rc == SQLITE_OK && options.page_cache) {
    rc = sqlite3_config(SQLITE_CONFIG_PCACHE2, &internal::kPageCacheMethods);
    e->page_cache_ = rc == SQLITE_OK;
  }
  if (rc != SQLITE_OK) {
    undo();
    return fail(error, rc == SQLITE_MISUSE ? EBUSY : EIO,
                std::string("memcg::sqlite: sqlite3_config refused the engine: ") +
                    sqlite3_errstr(rc));
  }
  {
    // SQLite's global state (mutexes, VFS list) is the fallback group's.
    ConnectionScope scope(fallback);
    rc = sqlite3_initialize();
  }
  if (rc != SQLITE_OK) {
    (void)sqlite3_shutdown();
    undo();
    return fail(error, EIO,
                std::string("memcg::sqlite: sqlite3_initialize failed: ") + sqlite3_errstr(rc));
  }
  e->installed_ = true;
  *out = std::move(e);
  return 0;
}

Engine::~Engine() {
  if (!installed_) return;  // a failed install changed nothing, and holds the install lock
  std::lock_guard lock(g_install_mu);
  (void)sqlite3_shutdown();  // SQLITE_OK always (sqlite3.h)
  if (heap_) (void)sqlite3_config(SQLITE_CONFIG_MALLOC, &saved_malloc_);
  if (page_cache_) (void)sqlite3_config(SQLITE_CONFIG_PCACHE2, &saved_pcache_);
  g_engine.store(nullptr, std::memory_order_release);
}

Group& Engine::current_group() const noexcept {
  if (Group* g = internal::tl_state.scope; g != nullptr && &g->controller() == controller_)
    return *g;
  if (Group* g = attached_group(); g != nullptr && &g->controller() == controller_) return *g;
  return *fallback_;
}

bool Engine::heap_fault() noexcept {
  // One relaxed load when no fault is set: the heap's hot path.
  if (fault_countdown_.load(std::memory_order_relaxed) < 0) [[likely]] return false;
  const int64_t left = fault_countdown_.fetch_sub(1, std::memory_order_relaxed);
  if (left > 0) return false;
  if (left < 0) {  // turned off meanwhile, or a racing thread took a one-shot fault
    fault_countdown_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // A persistent fault stays at 0, so that every later allocation fails too.
  fault_countdown_.store(fault_persistent_.load(std::memory_order_relaxed) ? 0 : -1,
                         std::memory_order_relaxed);
  heap_refusals_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Engine::set_heap_fault(int64_t countdown, bool persistent) noexcept {
  fault_persistent_.store(persistent, std::memory_order_relaxed);
  fault_countdown_.store(countdown < 0 ? -1 : countdown, std::memory_order_relaxed);
}

void Engine::link(internal::PageCache* cache, Group* group) noexcept {
  std::lock_guard lock(caches_mu_);
  try {
    caches_[group].push_back(cache);
  } catch (...) {
    // Out of memory for the registry: the cache works, it is only not found by the heap's
    // release for its group nor counted in stats().
  }
}

void Engine::unlink(internal::PageCache* cache, Group* group) noexcept {
  std::lock_guard lock(caches_mu_);
  auto it = caches_.find(group);
  if (it == caches_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), cache), v.end());
  if (v.empty()) caches_.erase(it);
}

int64_t Engine::release_cache(Group& group, int64_t units) noexcept {
  std::lock_guard lock(caches_mu_);
  auto it = caches_.find(&group);
  if (it == caches_.end()) return 0;
  int64_t freed = 0;
  for (internal::PageCache* c : it->second) {
    freed += c->release(units - freed);
    if (freed >= units) break;
  }
  return freed;
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard lock(caches_mu_);
    for (const auto& [group, caches] : caches_) {
      for (const internal::PageCache* c : caches) {
        ++s.caches;
        s.pages += c->pages();
        s.cache_bytes += c->bytes();
      }
    }
  }
  s.heap_refusals = heap_refusals_.load(std::memory_order_relaxed);
  s.fetch_refusals = fetch_refusals_.load(std::memory_order_relaxed);
  s.fetch_forced = fetch_forced_.load(std::memory_order_relaxed);
  s.recycled = recycled_.load(std::memory_order_relaxed);
  s.reclaimed = reclaimed_.load(std::memory_order_relaxed);
  s.heap_cache_releases = heap_cache_releases_.load(std::memory_order_relaxed);
  return s;
}

uint64_t Engine::cache_bytes(const Group& group) const {
  std::lock_guard lock(caches_mu_);
  auto it = caches_.find(&group);
  if (it == caches_.end()) return 0;
  uint64_t bytes = 0;
  for (const internal::PageCache* c : it->second) bytes += c->bytes();
  return bytes;
}

ConnectionScope::ConnectionScope(Group& group) noexcept
    : previous_(std::exchange(internal::tl_state.scope, &group)) {}

ConnectionScope::~ConnectionScope() { internal::tl_state.scope = previous_; }

int bind(sqlite3* db, Group& group, std::string* error) {
  Engine* e = Engine::current();
  if (e == nullptr || !e->page_cache_)
    return fail(error, ENOENT, "memcg::sqlite: no Engine with a page cache is installed");
  if (db == nullptr) return fail(error, EINVAL, "memcg::sqlite: bind of a null connection");
  if (&group.controller() != e->controller_)
    return fail(error, EINVAL, "memcg::sqlite: the group belongs to another controller");
  if (!group.is_online())
    return fail(error, ENOENT, "memcg::sqlite: group " + group.path() + " was removed");
  Group* previous = std::exchange(internal::tl_state.bind_target, &group);
  (void)sqlite3_db_release_memory(db);  // SQLITE_OK always; xShrink moves each cache
  internal::tl_state.bind_target = previous;
  return 0;
}

}  // namespace memcg::sqlite
