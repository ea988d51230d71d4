// Shared by the stock and CPU-helper tests: a fake StockOwner that counts what it gets back,
// and a fixture that pins the test thread to one CPU.

#pragma once

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "memcg/percpu/internal/stock.hpp"

namespace memcg::testing_stock {

// Counts what the stock gives back and the references it holds.
class FakeOwner final : public StockOwner {
 public:
  explicit FakeOwner(const FakeOwner* parent = nullptr) : parent_(parent) {}

  void stock_uncharge(int64_t units) noexcept override {
    if (units <= 0) errors.fetch_add(1);
    given_back.fetch_add(units);
  }
  void stock_stat(int kind, int64_t units) noexcept override {
    if (kind < 0 || kind >= kKinds || units == 0) errors.fetch_add(1);
    else stat[kind].fetch_add(units);
  }
  void stock_get() noexcept override { refs.fetch_add(1); }
  void stock_put() noexcept override {
    if (refs.fetch_sub(1) <= 0) errors.fetch_add(1);
  }
  bool stock_is_within(const StockOwner* root) const noexcept override {
    for (const FakeOwner* p = this; p != nullptr; p = p->parent_) {
      if (p == root) return true;
    }
    return false;
  }

  static constexpr int kKinds = 300;
  std::atomic<int64_t> given_back{0};
  std::atomic<int64_t> stat[kKinds] = {};  // what the stock passed on, per kind
  std::atomic<int> refs{0};
  std::atomic<int> errors{0};

 private:
  const FakeOwner* parent_;
};

inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// The CPUs the process may use, read before any test narrows the affinity.
inline const std::vector<int> kCpus = allowed_cpus();

inline bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Pins the test thread to one CPU (so that every call uses one shard) and restores the
// original affinity afterwards.
class PinnedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sched_getaffinity(0, sizeof saved_, &saved_), 0);
    cpus_ = kCpus;
    ASSERT_FALSE(cpus_.empty());
    ASSERT_TRUE(pin_to(cpus_[0]));
  }
  void TearDown() override { pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_); }

  cpu_set_t saved_;
  std::vector<int> cpus_;
};

}  // namespace memcg::testing_stock
