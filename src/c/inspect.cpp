// The C API's calls for a service that watches its tenants (include/memcg/c/memcg.h): listing
// groups, the OOM log, draining stocks and flushing statistics, and names read back into codes.
#include <cstring>
#include <string>
#include <string_view>
#include "memcg/base/errors.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "handles.hpp"

using memcg::capi::copy_out;
using memcg::capi::guarded;

namespace {

// The code whose name `name_of` gives as `name`, among first..last; -1 when none.
int code_of(const char* name, int first, int last, const char* (*name_of)(int)) noexcept {
  if (name == nullptr) return -1;
  for (int code = first; code <= last; ++code)
    if (std::strcmp(name_of(code), name) == 0 && std::strcmp(name, "unknown") != 0) return code;
  return -1;
}

}  // namespace

extern "C" {

int memcg_controller_drain_stocks(memcg_controller* controller) {
  if (controller == nullptr) return EINVAL;
  return guarded([&] {
    controller->cpp.drain_stocks();
    return 0;
  });
}

int memcg_controller_flush_stats(memcg_controller* controller) {
  if (controller == nullptr) return EINVAL;
  return guarded([&] {
    controller->cpp.flush_stats();
    return 0;
  });
}

int memcg_group_list(memcg_group* group, char* buf, size_t size, size_t* length) {
  if (group == nullptr) return EINVAL;
  return guarded([&] {
    memcg::Group& from = *group->ref;
    std::string text;
    // Online groups only: a removed group has no files left to read. Only appends under the
    // tree lock (Controller::walk allows nothing more).
    from.controller().walk(
        from,
        [&](memcg::Group& g) {
          if (&g == &from) return;
          text += g.path();
          text += '\n';
        },
        false);
    return copy_out(text, buf, size, length);
  });
}

uint64_t memcg_oom_log_last_seq(memcg_controller* controller) {
  if (controller == nullptr) return 0;
  return controller->cpp.oom_log().last_seq();
}

int memcg_oom_log_read(memcg_controller* controller, uint64_t after, char* buf, size_t size,
                       size_t* length) {
  if (controller == nullptr) return EINVAL;
  return guarded([&] {
    std::string text;
    for (const memcg::OomLogEntry& e : controller->cpp.oom_log().snapshot(after)) {
      text += memcg::format_oom_log_line(e);
      text += '\n';
    }
    return copy_out(text, buf, size, length);
  });
}

int memcg_errno_from_name(const char* name) {
  if (name == nullptr) return -1;
  return memcg::errno_from_name(name);
}

int memcg_charge_status_from_name(const char* name) {
  return code_of(name, MEMCG_CHARGE_OK, MEMCG_CHARGE_INVALID, memcg_charge_status_name);
}

int memcg_reserve_status_from_name(const char* name) {
  const int code =
      code_of(name, MEMCG_RESERVE_OK, MEMCG_RESERVE_NEVER_FITS, memcg_reserve_status_name);
  if (code >= 0) return code;
  return code_of(name, MEMCG_RESERVE_REFUSED, MEMCG_RESERVE_REFUSED, memcg_reserve_status_name);
}

}  // extern "C"
