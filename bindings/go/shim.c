#include "shim.h"
#include "_cgo_export.h"

int memcg_go_member_create(memcg_group* group, const char* name, int score_adj, uintptr_t handle,
                           memcg_member** out) {
  return memcg_member_create(group, name, score_adj,
                             handle != 0 ? (memcg_kill_fn)memcgGoKill : NULL, (void*)handle,
                             out);
}

int memcg_go_listener_events(memcg_group* group, int local, uintptr_t handle,
                             memcg_listener** out) {
  return memcg_listener_create_events(group, local, (memcg_notify_fn)memcgGoNotify,
                                      (void*)handle, out);
}

int memcg_go_listener_vmpressure(memcg_group* group, const char* args, uintptr_t handle,
                                 memcg_listener** out) {
  return memcg_listener_create_vmpressure(group, args, (memcg_notify_fn)memcgGoNotify,
                                          (void*)handle, out);
}
