package history

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const ttl = time.Second

func acq(client string, call, ret, tok int64, out Outcome) Op {
	if out == Unknown {
		ret = math.MaxInt64
	}
	return Op{Client: client, Kind: Acquire, Name: "n", Call: call, Ret: ret, TTL: ttl, Token: tok, Outcome: out}
}

func rel(client string, call, ret, tok int64, out Outcome) Op {
	if out == Unknown {
		ret = math.MaxInt64
	}
	return Op{Client: client, Kind: Release, Name: "n", Call: call, Ret: ret, Token: tok, Outcome: out}
}

func hold(client string, t, tok int64) Op {
	return Op{Client: client, Kind: Hold, Name: "n", Call: t, Ret: t, Token: tok, Outcome: OK}
}

func ms(n int64) int64 { return n * int64(time.Millisecond) }

// TestFaultHistoryChecker feeds the checker hand-written histories whose
// verdicts are known, so a checker that accepts everything cannot pass.
func TestFaultHistoryChecker(t *testing.T) {
	cases := []struct {
		name  string
		ops   []Op
		legal bool
		want  string // substring of the O(n) error, when illegal
	}{
		{"sequential hand-off", []Op{
			acq("a", ms(0), ms(1), 1, OK), hold("a", ms(2), 1), rel("a", ms(3), ms(4), 1, OK),
			acq("b", ms(5), ms(6), 2, OK), hold("b", ms(7), 2), rel("b", ms(8), ms(9), 2, OK),
		}, true, ""},
		{"refused while free (a transaction in flight held the row)", []Op{
			acq("a", ms(0), ms(1), 1, OK), rel("a", ms(2), ms(3), 1, OK), acq("b", ms(4), ms(5), 0, Refused),
			acq("b", ms(6), ms(7), 2, OK),
		}, true, ""},
		{"busy while held", []Op{
			acq("a", ms(0), ms(1), 1, OK), acq("b", ms(2), ms(3), 0, Busy), hold("a", ms(4), 1),
		}, true, ""},
		{"takeover after expiry", []Op{
			acq("a", ms(0), ms(1), 1, OK), hold("a", ms(2), 1), acq("b", ms(1100), ms(1101), 2, OK),
		}, true, ""},
		{"unknown acquire then takeover after its ttl", []Op{
			acq("a", ms(0), 0, 0, Unknown), acq("b", ms(10), ms(11), 0, Busy), acq("b", ms(1100), ms(1101), 2, OK),
		}, true, ""},
		{"unknown release then acquire", []Op{
			acq("a", ms(0), ms(1), 1, OK), rel("a", ms(2), 0, 1, Unknown), acq("b", ms(5), ms(6), 2, OK),
		}, true, ""},
		{"takeover before expiry", []Op{
			acq("a", ms(0), ms(1), 1, OK), acq("b", ms(10), ms(11), 2, OK),
		}, false, ""},
		{"overlapping holds", []Op{
			acq("a", ms(0), ms(1), 1, OK), acq("b", ms(1100), ms(1101), 2, OK), hold("a", ms(1200), 1),
		}, false, "overlap"},
		{"token goes backwards", []Op{
			acq("a", ms(0), ms(1), 5, OK), rel("a", ms(2), ms(3), 5, OK), acq("b", ms(4), ms(5), 3, OK),
		}, false, "backwards"},
		{"token lower than an earlier holder's (acquire called before it, granted after)", []Op{
			acq("a", ms(0), ms(40), 5, OK), acq("b", ms(10), ms(11), 6, OK), hold("b", ms(12), 6), rel("b", ms(20), ms(21), 6, OK),
			hold("a", ms(41), 5),
		}, false, "hold order"},
		{"token granted twice", []Op{
			acq("a", ms(0), ms(1), 5, OK), rel("a", ms(2), ms(3), 5, OK), acq("b", ms(4), ms(5), 5, OK),
		}, false, "twice"},
		{"busy while free", []Op{
			acq("a", ms(0), ms(1), 1, OK), rel("a", ms(2), ms(3), 1, OK), acq("b", ms(4), ms(5), 0, Busy),
		}, false, ""},
		{"release by a non-holder succeeds", []Op{
			acq("a", ms(0), ms(1), 1, OK), rel("b", ms(2), ms(3), 7, OK),
		}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(tc.ops, 10*time.Second)
			if tc.legal {
				if err != nil || res != porcupine.Ok {
					t.Fatalf("legal history rejected: result %v, err %v", res, err)
				}
				return
			}
			if res != porcupine.Illegal {
				t.Errorf("illegal history: porcupine says %v, want Illegal", res)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("illegal history: err %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestFaultHistoryRecorder round-trips records through a file, including a
// call that never returned (a killed process) and a torn last line.
func TestFaultHistoryRecorder(t *testing.T) {
	path := t.TempDir() + "/h.jsonl"
	r, err := NewRecorder("w1", path)
	if err != nil {
		t.Fatal(err)
	}
	id := r.Call(Acquire, "n", ttl, 0)
	r.Return(id, Acquire, "n", 4, OK, nil)
	r.Hold("n", 4)
	r.Call(Release, "n", 0, 4) // never returns
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := openAppend(path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"c":"w1","id":9,"k":"acq`)
	_ = f.Close()
	recs, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ops := Ops(recs)
	s := Summarize(ops)
	if s.Granted != 1 || s.Unknown != 1 || s.Holds != 1 || s.Ops != 3 {
		t.Fatalf("summary %v, want 1 granted, 1 unknown, 1 hold, 3 ops", s)
	}
	if _, err := Check(ops, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}
