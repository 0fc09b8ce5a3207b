package store

import (
	"database/sql"
	"time"

	"github.com/dblock-go/dblock"
)

// Statement arguments that every acquisition passes with the same few
// values: a Go value converted to an interface is copied to the heap unless
// it is a constant, so these return constants' interfaces for the common
// values (an allocation fewer each per statement) and box the rest.

// noMetadata is a NULL metadata argument.
var noMetadata any = sql.NullString{}

// nullString is s as a statement argument, NULL when empty.
func nullString(s string) any {
	if s == "" {
		return noMetadata
	}
	return sql.NullString{String: s, Valid: true}
}

// modeArg is a lease's mode as a statement argument.
func modeArg(mode string) any {
	switch mode {
	case dblock.ModeOptimistic:
		return dblock.ModeOptimistic
	case dblock.ModeFair:
		return dblock.ModeFair
	case dblock.ModePessimistic:
		return dblock.ModePessimistic
	case dblock.ModeRead:
		return dblock.ModeRead
	case dblock.ModeWrite:
		return dblock.ModeWrite
	case dblock.ModeSchedule:
		return dblock.ModeSchedule
	}
	return mode
}

// ttlArg is a TTL in µs as a statement argument.
func ttlArg(ttl time.Duration) any {
	if ttl == dblock.TTLDefault {
		return int64(dblock.TTLDefault / time.Microsecond)
	}
	return ttl.Microseconds()
}
