package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/dblock-go/dblock/internal/store"
)

// Free names that a waiter reserved: a waiter of another process (see
// package optimistic) keeps a name it waits for, so that only it may take
// the name once freed, until the reservation lapses (about a second past
// the waiter's last look). Status lists such a name apart, never as free.

// reservedJSON is a free name kept for one waiter in status --json.
type reservedJSON struct {
	Name          string `json:"name"`
	ReservedFor   string `json:"reserved_for"`
	WaitingSince  string `json:"reserved_waiting_since"`
	ReservedUntil string `json:"reserved_until"`
}

// reservedJSONOf returns the reserved free names as status --json lists them.
func reservedJSONOf(rows []store.LockRow) []reservedJSON {
	out := []reservedJSON{}
	for _, r := range rows {
		out = append(out, reservedJSON{
			Name: r.Name, ReservedFor: r.Next.Owner,
			WaitingSince:  r.Next.Since.UTC().Format(jsonTime),
			ReservedUntil: r.Next.Until.UTC().Format(jsonTime),
		})
	}
	return out
}

// isReserved reports whether name is among the reserved free names.
func isReserved(rows []store.LockRow, name string) bool {
	return slices.ContainsFunc(rows, func(r store.LockRow) bool { return r.Name == name })
}

// printReservedFree lists the reserved free names in the status table.
func printReservedFree(tw io.Writer, rows []store.LockRow) {
	for _, r := range rows {
		fmt.Fprintf(tw, "%s: free, kept for %s (waiting %s; reservation lapses in %s unless renewed)\n",
			r.Name, r.Next.Owner, human(r.Now.Sub(r.Next.Since)), human(r.Next.Until.Sub(r.Now)))
	}
}
