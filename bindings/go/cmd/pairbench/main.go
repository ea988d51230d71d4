// Command pairbench is bench/bindings_bench.py's Go side: a reservation's grow + shrink pair
// (4 KiB) on a group at depth 3, timed over N pairs, through the package, or with "raw" as the
// second argument through cgo calls alone (the cost of cgo without the package's bookkeeping).
// Prints "ns_per_pair X".
package main

// #cgo pkg-config: memcg-c
// #include <memcg/c/memcg.h>
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"example.org/memcg"
)

func raw(n int) time.Duration {
	var ctl *C.memcg_controller
	var leaf *C.memcg_group
	var r *C.memcg_reservation
	if C.memcg_controller_create(nil, &ctl) != 0 ||
		C.memcg_group_create(ctl, C.CString("a"), nil) != 0 ||
		C.memcg_group_create(ctl, C.CString("a/b"), nil) != 0 ||
		C.memcg_group_create(ctl, C.CString("a/b/c"), &leaf) != 0 ||
		C.memcg_reservation_create(leaf, nil, 0, -1, &r) != 0 {
		panic("set-up failed")
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if C.memcg_reservation_grow(r, 4096) != 0 {
			panic("grow refused")
		}
		C.memcg_reservation_shrink(r, 4096)
	}
	elapsed := time.Since(start)
	C.memcg_reservation_destroy(r)
	C.memcg_group_release(leaf)
	C.memcg_controller_destroy(ctl)
	return elapsed
}

func wrapped(n int) time.Duration {
	ctl, err := memcg.NewController()
	if err != nil {
		panic(err)
	}
	defer ctl.Close()
	_, _ = ctl.CreateGroup("a")
	_, _ = ctl.CreateGroup("a/b")
	leaf, err := ctl.CreateGroup("a/b/c")
	if err != nil {
		panic(err)
	}
	r, err := memcg.NewReservation(leaf, memcg.OOMKernel, memcg.PriorityDefault)
	if err != nil {
		panic(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := r.Grow(4096); err != nil {
			panic(err)
		}
		_ = r.Shrink(4096)
	}
	return time.Since(start)
}

func main() {
	n := 1000000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	var elapsed time.Duration
	if len(os.Args) > 2 && os.Args[2] == "raw" {
		elapsed = raw(n)
	} else {
		elapsed = wrapped(n)
	}
	fmt.Printf("ns_per_pair %.2f\n", float64(elapsed.Nanoseconds())/float64(n))
}
