// memory.pressure: the file that reads a group's PSI averages and arms one trigger per open file.

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <string_view>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/tree/internal/file_node.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/files/files.hpp"

namespace memcg {

// ---- memory.pressure ----------------------------------------------------------------------------
namespace {

// Per open file: at most one trigger, and the eventfd its events are signalled on.
class PressureFile final : public File {
 public:
  explicit PressureFile(std::shared_ptr<internal::FileNode> node)
      : File(std::move(node), "memory.pressure") {}
  ~PressureFile() override {
    trigger_.reset();
    if (efd_ >= 0) ::close(efd_);
  }
  bool readable() const noexcept override { return true; }
  bool writable() const noexcept override { return true; }
  int read(std::string* out) override {
    internal::FileOp op(node());
    if (!op) return ENODEV;
    const PsiStats st = psi_stats(op.group());  // may fire triggers: outside the bypass
    internal::HookBypass bypass;                // the text is the library's (internal/lock.hpp)
    *out = format_psi(st);
    return 0;
  }
  // The file interface has no credentials: a write is a privileged trigger (any window up to
  // 10 s). The one-trigger rule is checked before the text, as in the kernel. The trigger
  // keeps its own reference to the group: the group's removal tells it and releases it
  // (psi.hpp), whether or not the file is still open.
  int write(std::string_view text, bool) override {
    internal::FileOp op(node());
    if (!op) return ENODEV;
    if (trigger_) return EBUSY;
    const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd < 0) return ENOMEM;
    if (int err = trigger_.arm(op.group(), text, nullptr, efd, true)) {
      ::close(efd);
      // ENOENT: the group went offline; its removal is about to deactivate this file.
      return err == ENOENT ? ENODEV : err;
    }
    efd_ = efd;
    return 0;
  }
  int eventfd() const noexcept { return efd_; }

 private:
  PsiTrigger trigger_;
  int efd_ = -1;
};

}  // namespace

int internal::open_pressure_file(Group& group, std::unique_ptr<File>* out) {
  auto node = std::make_shared<FileNode>();
  if (int err = attach_file_node(group, node)) return err;
  *out = std::make_unique<PressureFile>(std::move(node));
  return 0;
}

int pressure_file_eventfd(const File& file) noexcept {
  const auto* f = dynamic_cast<const PressureFile*>(&file);
  return f ? f->eventfd() : -1;
}

}  // namespace memcg
