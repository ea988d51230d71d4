// A program of a module outside the memcg tree (bindings/go/README.md, "Depending on it"): a
// group, a reservation, a charge, everything given back and drained: memory.current is 0.
// Prints "consumer: ok".
package main

import (
	"fmt"
	"log"
	"strings"

	"example.org/memcg"
)

func main() {
	if !memcg.Compatible() {
		log.Fatalf("library %s", memcg.LibraryVersion())
	}
	ctl, err := memcg.NewController()
	if err != nil {
		log.Fatal(err)
	}
	defer ctl.Close()
	tenant, err := ctl.CreateGroup("tenant")
	if err != nil {
		log.Fatal(err)
	}
	if err := tenant.Write("memory.max", "64M"); err != nil {
		log.Fatal(err)
	}
	r, err := memcg.NewReservation(tenant, memcg.OOMNever, memcg.PriorityDefault)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := r.Reserve(4 << 20); err != nil {
		log.Fatal(err)
	}
	if _, err := tenant.Charge(8<<10, memcg.ChargeDefault); err != nil {
		log.Fatal(err)
	}
	if err := tenant.Uncharge(8 << 10); err != nil {
		log.Fatal(err)
	}
	if err := r.Close(); err != nil {
		log.Fatal(err)
	}
	if err := ctl.Drain(); err != nil {
		log.Fatal(err)
	}
	current, err := tenant.Read("memory.current")
	if err != nil {
		log.Fatal(err)
	}
	if strings.TrimSpace(current) != "0" {
		log.Fatalf("memory.current %q after Drain", current)
	}
	fmt.Println("consumer: ok (libmemcg " + memcg.LibraryVersion() + ")")
}
