package memcg_test

import (
	"errors"
	"fmt"
	"sync"

	"memcg"
)

// Three tenants under a parent; requests reserve with a deadline and grow as they work; a
// runaway holds a tenant full until the OOM killer picks it for another query, and its kill
// callback closes it.
func Example_service() {
	const MiB = 1 << 20
	ctl, err := memcg.NewController()
	if err != nil {
		panic(err)
	}
	defer ctl.Close()
	parent, _ := ctl.CreateGroup("tenants")
	_ = parent.Write("memory.max", "24M")
	var tenants []*memcg.Group
	for _, name := range []string{"alpha", "beta", "gamma"} {
		g, _ := ctl.CreateGroup("tenants/" + name)
		_ = g.Write("memory.max", "8M")
		tenants = append(tenants, g)
	}

	// Requests on every tenant: wait up to 2 s for room, then grow.
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(tenant *memcg.Group) {
			defer wg.Done()
			r, _ := memcg.NewReservation(tenant, memcg.OomNever, memcg.PriorityDefault)
			defer r.Close() // gives the bytes back
			now, _ := ctl.NowNs()
			if _, err := r.ReserveUntil(2*MiB, now+2e9); err != nil {
				fmt.Println("request:", err)
				return
			}
			for j := 0; j < 4; j++ {
				_, _ = r.Grow(256 << 10)
			}
		}(tenants[i%3])
	}
	wg.Wait()

	// The runaway: fills gamma; its kill callback closes it.
	runaway, _ := memcg.NewMember(tenants[2], "runaway", 1000,
		func(m *memcg.Member, reason memcg.CancelReason) error {
			fmt.Println("killed", m.Name())
			return m.Close()
		})
	_, _ = runaway.Charge(7*MiB, memcg.ChargeDefault)

	// A query that needs room: the OOM killer picks the runaway, whose close frees its 7 MiB.
	query, _ := memcg.NewMember(tenants[2], "query", 0, nil)
	defer query.Close()
	r, _ := query.Reservation(memcg.OomPieces, memcg.PriorityDefault)
	if _, err := r.Reserve(3 * MiB); err != nil {
		fmt.Println("query:", err)
	}
	kills, _ := tenants[2].Key("memory.events", "oom_kill")
	fmt.Println("oom_kill:", kills, "runaway closed:", runaway.Closed())

	// A request larger than gamma's limit is refused at once, naming the limit.
	_, err = r.Reserve(9 * MiB)
	var refused *memcg.RefusedError
	if errors.As(err, &refused) && errors.Is(err, memcg.NeverFits) {
		fmt.Println("refused:", refused.Status, "limit of", refused.LimitingGroup)
	}
	_ = r.Close()
	anon, _ := parent.Key("memory.stat", "anon")
	fmt.Println("anon:", anon)
	// Output:
	// killed runaway
	// oom_kill: 1 runaway closed: true
	// refused: memcg: never-fits limit of tenants/gamma
	// anon: 0
}
