// Package history records lock operations (acquire, renew, release, and the
// moments a holder confirmed it still held the lock) from one or several
// processes, and checks them: with porcupine against a sequential model of a
// lease lock, and with O(n log n) checks that fencing tokens are unique and
// increasing and that no two definitely-held intervals overlap.
//
// Times are wall-clock Unix nanoseconds, so records written by different
// processes on one machine can be merged. An operation that returned an error
// or timed out has an unknown outcome: it may or may not have taken effect.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation kind.
type Kind string

// Operation kinds.
const (
	Acquire Kind = "acquire"
	Release Kind = "release"
	Renew   Kind = "renew"
	// Hold is not an operation on the database: the holder confirmed, at T,
	// that its lease was still valid (no loss reported, local deadline not
	// reached). Hold records end a definitely-held interval.
	Hold Kind = "hold"
)

// Outcome is the result of an operation.
type Outcome string

// Outcomes.
const (
	OK   Outcome = "ok"   // acquired, renewed or released
	Busy Outcome = "busy" // acquire: held by another owner (a definite failure)
	// Refused is an acquire that definitely did not take effect without
	// naming a holder: another transaction held the row (an acquisition or
	// release in flight, one waiting for a synchronous standby). It says
	// nothing about whether the lock is held.
	Refused Outcome = "refused"
	NotHeld Outcome = "notheld" // release or renew: the lease was not ours any more
	Unknown Outcome = "unknown" // an error or a timeout: it may or may not have taken effect
	Pending Outcome = ""        // no return recorded (the process died)
)

// Record is one line of a history file: a call (Return false) or a return.
type Record struct {
	Client  string        `json:"c"`
	ID      int64         `json:"id"`
	Return  bool          `json:"r,omitempty"`
	Kind    Kind          `json:"k"`
	Name    string        `json:"n"`
	T       int64         `json:"t"`
	TTL     time.Duration `json:"ttl,omitempty"`
	Token   int64         `json:"tok,omitempty"`
	Outcome Outcome       `json:"o,omitempty"`
	Err     string        `json:"e,omitempty"`
}

// Recorder appends records to a file (one unbuffered write per record, so a
// SIGKILLed process loses nothing it has written) or to memory. It is safe for
// concurrent use.
type Recorder struct {
	client string
	mu     sync.Mutex
	next   int64
	f      *os.File
	mem    []Record
}

// NewRecorder returns a recorder for client writing to path (appending), or
// keeping records in memory when path is "".
func NewRecorder(client, path string) (*Recorder, error) {
	r := &Recorder{client: client}
	if path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		r.f = f
	}
	return r, nil
}

// Client returns the client name the recorder writes.
func (r *Recorder) Client() string { return r.client }

// Close closes the file.
func (r *Recorder) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}

// Records returns the in-memory records.
func (r *Recorder) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.mem...)
}

func (r *Recorder) write(rec Record) {
	rec.Client = r.client
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		r.mem = append(r.mem, rec)
		return
	}
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	if _, err := r.f.Write(append(b, '\n')); err != nil {
		panic(fmt.Sprintf("history: write: %v", err))
	}
}

// Call records the start of an operation and returns its id.
func (r *Recorder) Call(kind Kind, name string, ttl time.Duration, token int64) int64 {
	r.mu.Lock()
	r.next++
	id := r.next
	r.mu.Unlock()
	r.write(Record{ID: id, Kind: kind, Name: name, T: time.Now().UnixNano(), TTL: ttl, Token: token})
	return id
}

// Return records the end of operation id.
func (r *Recorder) Return(id int64, kind Kind, name string, token int64, out Outcome, err error) {
	rec := Record{ID: id, Return: true, Kind: kind, Name: name, T: time.Now().UnixNano(), Token: token, Outcome: out}
	if err != nil {
		rec.Err = err.Error()
	}
	r.write(rec)
}

// Hold records that the holder of token still held name at this moment.
func (r *Recorder) Hold(name string, token int64) { r.HoldAt(name, token, time.Now()) }

// HoldAt records that the holder of token still held name at the moment at.
func (r *Recorder) HoldAt(name string, token int64, at time.Time) {
	r.mu.Lock()
	r.next++
	id := r.next
	r.mu.Unlock()
	r.write(Record{ID: id, Kind: Hold, Name: name, T: at.UnixNano(), Token: token, Outcome: OK})
}

// Load reads history files (missing files are skipped).
func Load(paths ...string) ([]Record, error) {
	var out []Record
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			var rec Record
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				// A process killed in the middle of a write leaves a torn last
				// line; it carries no completed fact, so it is skipped.
				continue
			}
			out = append(out, rec)
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Op is a completed (or pending) operation assembled from its records.
type Op struct {
	Client  string
	Kind    Kind
	Name    string
	Call    int64
	Ret     int64 // math.MaxInt64 when the outcome is unknown
	TTL     time.Duration
	Token   int64
	Outcome Outcome // Unknown for errors, timeouts and pending calls
	Err     string
}

// Ops pairs calls with returns. Calls without a return, and returns with an
// Unknown outcome, become operations with Ret = math.MaxInt64.
func Ops(recs []Record) []Op {
	type key struct {
		client string
		id     int64
	}
	calls := map[key]*Op{}
	var order []key
	var ops []Op
	for _, rec := range recs {
		if rec.Kind == Hold {
			ops = append(ops, Op{Client: rec.Client, Kind: Hold, Name: rec.Name, Call: rec.T, Ret: rec.T, Token: rec.Token, Outcome: OK})
			continue
		}
		k := key{rec.Client, rec.ID}
		if !rec.Return {
			calls[k] = &Op{Client: rec.Client, Kind: rec.Kind, Name: rec.Name, Call: rec.T, Ret: math.MaxInt64,
				TTL: rec.TTL, Token: rec.Token, Outcome: Unknown}
			order = append(order, k)
			continue
		}
		op := calls[k]
		if op == nil {
			continue
		}
		op.Outcome, op.Err = rec.Outcome, rec.Err
		if rec.Token != 0 {
			op.Token = rec.Token
		}
		if rec.Outcome != Unknown && rec.Outcome != Pending {
			op.Ret = rec.T
		} else {
			op.Outcome = Unknown
		}
	}
	for _, k := range order {
		ops = append(ops, *calls[k])
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// Summary counts what a history holds.
type Summary struct {
	Ops, Granted, Busy, Refused, Released, Unknown, Holds int
}

func (s Summary) String() string {
	refused := ""
	if s.Refused > 0 {
		refused = fmt.Sprintf(", %d refused", s.Refused)
	}
	return fmt.Sprintf("%d ops: %d granted, %d busy%s, %d released, %d unknown, %d hold confirmations",
		s.Ops, s.Granted, s.Busy, refused, s.Released, s.Unknown, s.Holds)
}

// Summarize counts ops by outcome.
func Summarize(ops []Op) Summary {
	var s Summary
	s.Ops = len(ops)
	for _, op := range ops {
		switch {
		case op.Kind == Hold:
			s.Holds++
		case op.Outcome == Unknown:
			s.Unknown++
		case op.Kind == Acquire && op.Outcome == OK:
			s.Granted++
		case op.Kind == Acquire && op.Outcome == Busy:
			s.Busy++
		case op.Kind == Acquire && op.Outcome == Refused:
			s.Refused++
		case op.Kind == Release && op.Outcome == OK:
			s.Released++
		}
	}
	return s
}

// CheckTokens verifies that granted tokens are unique per name and that an
// acquisition that started after another one returned got a greater token.
func CheckTokens(ops []Op) error {
	type grant struct {
		call, ret, token int64
		client           string
	}
	byName := map[string][]grant{}
	for _, op := range ops {
		if op.Kind == Acquire && op.Outcome == OK {
			byName[op.Name] = append(byName[op.Name], grant{op.Call, op.Ret, op.Token, op.Client})
		}
	}
	var errs []error
	for name, gs := range byName {
		seen := map[int64]grant{}
		for _, g := range gs {
			if g.token <= 0 {
				errs = append(errs, fmt.Errorf("%s: %s was granted a non-positive token %d", name, g.client, g.token))
			}
			if prev, ok := seen[g.token]; ok {
				errs = append(errs, fmt.Errorf("%s: token %d granted twice (%s and %s)", name, g.token, prev.client, g.client))
			}
			seen[g.token] = g
		}
		byRet := append([]grant(nil), gs...)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
		byCall := append([]grant(nil), gs...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
		var maxTok int64
		var maxFrom grant
		j := 0
		for _, g := range byCall {
			for j < len(byRet) && byRet[j].ret < g.call {
				if byRet[j].token > maxTok {
					maxTok, maxFrom = byRet[j].token, byRet[j]
				}
				j++
			}
			if maxTok != 0 && g.token <= maxTok {
				errs = append(errs, fmt.Errorf("%s: token went backwards: %s got %d after %s had got %d",
					name, g.client, g.token, maxFrom.client, maxTok))
			}
		}
	}
	return errors.Join(errs...)
}

// Interval is a definitely-held interval: from the return of a granted
// acquire to the last moment its holder confirmed it still held the lock.
type Interval struct {
	Name       string
	Client     string
	Token      int64
	Start, End int64
}

// HeldIntervals returns the definitely-held interval of each granted token
// that recorded at least one Hold.
func HeldIntervals(ops []Op) []Interval {
	type k struct {
		name, client string
		token        int64
	}
	m := map[k]*Interval{}
	for _, op := range ops {
		if op.Kind == Acquire && op.Outcome == OK {
			key := k{op.Name, op.Client, op.Token}
			if iv, ok := m[key]; ok {
				if op.Ret < iv.Start {
					iv.Start = op.Ret
				}
				continue
			}
			m[key] = &Interval{Name: op.Name, Client: op.Client, Token: op.Token, Start: op.Ret, End: op.Ret}
		}
	}
	for _, op := range ops {
		if op.Kind != Hold {
			continue
		}
		if iv, ok := m[k{op.Name, op.Client, op.Token}]; ok && op.Call > iv.End {
			iv.End = op.Call
		}
	}
	out := make([]Interval, 0, len(m))
	for _, iv := range m {
		out = append(out, *iv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// CheckHoldOrder verifies that fencing tokens increase in the order the
// lock was held: a definitely-held interval that starts after another one
// ended has a greater token. (CheckTokens compares acquisitions by when
// they were called and returned; a waiter whose acquire was called early
// and granted late is caught here.)
func CheckHoldOrder(ops []Op) error {
	byName := map[string][]Interval{}
	for _, iv := range HeldIntervals(ops) {
		byName[iv.Name] = append(byName[iv.Name], iv)
	}
	var errs []error
	for name, ivs := range byName {
		byEnd := append([]Interval(nil), ivs...)
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
		var maxTok int64
		var maxFrom Interval
		j := 0
		for _, iv := range ivs { // sorted by start
			for j < len(byEnd) && byEnd[j].End < iv.Start {
				if byEnd[j].Token > maxTok {
					maxTok, maxFrom = byEnd[j].Token, byEnd[j]
				}
				j++
			}
			if maxTok != 0 && iv.Token <= maxTok {
				errs = append(errs, fmt.Errorf("%s: token went backwards in hold order: %s held with token %d from %s, after %s had held it with token %d until %s",
					name, iv.Client, iv.Token, time.Unix(0, iv.Start).UTC().Format("15:04:05.000000"),
					maxFrom.Client, maxTok, time.Unix(0, maxFrom.End).UTC().Format("15:04:05.000000")))
			}
		}
	}
	return errors.Join(errs...)
}

// CheckOverlaps verifies that no two definitely-held intervals of one name overlap.
func CheckOverlaps(ops []Op) error {
	byName := map[string][]Interval{}
	for _, iv := range HeldIntervals(ops) {
		byName[iv.Name] = append(byName[iv.Name], iv)
	}
	var errs []error
	for name, ivs := range byName {
		// Sorted by start: each interval must start after the latest end so far.
		var last Interval
		for i, iv := range ivs {
			if i > 0 && iv.Start <= last.End {
				errs = append(errs, fmt.Errorf("%s: overlap: %s (token %d) held until %s, %s (token %d) held from %s",
					name, last.Client, last.Token, time.Unix(0, last.End).UTC().Format("15:04:05.000000"),
					iv.Client, iv.Token, time.Unix(0, iv.Start).UTC().Format("15:04:05.000000")))
			}
			if i == 0 || iv.End > last.End {
				last = iv
			}
		}
	}
	return errors.Join(errs...)
}

// Check runs every check on ops: the O(n log n) token, overlap and hold-order checks and
// porcupine (bounded by timeout). It returns porcupine's verdict (Unknown when
// the timeout ran out, which is not an error by itself) and an error for every
// violation found.
func Check(ops []Op, timeout time.Duration) (linearizable porcupine.CheckResult, err error) {
	if err := errors.Join(CheckTokens(ops), CheckOverlaps(ops), CheckHoldOrder(ops)); err != nil {
		// Already illegal; porcupine would only spend its timeout saying so.
		return porcupine.Illegal, err
	}
	var errs []error
	res := porcupine.CheckOperationsTimeout(Model(), PorcupineOps(ops), timeout)
	if res == porcupine.Illegal {
		errs = append(errs, errors.New("porcupine: history is not linearizable against the lease-lock model"))
	}
	return res, errors.Join(errs...)
}
