// An open File's hold on its group, and its deactivation when the group is removed (files.hpp):
// the kernel's kernfs node deactivation on rmdir. Internal header.
//
// The node holds the file's reference to its group and counts the operations running on it in
// one atomic word, with a bit for "deactivated". An operation enters (one fetch_add: refused,
// ENODEV, once the bit is set) and leaves (one fetch_sub). The removal unlinks the group's
// nodes under the group's file lock, sets the bit outside it, and whoever brings the word to
// "deactivated, nothing running" (the removal, or the last operation to leave) lets the group
// go. So an operation that entered before the removal completes on the live group, one that
// comes after gets ENODEV, and nobody waits: the removal never blocks on a file's user (who may
// be the remover itself, inside a callback a write started).
#ifndef MEMCG_CORE_INTERNAL_FILE_NODE_HPP_
#define MEMCG_CORE_INTERNAL_FILE_NODE_HPP_

#include <atomic>
#include <cstdint>
#include <memory>

#include "memcg/core/tree/group.hpp"

namespace memcg::internal {

class FileNode {
 public:
  FileNode() = default;
  FileNode(const FileNode&) = delete;
  FileNode& operator=(const FileNode&) = delete;
  virtual ~FileNode() = default;

  // The group while the file holds it; null once it let go (removed, or closed).
  Group* group() const noexcept { return held_.load(std::memory_order_acquire); }

  // Opens an operation: true, with group() valid until leave(); false (the group was removed:
  // ENODEV) with nothing to leave.
  bool enter() noexcept {
    if (state_.fetch_add(1, std::memory_order_acquire) & kDeactivated) {
      leave();
      return false;
    }
    return true;
  }
  void leave() noexcept {
    if (state_.fetch_sub(1, std::memory_order_acq_rel) == kDeactivated + 1) let_go();
  }

 protected:
  // Runs before the file's reference goes, on the thread that lets it go, with nothing
  // running on the node: per-open-file state registered with the group leaves it here.
  virtual void detach(Group&) noexcept {}

 private:
  friend struct FileAccess;
  static constexpr uint64_t kDeactivated = uint64_t{1} << 63;

  void let_go() noexcept {
    if (Group* g = held_.exchange(nullptr, std::memory_order_acq_rel)) {
      detach(*g);
      g->put();
    }
  }

  std::atomic<uint64_t> state_{0};  // operations running | kDeactivated
  std::atomic<Group*> held_{nullptr};
};

// Links `node` to `group`, taking the file's reference. ENOENT when the group was removed.
// REQUIRES: called once per node, the caller holds `group`.
[[nodiscard]] int attach_file_node(Group& group, const std::shared_ptr<FileNode>& node);
// The file's close: unlinks the node and lets go of the group, unless the removal did.
void close_file_node(FileNode& node) noexcept;
// Controller::remove, after the group went offline: deactivates its open files.
void files_group_removed(Group& group) noexcept;

// An operation on a node, scoped: false when the group was removed.
class FileOp {
 public:
  explicit FileOp(FileNode& node) noexcept : node_(node), entered_(node.enter()) {}
  ~FileOp() {
    if (entered_) node_.leave();
  }
  FileOp(const FileOp&) = delete;
  FileOp& operator=(const FileOp&) = delete;
  explicit operator bool() const noexcept { return entered_; }
  Group& group() const noexcept { return *node_.group(); }

 private:
  FileNode& node_;
  const bool entered_;
};

}  // namespace memcg::internal

#endif  // MEMCG_CORE_INTERNAL_FILE_NODE_HPP_
