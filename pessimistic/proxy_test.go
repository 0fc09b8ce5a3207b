package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// freezeProxy forwards TCP connections to a database server on the loopback
// interface and can freeze them: bytes stop flowing both ways while the
// sockets stay open, as in a network partition.
type freezeProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	cond     *sync.Cond
	frozen   bool
	closed   bool
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newFreezeProxy(t *testing.T, upstream string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, upstream: upstream}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = u.Close()
			return
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	// Whatever ends one direction ends the connection, as the kernel would
	// (a reset or close reaches the other peer).
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.frozen && !p.closed {
			p.cond.Wait()
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezeProxy) freeze(on bool) {
	p.mu.Lock()
	p.frozen = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *freezeProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// proxied opens iso's database through a new freezeProxy.
func proxied(t *testing.T, iso *dbtest.Isolated) (*dialect.DB, *freezeProxy) {
	t.Helper()
	var host, dsn string
	switch iso.Kind {
	case store.Postgres:
		u, err := url.Parse(iso.DSN)
		if err != nil {
			t.Fatal(err)
		}
		host = u.Host
	case store.MySQL:
		i, j := strings.Index(iso.DSN, "tcp("), strings.Index(iso.DSN, ")/")
		host = iso.DSN[i+4 : j]
	}
	p := newFreezeProxy(t, host)
	dsn = strings.Replace(iso.DSN, host, p.ln.Addr().String(), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	db, err := dialect.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, p
}

// TestUnreachableEndsHold: when the server cannot be reached, a hold is
// declared lost after TTL/2 and its transaction is ended on the client, so
// that once the network heals the holder's statements fail instead of
// running in a transaction that no longer holds the lock, and the name is
// free again.
func TestUnreachableEndsHold(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		db, px := proxied(t, iso)
		l := newLocker(t, db, &pessimistic.Config{TTL: 2 * time.Second, WatchInterval: 50 * time.Millisecond})
		name := randName(t)
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		px.freeze(true)
		waitDone(t, lease)
		if err := lease.Err(); !errors.Is(err, dblock.ErrConnLost) {
			t.Fatalf("Err: %v, want ErrConnLost", err)
		}
		px.freeze(false)
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		if _, err := lease.Tx().ExecContext(sctx, "SELECT 1"); !errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("statement after the loss: %v, want sql.ErrTxDone", err)
		}
		if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
			t.Fatalf("release: %v, want ErrLost", err)
		}
		other := newLocker(t, iso.DB, nil)
		next, err := other.Acquire(ctx, name, dblock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("acquire after the loss: %v", err)
		}
		_ = next.Release(ctx)
	})
}

// TestReleaseBoundedByCtx: a Release whose COMMIT cannot reach the server
// returns when its ctx ends, saying that the outcome is unknown.
func TestReleaseBoundedByCtx(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		db, px := proxied(t, iso)
		l := newLocker(t, db, nil)
		lease, err := l.Acquire(ctx, randName(t))
		if err != nil {
			t.Fatal(err)
		}
		px.freeze(true)
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = lease.Release(rctx)
		if err == nil {
			t.Fatal("release through a frozen network succeeded")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("release took %v with a 200ms ctx", d)
		}
		t.Logf("%s: release: %v", iso.Kind, err)
		px.close() // Unblocks what still waits on the network.
	})
}
