package memcg_test

import (
	"errors"
	"fmt"
	"log"
	"sync"

	"example.org/memcg"
)

// Three tenants under a parent; each request reserves its whole estimate up front with a
// deadline, then works; a runaway holds a tenant full until the OOM killer picks it for another
// query, and its kill callback closes it. At the end Drain gives the per-CPU stocks back and
// memory.current is 0.
func Example_service() {
	const MiB = 1 << 20
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	ctl, err := memcg.NewController()
	check(err)
	defer ctl.Close()
	parent, err := ctl.CreateGroup("tenants")
	check(err)
	check(parent.Write("memory.max", "24M"))
	var tenants []*memcg.Group
	for _, name := range []string{"alpha", "beta", "gamma"} {
		g, err := ctl.CreateGroup("tenants/" + name)
		check(err)
		check(g.Write("memory.max", "8M"))
		tenants = append(tenants, g)
	}

	// Requests on every tenant: the whole estimate (2 MiB + 4 x 256 KiB) at once, waiting up to
	// 2 s for room; growing piece by piece while holding part could leave every request
	// holding some and waiting for the rest.
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(tenant *memcg.Group) {
			defer wg.Done()
			r, err := memcg.NewReservation(tenant, memcg.OOMNever, memcg.PriorityDefault)
			check(err)
			defer r.Close() // gives the bytes back
			now, err := ctl.NowNS()
			check(err)
			if _, err := r.ReserveUntil(3*MiB, now+2e9); err != nil {
				fmt.Println("request:", err)
			}
		}(tenants[i%3])
	}
	wg.Wait()

	// The runaway: fills gamma; its kill callback closes it.
	runaway, err := memcg.NewMember(tenants[2], "runaway", 1000,
		func(m *memcg.Member, reason memcg.CancelReason) error {
			fmt.Println("killed", m.Name(), "for", reason)
			return m.Close()
		})
	check(err)
	_, err = runaway.Charge(7*MiB, memcg.ChargeDefault)
	check(err)

	// A query that needs room: the OOM killer picks the runaway, whose close frees its 7 MiB.
	query, err := memcg.NewMember(tenants[2], "query", 0, nil)
	check(err)
	defer query.Close()
	r, err := query.Reservation(memcg.OOMPieces, memcg.PriorityDefault)
	check(err)
	_, err = r.Reserve(3 * MiB)
	check(err)
	kills, err := tenants[2].Key("memory.events", "oom_kill")
	check(err)
	fmt.Println("oom_kill:", kills, "runaway closed:", runaway.Closed())

	// A request larger than gamma's limit is refused at once, naming the limit.
	_, err = r.Reserve(9 * MiB)
	var refused *memcg.RefusedError
	if errors.As(err, &refused) && errors.Is(err, memcg.NeverFits) {
		fmt.Println("refused:", refused.Status, "limit of", refused.LimitingGroup)
	}
	check(r.Close())
	check(ctl.Drain())
	current, err := parent.Read("memory.current")
	check(err)
	fmt.Print("memory.current: ", current)
	// Output:
	// killed runaway for oom-kill
	// oom_kill: 1 runaway closed: true
	// refused: memcg: never-fits limit of tenants/gamma
	// memory.current: 0
}
