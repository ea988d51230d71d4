// C helpers of the Go package: the trampolines' addresses and void* user values built from
// cgo handles (uintptr_t), so that no Go pointer is given to the library.
#ifndef MEMCG_GO_SHIM_H_
#define MEMCG_GO_SHIM_H_
#include <stdint.h>
#include <memcg/c/memcg.h>

int memcg_go_member_create(memcg_group* group, const char* name, int score_adj, uintptr_t handle,
                           memcg_member** out);
int memcg_go_listener_events(memcg_group* group, int local, uintptr_t handle,
                             memcg_listener** out);
int memcg_go_listener_vmpressure(memcg_group* group, const char* args, uintptr_t handle,
                                 memcg_listener** out);
#endif
