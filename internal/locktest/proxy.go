package locktest

import (
	"net"
	"net/url"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// Proxy forwards TCP connections to a database server. Stall makes every
// connection open so far swallow whatever either side sends (a black-holed
// connection: no answer, no reset), while connections opened later pass;
// Blackhole stalls later connections too (a server that vanished), until
// Heal.
type Proxy struct {
	ln        net.Listener
	target    string
	blackhole atomic.Bool

	mu    sync.Mutex
	conns []*proxied
	wg    sync.WaitGroup
}

type proxied struct {
	client, server net.Conn
	stalled        atomic.Bool
}

var mysqlAddr = regexp.MustCompile(`tcp\(([^)]*)\)`)

// StallProxy starts a Proxy to iso's server (PostgreSQL or MySQL) and
// returns iso's DSN rewritten to go through it. Both end at cleanup.
func StallProxy(t *testing.T, iso *dbtest.Isolated) (string, *Proxy) {
	t.Helper()
	switch iso.Kind {
	case store.Postgres:
		u, err := url.Parse(iso.DSN)
		if err != nil {
			t.Fatalf("proxy: dsn: %v", err)
		}
		p := newProxy(t, u.Host)
		u.Host = p.ln.Addr().String()
		return u.String(), p
	case store.MySQL:
		m := mysqlAddr.FindStringSubmatchIndex(iso.DSN)
		if m == nil {
			t.Fatalf("proxy: dsn %q has no tcp(address)", store.Redact(iso.DSN))
		}
		p := newProxy(t, iso.DSN[m[2]:m[3]])
		return iso.DSN[:m[2]] + p.ln.Addr().String() + iso.DSN[m[3]:], p
	}
	t.Fatalf("proxy: %s has no server to proxy", iso.Kind)
	return "", nil
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.client.Close()
			_ = c.server.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &proxied{client: client, server: server}
		c.stalled.Store(p.blackhole.Load())
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, client, server)
		go p.pipe(c, server, client)
	}
}

func (p *Proxy) pipe(c *proxied, from, to net.Conn) {
	defer p.wg.Done()
	defer func() { _ = from.Close(); _ = to.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !c.stalled.Load() {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall black-holes every connection open so far.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallLocked()
}

// Blackhole black-holes every connection, open so far or opened later.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole.Store(true)
	p.stallLocked()
}

// Heal lets connections opened from now on pass again (after Blackhole);
// those stalled so far stay stalled.
func (p *Proxy) Heal() { p.blackhole.Store(false) }

func (p *Proxy) stallLocked() {
	for _, c := range p.conns {
		c.stalled.Store(true)
	}
}
