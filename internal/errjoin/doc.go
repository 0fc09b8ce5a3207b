// Package errjoin joins errors as errors.Join does, on one line: the
// library's errors read as one line ("fn failed; dblock: "x" lost: lease
// expired"), so that a log line or a CLI's stderr line holds them whole.
package errjoin
