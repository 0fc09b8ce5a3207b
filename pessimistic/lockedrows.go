package pessimistic

import (
	"slices"
	"strings"

	"github.com/dblock-go/dblock/internal/store"
)

// lockedRows is what one lock statement found, sorted by name (byte
// order, whatever the database's collation): the holder of each name that
// has a row. A slice rather than a map: the common lock is of one name,
// and a map of one entry cost its hold three allocations.
type lockedRows []store.LockedName

// sortedRows sorts rows by name, in place, for lookups.
func sortedRows(rows []store.LockedName) lockedRows {
	slices.SortFunc(rows, func(a, b store.LockedName) int { return strings.Compare(a.Name, b.Name) })
	return rows
}

// holder returns the holder found for name, and whether name had a row.
func (f lockedRows) holder(name string) (store.Holder, bool) {
	i, ok := slices.BinarySearchFunc(f, name, func(r store.LockedName, n string) int { return strings.Compare(r.Name, n) })
	if !ok {
		return store.Holder{}, false
	}
	return f[i].Holder, true
}
