package locktest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/dblock-go/dblock"
)

// occupancy follows who is inside a shared lock's critical sections, as
// the holders report their entries and exits, and notes every breach of
// the read-write contract: a writer beside anyone, a reader beside a
// writer, a writer's token not above every earlier token of the name, a
// reader's token not above the last writer's.
type occupancy struct {
	mu             sync.Mutex
	readers        int
	writers        int
	lastWrite      dblock.Token
	maxToken       dblock.Token
	reads, writes  int
	problems       []string
	mostReaders    int
	readsAfterLast int // reads since the last write
}

// enter records a holder entering its critical section with token.
func (o *occupancy) enter(write bool, token dblock.Token) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if write {
		o.enterWrite(token)
	} else {
		o.enterRead(token)
	}
	o.maxToken = max(o.maxToken, token)
}

func (o *occupancy) enterWrite(token dblock.Token) {
	if o.readers > 0 || o.writers > 0 {
		o.problem("a writer (token %d) entered beside %d readers and %d writers", token, o.readers, o.writers)
	}
	if token <= o.maxToken {
		o.problem("a writer's token %d is not above an earlier token %d", token, o.maxToken)
	}
	o.writers++
	o.writes++
	o.lastWrite = token
	o.readsAfterLast = 0
}

func (o *occupancy) enterRead(token dblock.Token) {
	if o.writers > 0 {
		o.problem("a reader (token %d) entered beside a writer", token)
	}
	if o.writes > 0 && token <= o.lastWrite {
		o.problem("a reader's token %d is not above the last writer's %d", token, o.lastWrite)
	}
	o.readers++
	o.reads++
	o.readsAfterLast++
	o.mostReaders = max(o.mostReaders, o.readers)
}

// exit records a holder leaving its critical section (before its release).
func (o *occupancy) exit(write bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if write {
		o.writers--
	} else {
		o.readers--
	}
}

func (o *occupancy) problem(format string, args ...any) {
	if len(o.problems) < 10 {
		o.problems = append(o.problems, fmt.Sprintf(format, args...))
	}
}

// counts returns the reads and writes recorded, and the reads since the last write.
func (o *occupancy) counts() (reads, writes, readsAfterLast int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reads, o.writes, o.readsAfterLast
}

// check fails t with every breach recorded.
func (o *occupancy) check(t testing.TB) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.problems {
		t.Errorf("%s", p)
	}
}
