// Command pairbench is bench/bindings_bench.py's Go side: a reservation's grow + shrink pair
// (4 KiB) through the package, on a group at depth 3, timed over N pairs.
// Prints "ns_per_pair X".
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"memcg"
)

func main() {
	n := 1000000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	ctl, err := memcg.NewController()
	if err != nil {
		panic(err)
	}
	_, _ = ctl.CreateGroup("a")
	_, _ = ctl.CreateGroup("a/b")
	leaf, err := ctl.CreateGroup("a/b/c")
	if err != nil {
		panic(err)
	}
	r, err := memcg.NewReservation(leaf, memcg.OomKernel, memcg.PriorityDefault)
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
	fmt.Printf("ns_per_pair %.2f\n", float64(time.Since(start).Nanoseconds())/float64(n))
	_ = ctl.Close()
}
