// memcg's C API (memcg/c/memcg.h) from Go with cgo: a tenant group with a limit, a charge,
// memory.stat, and an OOM kill delivered to a Go callback that destroys its own member.
// Built with CGO_CFLAGS=-I<include dir> and CGO_LDFLAGS="-L<lib dir> -l<memcg library>", or
// with `#cgo pkg-config: memcg-c` once memcg is installed.
package main

/*
#include <stdlib.h>
#include "memcg/c/memcg.h"

extern void goOnKill(memcg_member* member, memcg_cancel_reason reason, void* user);
static memcg_kill_fn kill_trampoline(void) { return (memcg_kill_fn)goOnKill; }
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

var kills int

//export goOnKill
func goOnKill(member *C.memcg_member, reason C.memcg_cancel_reason, user unsafe.Pointer) {
	kills++
	fmt.Printf("go: member killed (reason %d), destroying it\n", int(reason))
	C.memcg_member_destroy(member)
}

func check(code C.int, what string) {
	if code != 0 {
		fmt.Printf("go: %s: %s\n", what, C.GoString(C.memcg_errno_name(code)))
		os.Exit(1)
	}
}

func read(g *C.memcg_group, file string) string {
	name := C.CString(file)
	defer C.free(unsafe.Pointer(name))
	var length C.size_t
	C.memcg_group_read(g, name, nil, 0, &length)
	buf := (*C.char)(C.malloc(length + 1))
	defer C.free(unsafe.Pointer(buf))
	check(C.memcg_group_read(g, name, buf, length+1, nil), "read "+file)
	return C.GoString(buf)
}

func key(text, k string) uint64 {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, k+" ") {
			n, _ := strconv.ParseUint(strings.TrimPrefix(line, k+" "), 10, 64)
			return n
		}
	}
	return 0
}

func main() {
	v := uint(C.memcg_version())
	fmt.Printf("go: memcg %d.%d.%d\n", v/10000, v/100%100, v%100)
	var ctl *C.memcg_controller
	check(C.memcg_controller_create(nil, &ctl), "controller")
	var g *C.memcg_group
	path := C.CString("tenant")
	defer C.free(unsafe.Pointer(path))
	check(C.memcg_group_create(ctl, path, &g), "group")
	maxFile, maxValue := C.CString("memory.max"), C.CString("512K")
	defer C.free(unsafe.Pointer(maxFile))
	defer C.free(unsafe.Pointer(maxValue))
	check(C.memcg_group_write(g, maxFile, maxValue, 4, 0), "memory.max")

	if C.memcg_charge(g, 100<<10, C.MEMCG_CHARGE_DEFAULT) != C.MEMCG_CHARGE_OK {
		fmt.Println("go: charge failed")
		os.Exit(1)
	}
	fmt.Printf("go: charged 102400, memory.stat anon=%d\n", key(read(g, "memory.stat"), "anon"))
	C.memcg_uncharge(g, 100<<10)

	var victim, other *C.memcg_member
	vname, oname := C.CString("victim"), C.CString("other")
	defer C.free(unsafe.Pointer(vname))
	defer C.free(unsafe.Pointer(oname))
	check(C.memcg_member_create(g, vname, 500, C.kill_trampoline(), nil, &victim), "member")
	check(C.memcg_member_create(g, oname, 0, nil, nil, &other), "member")
	if C.memcg_member_charge(victim, 400<<10, C.MEMCG_CHARGE_DEFAULT) != C.MEMCG_CHARGE_OK {
		fmt.Println("go: member charge failed")
		os.Exit(1)
	}
	for i := 0; i < 4; i++ {
		if C.memcg_member_charge(other, 32<<10, C.MEMCG_CHARGE_DEFAULT) != C.MEMCG_CHARGE_OK {
			fmt.Println("go: charge after the kill failed")
			os.Exit(1)
		}
	}
	oomKill := key(read(g, "memory.events"), "oom_kill")
	fmt.Printf("go: killed=%d oom_kill=%d\n", kills, oomKill)
	if kills != 1 || oomKill != 1 {
		os.Exit(1)
	}
	C.memcg_member_destroy(other)
	C.memcg_group_release(g)
	check(C.memcg_controller_destroy(ctl), "destroy")
	fmt.Println("go: ok")
}
