// Open files of a removed group (files.hpp): the removal deactivates them, like the kernel's
// kernfs nodes on rmdir. Reads and writes then return ENODEV, the file no longer keeps the group
// dying, and closing it later is fine, even after the controller is gone. A memory.pressure
// trigger still gets its one removal notice. A read or write racing the removal either completes
// on the group or returns ENODEV.
//
// Run under the asan and tsan presets too (the race loop).
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"

#include "manual_controller.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

constexpr uint64_t kSec = 1'000'000'000;

// A text each writable file accepts.
std::string valid_text(const std::string& name) {
  if (name == "memory.pressure") return "some 150000 1000000";
  if (name == "memory.oom.group" || name == "memory.wait.preempt") return "0";
  if (name == "memory.wait.priority") return "normal";
  if (name == "memory.reclaim") return "0";
  if (name == "memory.oom.order") return "auto";
  if (name == "memory.admit.growth") return "auto";
  if (name == "memory.admit.weight") return "100";
  return "max";
}

TEST(FileRemoval, EveryOpenFileLetsGoOfItsRemovedGroup) {
  testing::ManualController s(kSec);
  GroupRef g = s.make("g");
  const std::vector<std::string> names = file_names(*g);
  ASSERT_GE(names.size(), 10u);
  std::vector<std::unique_ptr<File>> files;
  for (const std::string& name : names) {
    std::unique_ptr<File> f;
    ASSERT_EQ(open_file(*g, name, &f), 0) << name;
    EXPECT_EQ(f->group(), g.get());
    std::string text;
    if (f->readable()) {
      EXPECT_EQ(f->read(&text), 0) << name;
    }
    // A write that leaves state behind where the file has some: memory.peak's watcher,
    // memory.pressure's trigger.
    if (f->writable()) {
      EXPECT_EQ(f->write(valid_text(name)), 0) << name;
    }
    files.push_back(std::move(f));
  }
  ASSERT_EQ(s.ctl.remove(*g), 0);
  g = GroupRef();
  EXPECT_EQ(s.ctl.nr_dying(), 0u) << "an open file kept its removed group dying";
  for (const auto& f : files) {
    EXPECT_EQ(f->group(), nullptr) << f->name();
    std::string text = "unchanged";
    EXPECT_EQ(f->read(&text), ENODEV) << f->name();
    EXPECT_EQ(text, "unchanged") << f->name();
    EXPECT_EQ(f->write(valid_text(f->name())), ENODEV) << f->name();
    EXPECT_EQ(f->write("garbage"), ENODEV) << f->name();
  }
  files.clear();  // closing them afterwards is fine
  EXPECT_EQ(s.ctl.nr_dying(), 0u);
}

// The trigger of an open memory.pressure file is told once (its eventfd), then the group goes
// although the file is still open.
TEST(FileRemoval, PressureFileTriggerIsToldOnceThenTheGroupGoes) {
  testing::ManualController s(kSec);
  GroupRef g = s.make("g");
  std::unique_ptr<File> f;
  ASSERT_EQ(open_file(*g, "memory.pressure", &f), 0);
  ASSERT_EQ(f->write("some 1000 1000000"), 0);
  const int efd = pressure_file_eventfd(*f);
  ASSERT_GE(efd, 0);
  ASSERT_EQ(s.ctl.remove(*g), 0);
  g = GroupRef();
  EXPECT_EQ(s.ctl.nr_dying(), 0u) << "the open memory.pressure file kept its group dying";
  pollfd p{efd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 0), 1) << "the removal was not signalled";
  uint64_t n = 0;
  EXPECT_EQ(::read(efd, &n, sizeof n), static_cast<ssize_t>(sizeof n));
  EXPECT_EQ(n, 1u);
  s.ctl.tick();
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "an event after the removal notice";
  std::string text;
  EXPECT_EQ(f->read(&text), ENODEV);
  EXPECT_EQ(f->write("some 1000 1000000"), ENODEV);
  EXPECT_EQ(pressure_file_eventfd(*f), efd);  // the file's until it is closed
  f.reset();
}

TEST(FileRemoval, OpeningAFileOfARemovedGroupIsEnoent) {
  testing::ManualController s(kSec);
  GroupRef g = s.make("g");
  ASSERT_EQ(s.ctl.remove(*g), 0);
  for (const char* name : {"memory.current", "memory.max", "memory.peak", "memory.pressure"}) {
    std::unique_ptr<File> f;
    EXPECT_EQ(open_file(*g, name, &f), ENOENT) << name;
    EXPECT_FALSE(f) << name;
    std::string text;
    EXPECT_EQ(read_file(*g, name, &text), ENOENT) << name;
  }
  g = GroupRef();
  EXPECT_EQ(s.ctl.nr_dying(), 0u);
}

// The files of a removed group hold nothing of it: they may be closed after their controller
// is gone (its checked lifetimes find nothing left).
TEST(FileRemoval, FilesOfARemovedGroupOutliveTheController) {
  ManualClock clock(kSec);
  Options o = testing::ManualController::options(&clock);
  o.check_lifetimes = true;
  auto ctl = std::make_unique<Controller>(o);
  std::vector<std::unique_ptr<File>> files;
  {
    GroupRef g;
    ASSERT_EQ(ctl->create("g", &g), 0);
    for (const char* name : {"memory.current", "memory.peak", "memory.pressure"}) {
      std::unique_ptr<File> f;
      ASSERT_EQ(open_file(*g, name, &f), 0);
      ASSERT_EQ(f->write(valid_text(name)), name == std::string("memory.current") ? EACCES : 0);
      files.push_back(std::move(f));
    }
    ASSERT_EQ(ctl->remove(*g), 0);
  }
  EXPECT_EQ(ctl->nr_dying(), 0u);
  ctl.reset();  // aborts (checked lifetimes) if a file still held the group
  files.clear();
}

// Reads and writes on one thread, the removal on another, 200 rounds over the kinds of file:
// every call before the removal took effect returns 0, every one after it ENODEV (never 0
// again), and the group goes once the operations are over.
TEST(FileRemoval, ReadsAndWritesRaceTheRemoval) {
  testing::Watchdog wd("ReadsAndWritesRaceTheRemoval", std::chrono::seconds(60));
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  const char* const kinds[] = {"memory.current", "memory.max", "memory.peak", "memory.pressure",
                               "memory.stat"};
  for (int round = 0; round < 200; ++round) {
    const std::string name = kinds[round % 5];
    GroupRef g;
    ASSERT_EQ(ctl.create("g", &g), 0);
    std::unique_ptr<File> f;
    ASSERT_EQ(open_file(*g, name, &f), 0);
    std::atomic<bool> started{false};
    int ok_after_enodev = 0;
    int bad = 0;
    int calls = 0;
    std::thread user([&] {
      bool gone = false;
      std::string text;
      // Until the removal shows (the watchdog bounds it).
      for (int i = 0; !gone; ++i) {
        const bool write = (i % 2 == 1) && name != "memory.current" && name != "memory.stat";
        const int err = write ? f->write(name == "memory.pressure" ? "x" : valid_text(name))
                              : f->read(&text);
        ++calls;
        started.store(true, std::memory_order_relaxed);
        // memory.pressure rejects the bad trigger text with EINVAL while the group lives.
        const int ok = (write && name == "memory.pressure") ? EINVAL : 0;
        if (err == ENODEV) {
          gone = true;
        } else if (err != ok) {
          ++bad;
        }
      }
      // Once ENODEV, always ENODEV.
      for (int i = 0; i < 3; ++i)
        if (f->read(&text) != ENODEV) ++ok_after_enodev;
    });
    while (!started.load(std::memory_order_relaxed)) std::this_thread::yield();
    if (round % 3 != 0) std::this_thread::sleep_for(std::chrono::microseconds(round % 50));
    ASSERT_EQ(ctl.remove(*g), 0);
    g = GroupRef();
    user.join();
    EXPECT_EQ(bad, 0) << name << " round " << round;
    EXPECT_EQ(ok_after_enodev, 0) << name << " round " << round;
    EXPECT_GT(calls, 0) << name;
    EXPECT_EQ(ctl.nr_dying(), 0u) << name << " round " << round;
    f.reset();
  }
}

}  // namespace
}  // namespace memcg
