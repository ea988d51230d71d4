// OOM handlers (oom.hpp, OomHandler): registration, the chain an OOM runs before the killer, and
// the per-thread record that keeps a handler from running the OOM path for the memory it serves.
//
// Locking: the registry and each entry's counters are guarded by the controller's OOM lock
// (OomState::mu). A handler is called with no library lock held; the chain takes the OOM lock
// only between calls. Unregistering waits on OomState::cv for calls in progress on other threads.
#include <algorithm>
#include <cerrno>
#include <exception>
#include <utility>

#include "memcg/base/clock.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/base/internal/lock.hpp"
#include "memcg/base/internal/utf8.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "oom_batch.hpp"

namespace memcg {

namespace internal {

struct OomHandlerEntry {
  Controller* controller;
  GroupRef group;
  std::string name;
  OomHandlerFn fn;
  uint64_t budget_ns;
  // Guarded by the OOM lock.
  bool removed = false;
  int running = 0;             // calls in progress, on any thread
  uint64_t skip_until_ns = 0;  // penalty after an overrun or a throw (controller's clock)
  OomHandlerStats stats;
};

}  // namespace internal

namespace {

using internal::OomHandlerEntry;

// The handler calls in progress on this thread, innermost first.
struct HandlerFrame {
  const OomHandlerEntry* entry;
  const Group* group;
  HandlerFrame* outer;
};
thread_local HandlerFrame* tl_handler_frames = nullptr;

int frames_of(const OomHandlerEntry* e) noexcept {
  int n = 0;
  for (const HandlerFrame* f = tl_handler_frames; f; f = f->outer) n += f->entry == e;
  return n;
}

void unregister(const std::shared_ptr<OomHandlerEntry>& e) noexcept {
  internal::OomState& state = e->controller->oom_state();
  internal::HookBypass bypass;  // nothing under the OOM lock is charged
  std::unique_lock lock(state.mu);
  e->removed = true;
  auto& v = state.handlers;
  v.erase(std::remove(v.begin(), v.end(), e), v.end());
  // A call on this thread (the handler unregisters itself) is not waited for.
  const int own = frames_of(e.get());
  state.cv.wait(lock, [&] { return e->running <= own; });
}

}  // namespace

bool internal::in_oom_handler_for(const Group& domain) noexcept {
  for (const HandlerFrame* f = tl_handler_frames; f; f = f->outer)
    if (domain.is_descendant_of(*f->group) || f->group->is_descendant_of(domain)) return true;
  return false;
}

// ---- the handle --------------------------------------------------------------------------------

OomHandler::OomHandler() noexcept = default;
OomHandler::~OomHandler() { reset(); }
OomHandler::OomHandler(OomHandler&& o) noexcept : entry_(std::move(o.entry_)) {}
OomHandler& OomHandler::operator=(OomHandler&& o) noexcept {
  if (this != &o) {
    reset();
    entry_ = std::move(o.entry_);
  }
  return *this;
}

void OomHandler::reset() noexcept {
  if (!entry_) return;
  std::shared_ptr<OomHandlerEntry> e = std::move(entry_);
  entry_.reset();
  unregister(e);
  internal::HookBypass bypass;
  e.reset();  // the last reference may drop the callback and the group reference
}

const std::string& OomHandler::name() const noexcept {
  static const std::string kNone;
  return entry_ ? entry_->name : kNone;
}

OomHandlerStats OomHandler::stats() const noexcept {
  if (!entry_) return {};
  internal::OomState& state = entry_->controller->oom_state();
  internal::HookBypass bypass;
  internal::LockGuard lock(state.mu);
  return entry_->stats;
}

int OomHandler::add(Group& group, std::string name, OomHandlerFn fn, OomHandler* out,
                    std::chrono::nanoseconds budget) {
  if (out == nullptr || name.empty() || !fn || budget.count() <= 0 ||
      static_cast<uint64_t>(budget.count()) > kOomHandlerChainBudgetNs)
    return EINVAL;
  if (!group.is_online()) return ENOENT;
  auto e = std::make_shared<OomHandlerEntry>();
  e->controller = &group.controller();
  e->group = GroupRef(&group);
  e->name = std::move(name);
  e->fn = std::move(fn);
  e->budget_ns = static_cast<uint64_t>(budget.count());
  internal::OomState& state = group.controller().oom_state();
  {
    internal::HookBypass bypass;
    internal::LockGuard lock(state.mu);
    const auto on_group = std::count_if(state.handlers.begin(), state.handlers.end(),
                                        [&](const auto& h) { return h->group.get() == &group; });
    if (on_group >= kMaxOomHandlersPerGroup) return ENOSPC;
    state.handlers.push_back(e);
  }
  *out = OomHandler();  // unregisters what it held, outside the lock
  out->entry_ = std::move(e);
  return 0;
}

// ---- the chain ---------------------------------------------------------------------------------

bool internal::run_oom_handlers(Group& domain, int64_t units, OomReport& report) {
  Controller& ctl = domain.controller();
  OomState& state = ctl.oom_state();
  Clock& clock = ctl.clock();
  // The domain's first, then each ancestor's, in registration order within a group.
  std::vector<std::shared_ptr<OomHandlerEntry>> chain;
  {
    LockGuard lock(state.mu);
    if (state.handlers.empty()) return false;
    for (const Group* g = &domain; g; g = g->parent())
      for (const auto& h : state.handlers)
        if (h->group.get() == g) chain.push_back(h);
  }
  const uint64_t start = clock.now_ns();
  bool resolved = false;
  for (const auto& h : chain) {
    // The names and the outcome at a report's cap: a handler's name or message of any size is
    // not copied into every report (nor under the OOM lock, where the report is published).
    OomHandlerCall call{utf8_capped(h->name, OomLog::kMaxName),
                        utf8_capped(h->group->path(), OomLog::kMaxName), 0, "passed"};
    const int64_t margin = domain.memory().margin();
    {
      LockGuard lock(state.mu);
      if (h->removed) continue;
      const uint64_t now = clock.now_ns();
      if (now - start >= kOomHandlerChainBudgetNs) break;  // the rest are skipped
      if (now < h->skip_until_ns || frames_of(h.get()) > 0) {
        ++h->stats.skipped;
        call.outcome = "skipped";
        report.handlers.push_back(std::move(call));
        continue;
      }
      ++h->running;
      ++h->stats.calls;
    }
    const OomContext ctx{domain, *h->group, units, units - std::max<int64_t>(margin, 0)};
    // The most it can have freed: what its group held when called (what it frees is charged
    // there or below). A larger claim is not believed.
    const int64_t held = std::max<int64_t>(0, h->group->memory().usage());
    HandlerFrame frame{h.get(), h->group.get(), tl_handler_frames};
    tl_handler_frames = &frame;
    const uint64_t t0 = clock.now_ns();
    bool threw = false;
    try {
      call.freed = h->fn(ctx);
    } catch (const std::exception& ex) {
      threw = true;
      try {
        constexpr std::string_view kThrew = "threw: ";
        call.outcome = std::string(kThrew) +
                       utf8_capped(ex.what(), OomLog::kMaxName - kThrew.size());
      } catch (...) {
      }
    } catch (...) {
      threw = true;
      call.outcome = "threw: unknown exception";
    }
    const uint64_t t1 = clock.now_ns();
    tl_handler_frames = frame.outer;
    const bool overclaimed = call.freed > held;
    if (overclaimed) call.freed = held;
    const bool overran = !threw && t1 - t0 > h->budget_ns;
    const bool room = domain.memory().margin() >= units;
    if (overran) call.outcome = "overran";
    if (room) call.outcome = "made_room";
    {
      LockGuard lock(state.mu);
      --h->running;
      if (call.freed > 0)  // saturating: the total stays meaningful however long it runs
        h->stats.freed_units = call.freed > INT64_MAX - h->stats.freed_units
                                   ? INT64_MAX
                                   : h->stats.freed_units + call.freed;
      if (overclaimed) ++h->stats.overclaimed;
      if (threw) ++h->stats.threw;
      if (overran) ++h->stats.overran;
      if (threw || overran) h->skip_until_ns = t1 + kOomHandlerPenaltyNs;
      if (room) ++h->stats.made_room;
    }
    state.cv.notify_all();  // an unregistering thread may wait for this call
    if (room) report.handler = call.handler;
    report.handlers.push_back(std::move(call));
    if (room) {
      report.decider = OomDecider::kHandler;
      resolved = true;
      break;
    }
  }
  // The chain's references may be the last ones (handlers unregistered meanwhile): let them go
  // here, with no lock held.
  chain.clear();
  return resolved;
}

}  // namespace memcg
