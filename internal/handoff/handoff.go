package handoff

import (
	"sync"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// State is where a waiter stands for its Locker's releases.
type State uint8

const (
	Busy    State = iota // Awake: not to be claimed.
	Parked               // Asleep: a release may claim it.
	Claimed              // A release is handing it the name.
)

// Result is a claim's outcome for its waiter: the lease handed to it (Res,
// taken by the statement sent at ReqStart, the lease's start), or (Err) a
// statement whose outcome is unknown. A claim that handed nothing leaves
// no Result.
type Result struct {
	Res      store.AcquireResult
	ReqStart time.Time
	Err      error
}

// Slot is a waiter as its Locker's releases see it.
type Slot struct {
	State  State
	Result *Result       // A claim's outcome, until the waiter reads it.
	Wake   chan struct{} // Buffered one deep: a claim ended.
}

// NewSlot returns a busy slot.
func NewSlot() Slot { return Slot{Wake: make(chan struct{}, 1)} }

// Claim claims s if it is parked, and reports whether it did. The line's
// mutex is held.
func (s *Slot) Claim() bool {
	if s.State != Parked {
		return false
	}
	s.State = Claimed
	return true
}

// Finish ends a claim and wakes the waiter: with a result, to take it;
// without, s is parked again (claimable), and the waiter sleeps on or
// looks again, as its mode decides.
func (s *Slot) Finish(mu sync.Locker, r *Result) {
	mu.Lock()
	if r == nil {
		s.State = Parked
	} else {
		s.State, s.Result = Busy, r
	}
	mu.Unlock()
	select {
	case s.Wake <- struct{}{}:
	default:
	}
}

// Park makes s claimable while its waiter sleeps. A claim's end signalled
// after the waiter woke is dropped: no claim is in progress while it is
// busy.
func (s *Slot) Park(mu sync.Locker) {
	mu.Lock()
	s.park()
	mu.Unlock()
}

// ParkLocked is Park with the line's mutex held.
func (s *Slot) ParkLocked() { s.park() }

func (s *Slot) park() {
	select {
	case <-s.Wake:
	default:
	}
	s.State = Parked
}

// Woken reports whether a claim left s a result.
func (s *Slot) Woken(mu sync.Locker) bool {
	mu.Lock()
	defer mu.Unlock()
	return s.Result != nil
}

// Unpark makes s busy as its waiter wakes, first waiting out a claim in
// progress, and returns the result a claim left, if any.
func (s *Slot) Unpark(mu sync.Locker) *Result {
	for {
		mu.Lock()
		if s.State != Claimed {
			r := s.Result
			s.State, s.Result = Busy, nil
			mu.Unlock()
			return r
		}
		mu.Unlock()
		<-s.Wake
	}
}
