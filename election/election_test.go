package election_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}

// hangGuard bounds every test's waits, so that a hang fails the test.
const hangGuard = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// candidate returns a new candidate for name on db, closed at the test's end.
func candidate(t *testing.T, db *dialect.DB, name string, cfg *election.Config) *election.Election {
	t.Helper()
	e, err := election.New(db, name, cfg)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// TestOneLeaderAtATime: four candidates campaign for one office in turn,
// each holding it briefly and resigning, for a number of terms. At most one
// is in office at a time (by the candidates' own account, which trusts a
// term from Campaign's return to Resign's call), terms strictly increase in
// the order they were won, and every candidate is elected.
func TestOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		name := locktest.RandomName("office")
		const candidates, termsEach = 4, 10
		var (
			inOffice atomic.Int32
			mu       sync.Mutex
			terms    []dblock.Token
			wins     = make([]int, candidates)
			wg       sync.WaitGroup
		)
		for i := range candidates {
			e := candidate(t, iso.DB, name, nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range termsEach {
					term, err := e.Campaign(ctx, fmt.Sprint("candidate-", i))
					if err != nil {
						t.Errorf("campaign: %v", err)
						return
					}
					if n := inOffice.Add(1); n != 1 {
						t.Errorf("%d leaders in office at once", n)
					}
					mu.Lock()
					terms = append(terms, term.Token())
					wins[i]++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					inOffice.Add(-1)
					if was, err := e.Resign(ctx); err != nil || !was {
						t.Errorf("resign: was leader %v, %v", was, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for i := 1; i < len(terms); i++ {
			if terms[i] <= terms[i-1] {
				t.Fatalf("term %d won after term %d", terms[i], terms[i-1])
			}
		}
		if len(terms) != candidates*termsEach {
			t.Fatalf("%d terms won, want %d", len(terms), candidates*termsEach)
		}
		for i, n := range wins {
			if n != termsEach {
				t.Errorf("candidate %d won %d terms, want %d", i, n, termsEach)
			}
		}
	})
}

// TestLeaderAndProclaim: Leader reports no leader before any campaign, then
// the leader's value and term; Proclaim changes the value; after the term
// is taken away (an administrator frees the name), Proclaim fails with
// ErrNotLeader and the term is marked lost, and Resign reports that the
// candidate was no longer the leader.
func TestLeaderAndProclaim(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		name := locktest.RandomName("office")
		e := candidate(t, iso.DB, name, nil)
		if _, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) || !errors.Is(err, dblock.ErrNotHeld) {
			t.Fatalf("leader before any campaign: %v, want ErrNoLeader", err)
		}
		if err := e.Proclaim(ctx, "x"); !errors.Is(err, election.ErrNotLeader) {
			t.Fatalf("proclaim before any campaign: %v, want ErrNotLeader", err)
		}
		term, err := e.Campaign(ctx, "host-a")
		if err != nil {
			t.Fatal(err)
		}
		observer := candidate(t, iso.DB, name, nil)
		l, err := observer.Leader(ctx)
		if err != nil || l.Value != "host-a" || l.Term != term.Token() || l.Owner != term.Owner() || l.Since.IsZero() || !l.ExpiresAt.After(l.Since) {
			t.Fatalf("leader: %+v, %v; want host-a in term %d", l, err, term.Token())
		}
		if err := e.Proclaim(ctx, "host-a:8080"); err != nil {
			t.Fatal(err)
		}
		if l, err := observer.Leader(ctx); err != nil || l.Value != "host-a:8080" || l.Term != term.Token() {
			t.Fatalf("leader after proclaim: %+v, %v", l, err)
		}
		again, err := e.Campaign(ctx, "host-a:9090")
		if err != nil || again != term {
			t.Fatalf("campaign by the leader: %v, %v; want its own term back", again, err)
		}
		if l, err := observer.Leader(ctx); err != nil || l.Value != "host-a:9090" {
			t.Fatalf("leader after a campaign by the leader: %+v, %v", l, err)
		}
		if ok, err := iso.Store().ForceRelease(ctx, nil, name); err != nil || !ok {
			t.Fatalf("force release: %v %v", ok, err)
		}
		if err := e.Proclaim(ctx, "y"); !errors.Is(err, election.ErrNotLeader) || !errors.Is(err, dblock.ErrForceReleased) {
			t.Fatalf("proclaim by a deposed leader: %v, want ErrNotLeader with ErrForceReleased", err)
		}
		select {
		case <-term.Done():
		default:
			t.Fatal("the deposed leader's term is not marked lost")
		}
		if was, err := e.Resign(ctx); err != nil || was {
			t.Fatalf("resign by a deposed leader: was leader %v, %v; want false", was, err)
		}
		if _, err := observer.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
			t.Fatalf("leader after the office was freed: %v, want ErrNoLeader", err)
		}
	})
}

// TestObserve: ten observers watch five terms, each proclaiming a second
// value. Each sees terms in increasing order (and within a term, values
// only as they were proclaimed) and ends on the last term's last value.
func TestObserve(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		name := locktest.RandomName("office")
		cfg := &election.Config{ObserveInterval: 20 * time.Millisecond}
		const observers, terms = 10, 5
		watcher := candidate(t, iso.DB, name, cfg)
		octx, stop := context.WithCancel(ctx)
		defer stop()
		seen := make([][]election.Leader, observers)
		var wg sync.WaitGroup
		for i := range observers {
			ch := watcher.Observe(octx)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for l := range ch {
					seen[i] = append(seen[i], l)
				}
			}()
		}
		var last election.Leader
		for i := range terms {
			e := candidate(t, iso.DB, name, cfg)
			term, err := e.Campaign(ctx, fmt.Sprintf("term-%d-a", i))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(60 * time.Millisecond)
			if err := e.Proclaim(ctx, fmt.Sprintf("term-%d-b", i)); err != nil {
				t.Fatal(err)
			}
			last = election.Leader{Term: term.Token(), Value: fmt.Sprintf("term-%d-b", i)}
			time.Sleep(60 * time.Millisecond)
			if i < terms-1 {
				if _, err := e.Resign(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Give the observers a few intervals to read the last leader.
		time.Sleep(25 * cfg.ObserveInterval)
		stop()
		wg.Wait()
		for i, s := range seen {
			checkObserved(t, i, s, last)
		}
	})
}

// checkObserved checks one observer's stream: terms never go back, a term's
// values come as proclaimed (a, then b), and the stream ends on last.
func checkObserved(t *testing.T, i int, s []election.Leader, last election.Leader) {
	t.Helper()
	if len(s) == 0 {
		t.Fatalf("observer %d saw no leader", i)
	}
	for j := 1; j < len(s); j++ {
		prev, cur := s[j-1], s[j]
		switch {
		case cur.Term < prev.Term:
			t.Fatalf("observer %d: term %d after term %d", i, cur.Term, prev.Term)
		case cur.Term == prev.Term && (cur.Value == prev.Value || cur.Value[len(cur.Value)-1] < prev.Value[len(prev.Value)-1]):
			t.Fatalf("observer %d: %q after %q in term %d", i, cur.Value, prev.Value, cur.Term)
		}
	}
	if end := s[len(s)-1]; end.Term != last.Term || end.Value != last.Value {
		t.Fatalf("observer %d ended on term %d %q, want term %d %q", i, end.Term, end.Value, last.Term, last.Value)
	}
}

// TestRunCampaignsAgain: Run runs fn for a term; when the term is taken away
// fn's context is cancelled with the loss, and Run campaigns again and runs
// fn for a new, greater term; when Run's context ends fn's is cancelled
// while the term still holds, and Run resigns once fn has returned, then
// returns nil, and the office is free.
func TestRunCampaignsAgain(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		name := locktest.RandomName("office")
		// A short TTL: the loss is found by the next renewal, at TTL/3.
		e := candidate(t, iso.DB, name, &election.Config{TTL: 3 * time.Second})
		rctx, stop := context.WithCancel(ctx)
		started := make(chan dblock.Token, 4)
		causes := make(chan error, 4)
		ran := make(chan error, 1)
		go func() {
			ran <- e.Run(rctx, "worker", func(fctx context.Context) error {
				l, err := e.Leader(ctx)
				if err != nil {
					return err
				}
				started <- l.Term
				<-fctx.Done()
				cause := context.Cause(fctx)
				if errors.Is(cause, context.Canceled) {
					// Run's own end: the term must still be held
					// until fn returns (Run resigns after).
					if now, err := e.Leader(ctx); err != nil || now.Term != l.Term {
						cause = fmt.Errorf("resigned before fn returned: %+v, %v", now, err)
					}
				}
				causes <- cause
				return nil
			})
		}()
		first := receive(t, started, "the first term")
		if ok, err := iso.Store().ForceRelease(ctx, nil, name); err != nil || !ok {
			t.Fatalf("force release: %v %v", ok, err)
		}
		if cause := receive(t, causes, "fn's context cancelled by the loss"); !errors.Is(cause, dblock.ErrLost) {
			t.Fatalf("fn's context ended with %v, want the loss", cause)
		}
		if second := receive(t, started, "a second term"); second <= first {
			t.Fatalf("second term %d is not after the first, %d", second, first)
		}
		stop()
		if cause := receive(t, causes, "fn's context cancelled by Run's"); !errors.Is(cause, context.Canceled) {
			t.Fatalf("fn's context ended with %v, want Run's cancellation", cause)
		}
		if err := receive(t, ran, "Run's return"); err != nil {
			t.Fatalf("run: %v", err)
		}
		if _, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
			t.Fatalf("leader after Run returned: %v, want ErrNoLeader (resigned)", err)
		}
	})
}

// receive waits for one value from ch, failing the test after hangGuard.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// TestNewRefusesBadInput: a bad name or configuration is refused with the
// root's sentinels, and nothing is written.
func TestNewRefusesBadInput(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	for _, c := range []struct {
		name string
		cfg  *election.Config
		want error
	}{
		{"", nil, dblock.ErrInvalidName},
		{"ok", &election.Config{TTL: time.Nanosecond}, dblock.ErrInvalidOption},
		{"ok", &election.Config{TTL: -time.Second}, dblock.ErrInvalidOption},
		{"ok", &election.Config{ObserveInterval: -time.Second}, dblock.ErrInvalidOption},
		{"ok", &election.Config{ResignTimeout: -time.Second}, dblock.ErrInvalidOption},
	} {
		if _, err := election.New(iso.DB, c.name, c.cfg); !errors.Is(err, c.want) {
			t.Errorf("new(%q, %+v): %v, want %v", c.name, c.cfg, err, c.want)
		}
	}
	rows, err := iso.Store().ListLocks(testCtx(t), nil)
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows after refused calls: %v, %v", rows, err)
	}
}

// TestConcurrentCampaignsShareTheTerm: campaigns of one candidate run one
// after the other, so concurrent calls end with the same term, and a
// campaign that gives up while another runs says so.
func TestConcurrentCampaignsShareTheTerm(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		name := locktest.RandomName("office")
		holder := candidate(t, iso.DB, name, nil)
		if _, err := holder.Campaign(ctx, "holder"); err != nil {
			t.Fatal(err)
		}
		e := candidate(t, iso.DB, name, nil)
		terms := make(chan *dblock.Lease, 2)
		for range 2 {
			go func() {
				term, err := e.Campaign(ctx, "e")
				if err != nil {
					t.Errorf("campaign: %v", err)
				}
				terms <- term
			}()
		}
		time.Sleep(50 * time.Millisecond)
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := e.Campaign(short, "e"); !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("campaign that gave up: %v, want ErrNotAcquired with the deadline", err)
		}
		if _, err := holder.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		a, b := receive(t, terms, "a campaign"), receive(t, terms, "a campaign")
		if a == nil || a != b {
			t.Fatalf("concurrent campaigns of one candidate ended with %v and %v, want one term", a, b)
		}
	})
}
