// Package apidump lists the exported API of the module's public packages, one
// declaration a line, in the manner of Go's own api/ files:
//
//	pkg dblock, func NewOwner() string
//	pkg dblock, method (*Lease) Done() <-chan struct{}
//	pkg dblock, type Lease struct
//	pkg dialect, type Kind string
//
// The list is checked in (api/v1.txt) and compared by a test, so every change
// of the surface shows in review as a diff of that file.
package apidump
