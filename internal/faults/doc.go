// Package faults holds dblock's fault-injection tests: killed processes,
// killed connections, network faults through an in-process toxiproxy,
// PostgreSQL failover, database restarts, PgBouncer and least privilege.
//
// It is its own module so that its test-only dependencies (toxiproxy,
// porcupine) never enter the library's go.mod. Run it with `make faults`.
package faults
