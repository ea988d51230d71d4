#include "sim_clock.hpp"

#include <algorithm>
#include <thread>

namespace memcgctl {

struct SimClock::Lane {
  uint64_t at = 0;   // virtual time from which it may run
  uint64_t seq = 0;  // when it yielded (ties between lanes due at the same time)
  bool done = false;
  bool go = false;   // its turn
  memcg::ClockWaiter* waiting = nullptr;  // parked in wait_until on this waiter
  std::condition_variable cv;
};

namespace {
thread_local void* tl_lane = nullptr;  // the SimClock::Lane of this thread
}  // namespace

SimClock::SimClock() = default;
SimClock::~SimClock() = default;

bool SimClock::in_lane() noexcept { return tl_lane != nullptr; }

uint64_t SimClock::later(uint64_t ns) const noexcept { return after(now_ns(), ns); }

void SimClock::advance(uint64_t ns) noexcept {
  // Only one thread moves time at a time (the runner between steps, or the scheduler).
  now_.store(later(ns), std::memory_order_release);
}

void SimClock::sleep_ns(uint64_t ns) noexcept {
  slept_.fetch_add(ns, std::memory_order_relaxed);
  if (on_block_ && ns > 0) on_block_();
  if (in_lane()) {
    yield_for(ns);
  } else {
    advance(ns);
  }
}

void SimClock::yield_for(uint64_t ns) {
  Lane& me = *static_cast<Lane*>(tl_lane);
  std::unique_lock<std::mutex> l(mu_);
  me.at = later(ns);
  park(me, l);
}

void SimClock::park(Lane& me, std::unique_lock<std::mutex>& l) {
  me.seq = seq_++;
  yielded_ = true;
  scheduler_cv_.notify_one();
  me.cv.wait(l, [&] { return me.go; });
  me.go = false;
}

bool SimClock::wait_until(memcg::ClockWaiter& w, std::unique_lock<std::mutex>& lock,
                          uint64_t deadline_ns, const std::stop_token& stop) {
  if (!w.woken && !stop.stop_requested()) {
    if (!in_lane()) {
      if (deadline_ns > now_ns()) advance(deadline_ns - now_ns());
    } else {
      Lane& me = *static_cast<Lane*>(tl_lane);
      std::unique_lock<std::mutex> l(mu_);
      me.waiting = &w;
      w.clock_data = &me;
      me.at = std::max(deadline_ns, now_ns());
      // The library's lock is free while parked: the lanes that run may need it to wake us.
      lock.unlock();
      park(me, l);
      me.waiting = nullptr;
      w.clock_data = nullptr;
      l.unlock();
      lock.lock();
    }
  }
  const bool woken = w.woken;
  w.woken = false;
  return woken;
}

void SimClock::wake(memcg::ClockWaiter& w) noexcept {
  w.woken = true;
  w.cv.notify_one();
  if (w.clock_data == nullptr) return;
  // A parked lane: due now, after the lanes that yielded before this wake.
  std::lock_guard<std::mutex> l(mu_);
  Lane& lane = *static_cast<Lane*>(w.clock_data);
  if (lane.waiting != &w) return;
  lane.at = now_ns();
  lane.seq = seq_++;
}

void SimClock::run_lanes(size_t n, const std::function<void(size_t)>& body,
                         const std::function<void()>& on_advance) {
  std::unique_lock<std::mutex> l(mu_);
  lanes_.clear();
  for (size_t i = 0; i < n; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->at = now_ns();
    lanes_.back()->seq = seq_++;
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Lane* me = lanes_[i].get();
    threads.emplace_back([this, me, i, &body] {
      tl_lane = me;
      {
        std::unique_lock<std::mutex> ll(mu_);
        me->cv.wait(ll, [&] { return me->go; });
        me->go = false;
      }
      body(i);
      tl_lane = nullptr;
      std::lock_guard<std::mutex> ll(mu_);
      me->done = true;
      yielded_ = true;
      scheduler_cv_.notify_one();
    });
  }
  for (;;) {
    Lane* next = nullptr;
    for (const auto& lane : lanes_) {
      if (lane->done) continue;
      if (!next || lane->at < next->at || (lane->at == next->at && lane->seq < next->seq))
        next = lane.get();
    }
    if (next == nullptr) break;
    if (next->at > now_ns()) {
      // Every lane is parked: time moves to the first one due. What runs on the clock's
      // advance may wake a lane (due now, then): choose again afterwards.
      const uint64_t to = next->at;
      l.unlock();
      advance(to - now_ns());
      on_advance();
      l.lock();
      continue;
    }
    yielded_ = false;
    next->go = true;
    next->cv.notify_one();
    scheduler_cv_.wait(l, [&] { return yielded_; });
  }
  l.unlock();
  for (std::thread& t : threads) t.join();
  l.lock();
  lanes_.clear();
}

}  // namespace memcgctl
