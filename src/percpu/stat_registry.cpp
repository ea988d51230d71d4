#include "memcg/percpu/stat_registry.hpp"

#include <utility>

namespace memcg {

StatRegistry::StatRegistry() {
  // Same order as the kIndex constants in the header, which is memory.stat's order.
  items_ = {
      {"anon", StatKind::kState},
      {"file", StatKind::kState},
      {"kernel", StatKind::kState},
      {"sock", StatKind::kState},
      {"shmem", StatKind::kState},
      {"pgscan_direct", StatKind::kEvent},
      {"pgscan_proactive", StatKind::kEvent},
      {"pgsteal_direct", StatKind::kEvent},
      {"pgsteal_proactive", StatKind::kEvent},
      {"pgfault", StatKind::kEvent},
  };
}

bool StatRegistry::valid_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
    if (!ok) return false;
  }
  return true;
}

int StatRegistry::add(std::string name, StatKind kind) {
  if (frozen_ || !valid_name(name) || find(name) >= 0) return -1;
  items_.push_back({std::move(name), kind});
  return static_cast<int>(items_.size() - 1);
}

int StatRegistry::find(std::string_view name) const noexcept {
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace memcg
