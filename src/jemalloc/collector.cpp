// The collector thread of released arenas (arena.hpp, "Lifetime").
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "internal.hpp"
#include "memcg/jemalloc/arena.hpp"

namespace memcg::jemalloc {
namespace {

// Collects released arenas on its own, so that a removed tenant's arena goes once its last block
// is freed without waiting for an unrelated Arena call: a thread started on the first arena
// queued with live blocks, that calls collect_released() every kCollectPeriod while the queue is
// not empty, then sleeps until another one is queued. Joined at process exit.
constexpr auto kCollectPeriod = std::chrono::milliseconds(100);

class Collector {
 public:
  static Collector& get() {
    static Collector c;
    return c;
  }
  void wake() noexcept {
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_ = true;
      if (!started_) {
        try {
          thread_ = std::thread([this] { run(); });
          started_ = true;
        } catch (...) {
          return;  // no thread: Arena calls still collect
        }
      }
    }
    cv_.notify_one();
  }
  ~Collector() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (!work_) {
        cv_.wait(lock, [this] { return stop_ || work_; });
        continue;
      }
      lock.unlock();
      const size_t remaining = collect_released();
      lock.lock();
      if (remaining == 0) {
        work_ = false;
        continue;
      }
      cv_.wait_for(lock, kCollectPeriod, [this] { return stop_; });
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool started_ = false;
  bool work_ = false;
  bool stop_ = false;
};

}  // namespace

void wake_collector() noexcept {
  Collector::get().wake();
}

}  // namespace memcg::jemalloc
