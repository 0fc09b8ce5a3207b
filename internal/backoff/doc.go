// Package backoff holds the jitter of the library's retry pauses.
package backoff
