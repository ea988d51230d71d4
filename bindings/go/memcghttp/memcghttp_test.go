package memcghttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"example.org/memcg"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// controller makes a controller that the cleanup closes, checking that nothing is left open.
func controller(t *testing.T) *memcg.Controller {
	ctl := must(memcg.NewController())
	t.Cleanup(func() {
		if err := ctl.Close(); err != nil && err != memcg.ErrClosed {
			t.Error(err)
		}
		if n := ctl.OpenHandles(); n != 0 {
			t.Errorf("%d handles left", n)
		}
	})
	return ctl
}

// The client of the tests: 127.0.0.1 only, no proxy, one connection per request (so that a
// stopped server is not reached through a kept-alive one), bounded in time.
var client = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
}

// request sends method path to the server at port with token ("" for none); the status and
// the body, or an error when nothing answered.
func request(port int, method, path, token string) (int, string, error) {
	req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), http.NoBody)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestOptionsRefused(t *testing.T) {
	ctl := controller(t)
	if _, err := NewServer(nil, nil); err != memcg.ErrClosed {
		t.Errorf("no controller: %v", err)
	}
	for _, c := range []struct {
		opts  Options
		named string // in the message
	}{
		{Options{"no_such_option": "1"}, "no_such_option"},
		{Options{"port": "http"}, "port"},
		{Options{"port": ""}, "port"},
		{Options{"threads": "-1"}, "threads"},
		{Options{"allow_writes": "yes"}, "allow_writes"},
		{Options{"unix_allowed_uids": "1,"}, "unix_allowed_uids"},
		{Options{"read_timeout_ms": "1s"}, "read_timeout_ms"},
		{Options{"address": "127.0.0.1", "threads": "2", "zzz": "1"}, "zzz"},
		{Options{"port\x00x": "1"}, "port"},
		{Options{"address": "127.0.0.1\x00:80"}, "address"},
	} {
		_, err := NewServer(ctl, c.opts)
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), c.named) {
			t.Errorf("%q: %v", c.opts, err)
		}
	}
	if n := ctl.OpenHandles(); n != 0 {
		t.Errorf("%d handles after the refusals", n)
	}

	// Ranges are checked at Start, with the library's message naming the option.
	s := must(NewServer(ctl, Options{"threads": "1000"}))
	if n := ctl.OpenHandles(); n != 1 {
		t.Errorf("%d handles, want the server", n)
	}
	err := s.Start()
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "threads") {
		t.Errorf("threads out of range: %v", err)
	}
	if s.Running() || s.Port() != 0 {
		t.Errorf("running %v, port %d after a failed start", s.Running(), s.Port())
	}
	// Writes need a token (or a Unix socket).
	noErr(t, s.Set("threads", "2"))
	noErr(t, s.Set("allow_writes", "1"))
	if err := s.Start(); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "token") {
		t.Errorf("writes without a token: %v", err)
	}
	if err := s.Set("allow_writes", "maybe"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("set: %v", err)
	}
	err = s.Set("token", "a\x00b")
	if !errors.Is(err, syscall.EINVAL) || strings.Contains(err.Error(), "a\\x00b") {
		t.Errorf("a NUL in the token: %v", err)
	}
	noErr(t, s.Close())
	if err := s.Close(); err != memcg.ErrClosed {
		t.Errorf("second close: %v", err)
	}
	if err := s.Start(); err != memcg.ErrClosed {
		t.Errorf("start after close: %v", err)
	}
	if err := s.Set("port", "0"); err != memcg.ErrClosed {
		t.Errorf("set after close: %v", err)
	}
	if s.Running() || s.Port() != 0 || !s.Closed() {
		t.Error("a closed server answers as running")
	}
	s.Stop() // does nothing
	if n := ctl.OpenHandles(); n != 0 {
		t.Errorf("%d handles after close", n)
	}
	noErr(t, ctl.Close())
	if _, err := NewServer(ctl, nil); err != memcg.ErrClosed {
		t.Errorf("closed controller: %v", err)
	}
}

func TestKillOverHTTP(t *testing.T) {
	ctl := controller(t)
	g := must(ctl.CreateGroup("q"))
	reasons := make(chan memcg.CancelReason, 4)
	// The callback runs on the server's writer thread; a killed query gives its memory back.
	m := must(memcg.NewMember(g, "query-1", 0, func(m *memcg.Member, r memcg.CancelReason) error {
		reasons <- r
		return m.Close()
	}))
	must(m.Charge(1<<20, memcg.ChargeDefault))
	// An action on a member is an event about its group (docs/http.md).
	sub := must(ctl.Subscribe(memcg.SubscribeOptions{Types: []memcg.EventType{memcg.EventAction}}))

	s := must(NewServer(ctl, Options{"address": "127.0.0.1", "port": "0", "threads": "2",
		"allow_writes": "true", "token": "s3cret", "token_name": "ops"}))
	noErr(t, s.Start())
	if err := s.Start(); !errors.Is(err, syscall.EALREADY) {
		t.Errorf("second start: %v", err)
	}
	if err := s.Set("port", "1"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("set while running: %v", err)
	}
	port := s.Port()
	if !s.Running() || port <= 0 {
		t.Fatalf("running %v, port %d", s.Running(), port)
	}
	if n := ctl.OpenHandles(); n != 4 { // the group, the member, the subscription, the server
		t.Errorf("%d handles, want 4", n)
	}

	if code, body, err := request(port, "GET", "/healthz", ""); err != nil || code != 200 {
		t.Errorf("healthz: %d %q %v", code, body, err)
	}
	code, body, err := request(port, "GET", "/v1/members?group=q", "")
	if err != nil || code != 200 || !strings.Contains(body, `"name":"query-1"`) ||
		!strings.Contains(body, fmt.Sprintf(`"id":%d,`, m.ID())) {
		t.Errorf("members: %d %q %v", code, body, err)
	}

	kill := fmt.Sprintf("/v1/members/%d/kill", m.ID())
	if code, body, err := request(port, "POST", kill, ""); err != nil || code != 401 {
		t.Errorf("kill without the token: %d %q %v", code, body, err)
	}
	if code, _, _ := request(port, "POST", kill, "wrong"); code != 401 && code != 403 {
		t.Errorf("kill with a wrong token: %d", code)
	}
	select {
	case r := <-reasons:
		t.Fatalf("killed without the token (%v)", r)
	default:
	}
	code, body, err = request(port, "POST", kill, "s3cret")
	if err != nil || code/100 != 2 || !strings.Contains(body, `"action":"kill"`) {
		t.Errorf("kill: %d %q %v", code, body, err)
	}
	select {
	case r := <-reasons:
		if r != memcg.Operator {
			t.Errorf("reason %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the kill callback did not run")
	}
	if !m.Closed() {
		t.Error("the callback's Close did not close the member")
	}
	// Idempotent: not killed twice.
	if code, _, _ := request(port, "POST", kill, "s3cret"); code/100 != 2 {
		t.Errorf("second kill: %d", code)
	}
	select {
	case r := <-reasons:
		t.Errorf("killed twice (%v)", r)
	default:
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := sub.Next(ctx)
	if err != nil || e.Type != memcg.EventAction || e.Group != "q" ||
		!strings.Contains(e.Payload, kill) {
		t.Errorf("action event: %+v %v", e, err)
	}

	// The audit names the token, never shows it.
	code, body, err = request(port, "GET", "/v1/audit", "")
	if err != nil || code != 200 || !strings.Contains(body, "ops") ||
		strings.Contains(body, "s3cret") {
		t.Errorf("audit: %d %q %v", code, body, err)
	}

	s.Stop()
	if s.Running() || s.Port() != 0 {
		t.Errorf("running %v, port %d after stop", s.Running(), s.Port())
	}
	if _, _, err := request(port, "GET", "/healthz", ""); err == nil {
		t.Error("answered after stop")
	}
	// Stopped, it takes new options and starts again.
	noErr(t, s.Set("allow_writes", "0"))
	noErr(t, s.Start())
	if code, _, err := request(s.Port(), "POST", kill, "s3cret"); err != nil || code != 405 {
		t.Errorf("kill with writes off: %d %v", code, err)
	}
	noErr(t, s.Close())
	if n := ctl.OpenHandles(); n != 2 { // the group and the subscription
		t.Errorf("%d handles after close, want 2", n)
	}
}

// forgotten makes a server, started or not, and keeps nothing of it but its port.
func forgotten(ctl *memcg.Controller, start bool) int {
	s := must(NewServer(ctl, nil))
	if start {
		noErrPanic(s.Start())
	}
	return s.Port()
}

func noErrPanic(err error) {
	if err != nil {
		panic(err)
	}
}

func TestForgottenServers(t *testing.T) {
	ctl := controller(t)
	port := forgotten(ctl, true)
	forgotten(ctl, false)
	// The finalizer closes the stopped one; a started server is not the collector's to stop.
	for i := 0; i < 500 && ctl.OpenHandles() != 1; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := ctl.OpenHandles(); n != 1 {
		t.Errorf("%d handles, want the started server", n)
	}
	if code, _, err := request(port, "GET", "/healthz", ""); err != nil || code != 200 {
		t.Fatalf("after a GC: %d %v", code, err)
	}
	// Controller.Close stops and frees it first.
	noErr(t, ctl.Close())
	if n := ctl.OpenHandles(); n != 0 {
		t.Errorf("%d handles after Controller.Close", n)
	}
	if _, _, err := request(port, "GET", "/healthz", ""); err == nil {
		t.Error("answered after Controller.Close")
	}
}

// Start, Stop, Port and Running from several goroutines while another closes the server:
// nothing is freed under a call (go test -race).
func TestCloseRacingCalls(t *testing.T) {
	ctl := controller(t)
	for round := 0; round < 5; round++ {
		s := must(NewServer(ctl, Options{"threads": "1"}))
		done := make(chan struct{})
		for i := 0; i < 3; i++ {
			go func(i int) {
				defer func() { done <- struct{}{} }()
				for j := 0; j < 10; j++ {
					switch (i + j) % 3 {
					case 0:
						if err := s.Start(); err != nil && err != memcg.ErrClosed &&
							!errors.Is(err, syscall.EALREADY) {
							t.Error(err)
						}
					case 1:
						_ = s.Port()
						_ = s.Running()
					case 2:
						s.Stop()
					}
				}
			}(i)
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		noErr(t, s.Close())
		for i := 0; i < 3; i++ {
			<-done
		}
		if s.Running() {
			t.Error("running after close")
		}
	}
	if n := ctl.OpenHandles(); n != 0 {
		t.Errorf("%d handles left", n)
	}
}

// The README's sample is example_test.go, verbatim.
func TestReadmeHoldsTheExample(t *testing.T) {
	readme := string(must(os.ReadFile("../README.md")))
	example := string(must(os.ReadFile("example_test.go")))
	if !strings.Contains(readme, "```go\n"+example+"```") {
		t.Error("README.md's endpoint example differs from memcghttp/example_test.go")
	}
}
