// Open files and their group's removal (core/internal/file_node.hpp).
#include "memcg/core/tree/internal/file_node.hpp"

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "memcg/base/internal/lock.hpp"

namespace memcg::internal {

struct FileAccess {
  static std::mutex& mutex(Group& g) noexcept { return g.files_mutex_; }
  static std::vector<std::shared_ptr<FileNode>>& files(Group& g) noexcept { return g.files_; }
  static void hold(FileNode& n, Group& g) noexcept {
    g.get();
    n.held_.store(&g, std::memory_order_release);
  }
  static Group* take(FileNode& n) noexcept {
    return n.held_.exchange(nullptr, std::memory_order_acq_rel);
  }
  static void deactivate(FileNode& n) noexcept {
    if (n.state_.fetch_or(FileNode::kDeactivated, std::memory_order_acq_rel) == 0) n.let_go();
  }
  static void detach(FileNode& n, Group& g) noexcept { n.detach(g); }
};

int attach_file_node(Group& group, const std::shared_ptr<FileNode>& node) {
  LockGuard lock(FileAccess::mutex(group));
  // Under the lock that the removal takes after taking the group offline: a node linked here
  // is deactivated by it.
  if (!group.is_online()) return ENOENT;
  FileAccess::files(group).push_back(node);
  FileAccess::hold(*node, group);
  return 0;
}

void close_file_node(FileNode& node) noexcept {
  // Null when the removal took it (it unlinked the node first) or an operation let it go.
  Group* g = FileAccess::take(node);
  if (!g) return;
  {
    LockGuard lock(FileAccess::mutex(*g));
    auto& v = FileAccess::files(*g);
    v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& p) { return p.get() == &node; }),
            v.end());
  }
  FileAccess::detach(node, *g);
  g->put();
}

void files_group_removed(Group& group) noexcept {
  std::vector<std::shared_ptr<FileNode>> nodes;
  {
    LockGuard lock(FileAccess::mutex(group));
    nodes.swap(FileAccess::files(group));
  }
  // Outside the lock: letting go runs the nodes' detach (memory.peak's watcher takes the
  // group's knob lock). The caller still holds the group (the tree's reference).
  for (const auto& n : nodes) FileAccess::deactivate(*n);
}

}  // namespace memcg::internal
