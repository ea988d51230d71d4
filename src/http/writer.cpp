// The writer thread of memcg::http::Server: runs POSTed writes one at a time, off the workers,
// because a write may reclaim and run the OOM killer, calling application reclaimers and kill
// callbacks that the server cannot bound. The request waits for it (server_impl.hpp).
#include <cerrno>
#include <new>

#include "memcg/files/files.hpp"
#include "server_impl.hpp"

namespace memcg::http::detail {

std::thread start_writer(const std::shared_ptr<Writer>& writer) {
  return std::thread([w = writer] {
    std::unique_lock<std::mutex> lock(w->mutex);
    for (;;) {
      w->cv.wait(lock, [&] { return w->stopping || (w->job && !w->job->started); });
      if (w->stopping) break;  // a write not started yet never starts
      std::shared_ptr<WriteJob> job = w->job;
      job->started = true;
      lock.unlock();
      int result;
      try {
        if (job->action) {
          result = job->action();  // an action (actions.cpp): its own audit record
        } else {
          // The value before, for the audit (a write-only file reads as "").
          std::string old;
          if (read_file(*job->group, job->file, &old) != 0) old.clear();
          if (old.size() > kAuditValueBytes + 4) old.resize(kAuditValueBytes + 4);
          lock.lock();
          job->old_value = std::move(old);
          job->old_read = true;
          lock.unlock();
          result = write_file(*job->group, job->file, job->text);
        }
      } catch (const std::bad_alloc&) {
        result = ENOMEM;
      } catch (...) {
        result = EIO;
      }
      lock.lock();
      job->result = result;
      job->done = true;
      w->job.reset();
      w->cv.notify_all();
    }
    w->exited = true;
    w->cv.notify_all();
  });
}

}  // namespace memcg::http::detail
