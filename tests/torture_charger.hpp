// The torture test's charger threads: every way of charging and uncharging the library offers
// (tests/torture_body.hpp puts the run together).

#pragma once

#include "torture_state.hpp"

namespace memcg::torture {

// ---- the charger ---------------------------------------------------------------------------------

inline void charger(Shared& sh, int id) {
  const Config& cfg = sh.cfg;
  Controller& ctl = sh.ctl;
  std::mt19937_64 rng(cfg.seed * 1000003 + 11 + id);
  const int me = sh.progress.slot("charger");
  auto& op = sh.progress.op[me];

  struct Units {
    GroupRef g;
    int64_t n;
    int kind;
    bool object;  // bytes through the object layer
  };
  struct Pmr {
    std::unique_ptr<MemoryResource> mr;
    std::unique_ptr<std::pmr::vector<char>> v;  // declared after mr: destroyed first
  };
  using AVec = std::vector<uint64_t, Allocator<uint64_t>>;
  constexpr size_t kCap = 48;
  // Bookkeeping is reserved before any attachment: under the hook a push_back that grows would
  // be charged, and could fail, after the charge it records was made.
  std::vector<Units> units;
  std::vector<ChargeHandle> handles;
  std::vector<Pmr> pmrs;
  std::vector<std::unique_ptr<AVec>> avecs;
  std::vector<std::shared_ptr<Slot>> slots;
  std::vector<std::shared_ptr<Query>> queries;
  std::vector<std::unique_ptr<LruCache>> caches;
  std::vector<std::shared_ptr<Box>> boxes;
  std::vector<std::pmr::string> tagged_strings;
  std::vector<std::unique_ptr<std::string>> plain;  // hook: plain allocations while attached
  units.reserve(kCap + 1);
  handles.reserve(kCap + 1);
  pmrs.reserve(kCap + 1);
  avecs.reserve(kCap + 1);
  slots.reserve(kCap + 1);
  queries.reserve(kCap + 1);
  caches.reserve(kCap + 1);
  boxes.reserve(kCap + 1);
  plain.reserve(kCap + 1);
  MemoryResource tagged(ctl);  // charges the allocating thread's group
  tagged_strings.reserve(kCap + 1);

  auto drop_random = [&](auto& v) {
    if (v.empty()) return;
    std::swap(v[rng() % v.size()], v.back());
    v.pop_back();
  };
  auto drop_units = [&](size_t i) {
    Units& u = units[i];
    if (u.object)
      uncharge_object(*u.g, static_cast<uint64_t>(u.n), u.kind);
    else if (chance(rng, 50))
      uncharge(*u.g, u.n, u.kind);
    else
      uncharge_direct(*u.g, u.n, u.kind);
    std::swap(units[i], units.back());
    units.pop_back();
  };
  auto drop_slot = [&](size_t i) {
    slots[i]->m.reset();
    std::swap(slots[i], slots.back());
    slots.pop_back();
  };
  auto drop_box = [&](size_t i) {
    std::shared_ptr<Box> b = boxes[i];
    {
      std::lock_guard lock(sh.boxes_mu);
      for (auto& s : sh.boxes)
        if (s == b) s.reset();
    }
    b->unregister();
    // A reclaimer that unregistered itself is not waited for by reset(), and another one may be
    // in the middle of resetting this registration: the box goes only once nobody uses it, and
    // never from inside a reclaim().
    boxes[i].reset();
    while (b.use_count() > 1 || b->r.inflight.load() > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    b.reset();
    std::swap(boxes[i], boxes.back());
    boxes.pop_back();
  };

  while (sh.running()) {
    GroupRef g;
    try {
      op = "lookup";
      g = sh.lookup(rng);
    } catch (const std::bad_alloc&) {
      // Under the hook: lookup returns nothing allocated, so nothing of it may be charged.
      sh.fail(__LINE__, "Controller::lookup threw std::bad_alloc on a thread attached to a full group");
    }
    if (!g) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    const int kind = random_kind(rng, sh);
    const uint32_t flags = random_flags(rng);
    // Under the hook any allocation of an attached thread may be refused; bookkeeping is
    // reserved, so a refusal never loses track of a charge.
    try {
    switch (rng() % 21) {
      case 0:
      case 1:  // units
        if (units.size() < kCap) {
          op = "try_charge";
          const int64_t n = pick(rng, 1, 64);
          if (charged(try_charge(*g, n, flags, kind))) {
            units.push_back({g, n, kind, false});
            sh.charges.fetch_add(1, std::memory_order_relaxed);
          } else {
            sh.refused.fetch_add(1, std::memory_order_relaxed);
          }
        } else {
          op = "uncharge";
          drop_units(rng() % units.size());
        }
        break;
      case 2:  // bytes, rounded to units both ways
        if (units.size() < kCap) {
          op = "try_charge_bytes";
          const uint64_t b = static_cast<uint64_t>(pick(rng, 1, 200000));
          if (charged(try_charge_bytes(*g, b, flags, kind))) {
            op = "uncharge_bytes";
            if (chance(rng, 80)) std::this_thread::yield();
            uncharge_bytes(*g, b, kind);
          }
        }
        break;
      case 3:  // object layer
        if (units.size() < kCap) {
          op = "try_charge_object";
          const int64_t b = pick(rng, 1, 9000);
          if (charged(try_charge_object(*g, static_cast<uint64_t>(b), flags, kind)))
            units.push_back({g, b, kind, true});
        } else {
          op = "uncharge_object";
          drop_units(rng() % units.size());
        }
        break;
      case 4:  // ChargeHandle and charge_or_throw
        op = "ChargeHandle";
        if (handles.size() < kCap) {
          ChargeHandle h(*g, static_cast<uint64_t>(pick(rng, 1, 100000)), flags, kind);
          if (h.ok()) handles.push_back(std::move(h));
        } else {
          drop_random(handles);
        }
        op = "charge_or_throw";
        try {
          const uint64_t b = static_cast<uint64_t>(pick(rng, 1, 50000));
          charge_or_throw(*g, b, flags, kind);
          uncharge_bytes(*g, b, kind);
        } catch (const std::bad_alloc&) {
          sh.refused.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      case 5:  // pmr containers over a group-bound resource
        op = "pmr";
        if (pmrs.size() < kCap / 4 && chance(rng, 60)) {
          try {
            Pmr p;
            p.mr = std::make_unique<MemoryResource>(*g, MemoryResourceOptions{kind, flags});
            p.v = std::make_unique<std::pmr::vector<char>>(p.mr.get());
            p.v->resize(static_cast<size_t>(pick(rng, 1, 20000)));
            pmrs.push_back(std::move(p));
          } catch (const std::bad_alloc&) {
            sh.refused.fetch_add(1, std::memory_order_relaxed);
          }
        } else if (!pmrs.empty()) {
          Pmr& p = pmrs[rng() % pmrs.size()];
          try {
            if (chance(rng, 50))
              p.v->resize(static_cast<size_t>(pick(rng, 0, 40000)));
            else
              p.v->shrink_to_fit();
          } catch (const std::bad_alloc&) {
          }
          if (chance(rng, 30)) drop_random(pmrs);
        }
        break;
      case 6:  // STL allocator
        op = "Allocator";
        if (avecs.size() < kCap / 4 && chance(rng, 60)) {
          try {
            auto v = std::make_unique<AVec>(Allocator<uint64_t>(*g, kind, flags));
            v->resize(static_cast<size_t>(pick(rng, 1, 3000)));
            avecs.push_back(std::move(v));
          } catch (const std::bad_alloc&) {
            sh.refused.fetch_add(1, std::memory_order_relaxed);
          }
        } else {
          drop_random(avecs);
        }
        break;
      case 7:
      case 8:  // members
        if (!cfg.on("members")) break;
        if (slots.size() < 6 && chance(rng, 40)) {
          op = "Member()";
          auto s = std::make_shared<Slot>();
          s->owner = std::this_thread::get_id();
          s->behaviour = static_cast<int>(rng() % 4);
          std::weak_ptr<Slot> weak = s;
          try {
            s->m = std::make_unique<Member>(
                *g, "m",
                [weak, &sh](Member& victim) {
                  sh.kills.fetch_add(1, std::memory_order_relaxed);
                  // Local: the member (and this callback) may be destroyed below.
                  const std::shared_ptr<Slot> slot = weak.lock();
                  if (!slot) return;
                  switch (slot->behaviour) {
                    case 0:  // release synchronously, from whichever thread
                      victim.uncharge(victim.charged());
                      return;
                    case 1:  // release later, on the owner's thread
                      slot->release_requested.store(true);
                      return;
                    case 2:  // destroy the member, maybe from inside its own charge
                      if (sh.cfg.on("killdestroy") &&
                          std::this_thread::get_id() == slot->owner) {
                        slot->m.reset();
                        return;
                      }
                      slot->release_requested.store(true);
                      return;
                    default:
                      if (sh.cfg.on("killthrow")) throw std::runtime_error("torture: kill throws");
                      slot->release_requested.store(true);
                      return;
                  }
                },
                static_cast<int>(pick(rng, -1000, 1000)));
            slots.push_back(std::move(s));
          } catch (const std::invalid_argument&) {
            // The group went offline meanwhile.
          }
        } else if (!slots.empty()) {
          const size_t i = rng() % slots.size();
          Slot& s = *slots[i];
          if (!s.m || s.release_requested.load() || chance(rng, 10)) {
            op = "~Member";
            drop_slot(i);
          } else if (chance(rng, 60)) {
            op = "Member::charge";
            // Any outcome is legal with random flags; the run checks the counters at the end.
            static_cast<void>(s.m->charge(pick(rng, 1, 64), random_flags(rng)));
            // s.m may have been destroyed by its own kill callback during the charge.
          } else if (chance(rng, 70)) {
            op = "Member::uncharge";
            s.m->uncharge(pick(rng, 1, 64));
          } else {
            s.m->set_score_adj(static_cast<int>(pick(rng, -1100, 1100)));
          }
        }
        break;
      case 9:  // queries on worker threads; short-lived threads that charge and exit
        if (!cfg.on("query")) break;
        if (queries.size() < 2 && chance(rng, 30)) {
          op = "spawn query";
          auto q = std::make_shared<Query>();
          const bool oneshot = chance(rng, 40);
          q->th = std::thread(query_worker, std::ref(sh), std::weak_ptr<Query>(q), g, rng(),
                              oneshot);
          q->ready.store(true);
          queries.push_back(std::move(q));
          sh.queries.fetch_add(1, std::memory_order_relaxed);
        } else if (!queries.empty() && (queries.size() >= 2 || chance(rng, 30))) {
          op = "cancel+join query";
          const size_t i = rng() % queries.size();
          queries[i]->finish();
          std::swap(queries[i], queries.back());
          queries.pop_back();
        }
        break;
      case 10:  // caches
        if (!cfg.on("lru")) break;
        if (caches.size() < 3 && chance(rng, 30)) {
          op = "LruCache()";
          try {
            caches.push_back(std::make_unique<LruCache>(*g, "cache", static_cast<int>(rng() % 60)));
          } catch (const std::exception&) {
          }
        } else if (!caches.empty()) {
          LruCache& c = *caches[rng() % caches.size()];
          if (chance(rng, 60)) {
            op = "LruCache::grow";
            // One charge per unit, each may be throttled above memory.high: keep it short.
            c.grow(pick(rng, 1, 16), random_flags(rng));
          } else if (chance(rng, 70)) {
            op = "LruCache::shrink";
            c.shrink(pick(rng, 1, 64));
          } else {
            op = "~LruCache";
            drop_random(caches);
          }
        }
        break;
      case 11:  // misbehaving reclaimers
        if (!cfg.on("evil")) break;
        if (boxes.size() < 3 && chance(rng, 30)) {
          op = "Evil register";
          std::shared_ptr<Box> b;
          try {
            b = std::make_shared<Box>(sh, *g, rng());
            b->reg = ReclaimerRegistration(*g, b->r);
          } catch (const std::exception&) {
            break;
          }
          {
            std::lock_guard lock(sh.boxes_mu);
            sh.boxes[rng() % sh.boxes.size()] = b;  // may push out another: it stays registered
          }
          boxes.push_back(std::move(b));
        } else if (!boxes.empty()) {
          const size_t i = rng() % boxes.size();
          if (chance(rng, 60)) {
            op = "Evil grow";
            boxes[i]->r.grow(pick(rng, 1, 64), random_flags(rng));
          } else if (chance(rng, 60)) {
            op = "Evil shrink";
            boxes[i]->r.shrink(pick(rng, 1, 64));
          } else {
            op = "Evil unregister";
            drop_box(i);
          }
        }
        break;
      case 12:  // attach, move, detach; charge the current group
        if (!cfg.on("attach")) break;
        sh.attaches.fetch_add(1, std::memory_order_relaxed);
        if (chance(rng, 40)) {
          op = "attach";
          (void)attach_current_thread(*g);  // ENOENT when it went offline
        } else if (chance(rng, 30)) {
          op = "detach";
          detach_current_thread();
        } else {
          op = "ScopedAttach";
          ScopedAttach a(*g);
          if (a.ok()) {
            ChargeHandle h = charge_current(ctl, static_cast<uint64_t>(pick(rng, 1, 30000)), flags);
            if (charged(try_charge_current(ctl, 4096, flags))) uncharge(current_group(ctl), 1);
          }
        }
        break;
      case 13:  // the tagged resource, charging whichever group the thread is in
        op = "tagged pmr";
        if (tagged_strings.size() < kCap && chance(rng, 60)) {
          try {
            tagged_strings.emplace_back(static_cast<size_t>(pick(rng, 20, 5000)), 'x', &tagged);
          } catch (const std::bad_alloc&) {
          }
        } else {
          drop_random(tagged_strings);
        }
        break;
      case 14:
        op = "handle_pending_high";
        handle_pending_high();
        if (chance(rng, 30)) {
          op = "MemStall";
          MemStall stall(*g);
          std::this_thread::sleep_for(std::chrono::microseconds(pick(rng, 10, 300)));
        }
        break;
      case 15:  // counts that cannot be represented must be refused
        if (!cfg.on("huge")) break;
        op = "huge charge";
        // An accepted one is reverted at once, so that the final accounting still means something.
        if (charged(try_charge(*g, INT64_MAX, kNoFail))) {
          sh.fail(__LINE__, "try_charge(INT64_MAX, kNoFail) was accepted");
          uncharge_direct(*g, INT64_MAX);
        }
        if (charged(try_charge_bytes(*g, UINT64_MAX, kNoFail))) {
          sh.fail(__LINE__, "try_charge_bytes(UINT64_MAX, kNoFail) was accepted");
          uncharge_direct(*g, ctl.to_units_ceil(UINT64_MAX));
        }
        break;
      case 18:  // stat kinds out of range: refused, or charged and uncharged symmetrically
        if (!cfg.on("badkind")) break;
        {
          const int bad_kinds[] = {-2, static_cast<int>(ctl.stats().size()), ObjStock::kMaxKinds,
                                   10000, INT32_MAX, INT32_MIN};
          const int bad = bad_kinds[rng() % std::size(bad_kinds)];
          op = "bad kind: try_charge";
          if (charged(try_charge(*g, 1, flags, bad))) uncharge(*g, 1, bad);
          op = "bad kind: object";
          if (charged(try_charge_object(*g, 100, flags, bad))) uncharge_object(*g, 100, bad);
          op = "bad kind: bytes";
          if (charged(try_charge_bytes(*g, 5000, flags, bad))) uncharge_bytes(*g, 5000, bad);
          op = "bad kind: pmr";
          // A resource is configured once: a kind the controller does not have is refused there.
          bool refused_kind = false;
          try {
            MemoryResource mr(*g, MemoryResourceOptions{bad, flags});
          } catch (const std::invalid_argument&) {
            refused_kind = true;
          }
          if (!refused_kind) sh.fail(__LINE__, "MemoryResource accepted stat kind %d", bad);
        }
        break;
      case 16:  // hook: plain allocations while attached
        if (!cfg.hook || !cfg.on("hookalloc")) break;
        op = "hook alloc";
        try {
          if (plain.size() < kCap && chance(rng, 60)) {
            auto s = std::make_unique<std::string>(static_cast<size_t>(pick(rng, 1, 20000)), 'y');
            std::vector<int> tmp(static_cast<size_t>(pick(rng, 1, 2000)));
            int* raw = new int[static_cast<size_t>(pick(rng, 1, 500))];
            delete[] raw;
            plain.push_back(std::move(s));
          } else {
            drop_random(plain);
          }
        } catch (const std::bad_alloc&) {
          sh.refused.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      case 17:  // hook: library calls from an attached (possibly full) thread
        if (!cfg.hook || !cfg.on("hookcalls")) break;
        try {  // what these return is the caller's memory: a refusal is a fair answer
          std::string s;
          op = "hook read memory.stat";
          (void)read_file(*g, "memory.stat", &s);
          op = "hook prometheus";
          if (chance(rng, 10)) (void)render_prometheus(ctl);
        } catch (const std::bad_alloc&) {
          sh.refused.fetch_add(1, std::memory_order_relaxed);
        }
        try {  // these return nothing allocated: none of their memory may be refused
          op = "hook lookup";
          (void)ctl.lookup(kPaths[rng() % kPaths.size()]);
          op = "hook create";
          (void)ctl.create(kPaths[rng() % kPaths.size()]);
          op = "hook remove";
          (void)ctl.remove(kPaths[rng() % kPaths.size()]);
        } catch (const std::bad_alloc&) {
          sh.fail(__LINE__, "%s threw std::bad_alloc on an attached thread", op.load());
        }
        break;
      default: {  // releases, so that the population stays bounded
        op = "release";
        if (!units.empty()) drop_units(rng() % units.size());
        if (!handles.empty() && chance(rng, 50)) handles[rng() % handles.size()].release();
        for (size_t i = 0; i < slots.size(); ++i)
          if (slots[i]->release_requested.load() && slots[i]->m) slots[i]->m->uncharge(INT64_MAX);
        break;
      }
    }
    } catch (const std::bad_alloc&) {
      sh.refused.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Everything goes, the group references last.
  op = "teardown";
  detach_current_thread();
  for (auto& q : queries) q->finish();
  queries.clear();
  while (!units.empty()) drop_units(units.size() - 1);
  handles.clear();
  pmrs.clear();
  avecs.clear();
  tagged_strings.clear();
  plain.clear();
  while (!slots.empty()) drop_slot(slots.size() - 1);
  caches.clear();
  while (!boxes.empty()) drop_box(boxes.size() - 1);
  op = "done";
}

}  // namespace memcg::torture
