package memcghttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"time"

	"example.org/memcg"
	"example.org/memcg/memcghttp"
)

// A service that serves its endpoint with actions behind a token and follows its own events:
// an operator kills a runaway query over HTTP, the query's kill callback sees the reason
// Operator and gives its memory back, and the OOM report and the action come on the stream.
func Example_operatorKill() {
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	ctl, err := memcg.NewController()
	check(err)
	defer ctl.Close() // closes the server and the subscription too
	tenant, err := ctl.CreateGroup("tenant")
	check(err)
	check(tenant.Write("memory.max", "64M"))

	// The events this service acts on; after a restart of the loop, AfterID: events.Cursor()
	// resumes where it stopped.
	events, err := ctl.Subscribe(memcg.SubscribeOptions{
		Types: []memcg.EventType{memcg.EventOOM, memcg.EventAction}})
	check(err)

	query, err := memcg.NewMember(tenant, "query-7", 0,
		func(m *memcg.Member, reason memcg.CancelReason) error {
			fmt.Println("kill callback:", m.Name(), "for", reason)
			return m.Close() // gives its 8 MiB back
		})
	check(err)
	_, err = query.Charge(8<<20, memcg.ChargeDefault)
	check(err)

	server, err := memcghttp.NewServer(ctl, memcghttp.Options{
		"address": "127.0.0.1", "port": "0", "allow_writes": "1", "token": "s3cret"})
	check(err)
	check(server.Start())

	// What the operator's tool sends.
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/members/%d/kill", server.Port(), query.ID())
	req, err := http.NewRequest("POST", url, http.NoBody)
	check(err)
	req.Header.Set("Authorization", "Bearer s3cret")
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	check(err)
	var answer struct{ Released bool }
	check(json.NewDecoder(resp.Body).Decode(&answer))
	resp.Body.Close()
	fmt.Println("kill:", resp.Status, "released:", answer.Released)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ {
		e, err := events.Next(ctx)
		check(err)
		var p struct {
			Decider, Victim, Method, Path, Result string
		}
		check(json.Unmarshal([]byte(e.Payload), &p))
		switch e.Type {
		case memcg.EventOOM:
			fmt.Println(e.Type, "in", e.Group+": victim", p.Victim, "decided by", p.Decider)
		case memcg.EventAction:
			fmt.Println(e.Type, "on", e.Group+":", p.Method, p.Path, p.Result)
		}
	}
	// Output:
	// kill callback: query-7 for operator
	// kill: 200 OK released: true
	// oom in tenant: victim query-7 decided by operator
	// action on tenant: POST /v1/members/1/kill released
}
