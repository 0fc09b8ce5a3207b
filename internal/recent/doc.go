// Package recent remembers when something last happened to each name (a
// Locker met a queue on it, a DB released it), for hints that may be wrong
// at no cost but a statement: the memory is bounded and starts over when
// full.
package recent
