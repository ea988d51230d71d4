#include "memcg/base/events.hpp"

namespace memcg {

const char* event_name(Event e) noexcept {
  switch (e) {
    case Event::kLow:
      return "low";
    case Event::kHigh:
      return "high";
    case Event::kMax:
      return "max";
    case Event::kOom:
      return "oom";
    case Event::kOomKill:
      return "oom_kill";
    case Event::kOomGroupKill:
      return "oom_group_kill";
    case Event::kWait:
      return "wait";
    case Event::kPreempt:
      return "preempt";
    case Event::kOomHandled:
      return "oom_handled";
    case Event::kOomSpill:
      return "oom_spill";
  }
  return "?";
}

std::string EventCounters::format() const {
  std::string out;
  for (int i = 0; i < kNumEvents; ++i) {
    const Event e = static_cast<Event>(i);
    out += event_name(e);
    out += ' ';
    out += std::to_string(get(e));
    out += '\n';
  }
  return out;
}

}  // namespace memcg
