package faults

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// netProxy is an in-process toxiproxy on a loopback port in front of a database.
type netProxy struct {
	px  *toxiproxy.Proxy
	dsn string // iso's database through the proxy
	n   int
}

var mysqlAddr = regexp.MustCompile(`@tcp\(([^)]*)\)`)

// upstreamOf returns host:port of a dblock DSN.
func upstreamOf(t *testing.T, dsn string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "mysql://") {
		m := mysqlAddr.FindStringSubmatch(dsn)
		if m == nil {
			t.Fatalf("no tcp(host:port) in %s", store.Redact(dsn))
		}
		return m[1]
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// withAddr returns dsn pointing at addr instead of its server.
func withAddr(t *testing.T, dsn, addr string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "mysql://") {
		return mysqlAddr.ReplaceAllString(dsn, "@tcp("+addr+")")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// startProxy starts a proxy on a loopback port in front of upstream
// (host:port), stopped at cleanup.
func startProxy(t *testing.T, upstream string) *netProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	px := toxiproxy.NewProxy(srv, "db-"+randHex(4), "127.0.0.1:0", upstream)
	if err := px.Start(); err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	t.Cleanup(px.Stop)
	return &netProxy{px: px}
}

// newProxy starts a proxy in front of iso's server, stopped at cleanup.
func newProxy(t *testing.T, iso *dbtest.Isolated) *netProxy {
	t.Helper()
	p := startProxy(t, upstreamOf(t, iso.DSN))
	p.dsn = withAddr(t, iso.DSN, p.px.Listen)
	return p
}

// partition blackholes both directions; the returned func heals it.
func (p *netProxy) partition(t *testing.T) func() {
	t.Helper()
	up := p.add(t, "timeout", "upstream", `{"timeout":0}`)
	down := p.add(t, "timeout", "downstream", `{"timeout":0}`)
	return func() {
		p.remove(t, up)
		p.remove(t, down)
	}
}

// open opens a pool through the proxy, closed at cleanup.
func (p *netProxy) open(t *testing.T) *dialect.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	db, err := dialect.Open(ctx, p.dsn)
	if err != nil {
		t.Fatalf("open through the proxy: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// add adds a toxic (JSON attributes) on stream ("upstream" or "downstream")
// and returns its name.
func (p *netProxy) add(t *testing.T, typ, stream, attrs string) string {
	t.Helper()
	p.n++
	name := fmt.Sprintf("%s_%s_%d", typ, stream, p.n)
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := p.px.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		t.Fatalf("add toxic %s: %v", body, err)
	}
	return name
}

// remove removes a toxic.
func (p *netProxy) remove(t *testing.T, name string) {
	t.Helper()
	if err := p.px.Toxics.RemoveToxic(context.Background(), name); err != nil {
		t.Fatalf("remove toxic %s: %v", name, err)
	}
}

// cut closes every connection through the proxy and starts it again.
func (p *netProxy) cut(t *testing.T) {
	t.Helper()
	p.px.Stop()
	if err := p.px.Start(); err != nil {
		t.Fatalf("restart toxiproxy: %v", err)
	}
}
