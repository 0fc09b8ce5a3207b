package mysql

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// TestConnectUnwatched: a new connection's set-up runs under the caller's
// context of an unwatched one (store.Unwatched): against a server that
// accepts the connection and never greets, Connect fails with
// context.Canceled once the caller cancels, 200 ms in, well before the
// DSN's own 10 s bound.
func TestConnectUnwatched(t *testing.T) {
	silent := silentServer(t)
	db, err := open("root@tcp(" + silent + ")/test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.AfterFunc(200*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	var one int
	err = db.QueryRowContext(store.Unwatched(ctx), "SELECT 1").Scan(&one)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a connection's set-up cancelled: %v, want context.Canceled", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the set-up ended %v after its start, not with its context", waited)
	}
}

// silentServer accepts connections on a loopback port and never answers;
// it closes each after 3 s (a set-up that does not end with its context
// then fails otherwise), and all when the test ends.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			time.AfterFunc(3*time.Second, func() { _ = c.Close() })
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}
