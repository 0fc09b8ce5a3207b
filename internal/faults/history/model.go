package history

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
)

// state is one name's lease lock as the model sees it.
type state struct {
	// Holder is the token of the current holder: 0 when free, -1 when an
	// acquire whose token is unknown (an error or a timeout) took effect.
	Holder int64
	// Highest is the highest token granted so far (fencing tokens only grow).
	Highest int64
	// Expiry is a lower bound on the holder's expiry in the database: the
	// call time of the acquire or renewal that set it, plus the TTL. Nobody
	// may take the name over before it.
	Expiry int64
}

type input struct {
	Kind      Kind
	Call, Ret int64
	TTL       int64
	Token     int64
}

type output struct {
	Outcome Outcome
	Token   int64
}

// PorcupineOps converts ops to porcupine operations (inputs and outputs as
// the model expects them).
func PorcupineOps(ops []Op) []porcupine.Operation {
	clients := map[string]int{}
	out := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		id, ok := clients[op.Client]
		if !ok {
			id = len(clients)
			clients[op.Client] = id
		}
		ret := op.Ret
		if op.Outcome == Unknown {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{
			ClientId: id,
			Input:    input{Kind: op.Kind, Call: op.Call, Ret: ret, TTL: int64(op.TTL), Token: op.Token},
			Call:     op.Call,
			Output:   output{Outcome: op.Outcome, Token: op.Token},
			Return:   ret,
			Metadata: op.Name,
		})
	}
	return out
}

// step returns every state the lock can be in after op, none when op's
// outcome is impossible in s.
func step(s state, in input, out output) []state {
	expired := in.Ret >= s.Expiry // the holder's lease may have ended by the time op returned
	switch in.Kind {
	case Acquire:
		grant := func(tok int64) state {
			n := state{Holder: tok, Highest: s.Highest, Expiry: in.Call + in.TTL}
			if tok > n.Highest {
				n.Highest = tok
			}
			return n
		}
		switch out.Outcome {
		case OK:
			if out.Token > s.Highest && (s.Holder == 0 || expired) {
				return []state{grant(out.Token)}
			}
			return nil
		case Busy:
			if s.Holder != 0 {
				return []state{s}
			}
			return nil
		case Refused:
			return []state{s}
		default: // Unknown: it did not happen, or it took the name with a token we never saw.
			next := []state{s}
			if s.Holder == 0 || expired {
				next = append(next, grant(-1))
			}
			return next
		}
	case Release:
		free := state{Holder: 0, Highest: s.Highest}
		switch out.Outcome {
		case OK:
			if s.Holder == in.Token {
				return []state{free}
			}
			return nil
		case NotHeld:
			if s.Holder != in.Token {
				return []state{s}
			}
			if expired { // the reaper may have freed an expired lease
				return []state{free}
			}
			return nil
		default:
			if s.Holder == in.Token {
				return []state{s, free}
			}
			return []state{s}
		}
	case Renew:
		renewed := s
		if e := in.Call + in.TTL; e > renewed.Expiry {
			renewed.Expiry = e
		}
		switch out.Outcome {
		case OK:
			if s.Holder == in.Token {
				return []state{renewed}
			}
			return nil
		case NotHeld:
			if s.Holder != in.Token || expired {
				return []state{s}
			}
			return nil
		default:
			if s.Holder == in.Token {
				return []state{s, renewed}
			}
			return []state{s}
		}
	case Hold:
		// The holder of in.Token believed, at this instant, that it held the lock.
		if s.Holder == in.Token {
			return []state{s}
		}
		return nil
	}
	return nil
}

// Model is the porcupine model of a lease lock, partitioned by name.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			idx := map[string]int{}
			var parts [][]porcupine.Operation
			for _, op := range h {
				name, _ := op.Metadata.(string)
				i, ok := idx[name]
				if !ok {
					i = len(parts)
					idx[name] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], op)
			}
			return parts
		},
		Init: func() []any { return []any{state{}} },
		Step: func(st, in, out any) []any {
			next := step(st.(state), in.(input), out.(output))
			res := make([]any, len(next))
			for i, n := range next {
				res[i] = n
			}
			return res
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
		Hash: func(a any) uint64 {
			s := a.(state)
			return uint64(s.Holder)*1_000_003 ^ uint64(s.Highest)*7919 ^ uint64(s.Expiry)
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(input), out.(output)
			return fmt.Sprintf("%s(%d) -> %s %d", i.Kind, i.Token, o.Outcome, o.Token)
		},
		DescribeState: func(st any) string {
			s := st.(state)
			return fmt.Sprintf("holder=%d highest=%d", s.Holder, s.Highest)
		},
	}
	return nm.ToModel()
}
