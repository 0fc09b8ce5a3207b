package handoff_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/handoff"
)

// TestSlot: only a parked slot is claimed; a claim that hands nothing
// leaves it parked, one that hands a result leaves it busy with the result;
// Unpark waits out a claim in progress and returns its result once.
func TestSlot(t *testing.T) {
	var mu sync.Mutex
	s := handoff.NewSlot()
	if s.Claim() {
		t.Fatal("a busy slot was claimed")
	}
	s.Park(&mu)
	if !s.Claim() || s.Claim() {
		t.Fatal("a parked slot: want one claim")
	}
	s.Finish(&mu, nil)
	if s.State != handoff.Parked || s.Woken(&mu) {
		t.Fatalf("after a claim that handed nothing: state %d, woken %v", s.State, s.Woken(&mu))
	}
	if !s.Claim() {
		t.Fatal("the slot parked again was not claimed")
	}
	got := make(chan *handoff.Result, 1)
	go func() { got <- s.Unpark(&mu) }()
	select {
	case r := <-got:
		t.Fatalf("Unpark returned %+v while the claim ran", r)
	case <-time.After(50 * time.Millisecond):
	}
	want := &handoff.Result{Err: errors.New("unknown")}
	s.Finish(&mu, want)
	if r := <-got; r != want {
		t.Fatalf("Unpark: %+v, want the claim's result", r)
	}
	if s.State != handoff.Busy || s.Result != nil {
		t.Fatalf("after Unpark: state %d, result %+v", s.State, s.Result)
	}
	// A stale wake-up (a claim that handed nothing ended after the waiter
	// woke) is dropped when the slot parks again.
	s.Park(&mu)
	s.Claim()
	s.Finish(&mu, nil)
	if r := s.Unpark(&mu); r != nil || len(s.Wake) != 1 {
		t.Fatalf("Unpark after a claim that handed nothing: %+v, %d wake-ups pending", r, len(s.Wake))
	}
	s.Park(&mu)
	select {
	case <-s.Wake:
		t.Fatal("a stale wake-up survived Park")
	default:
	}
}
