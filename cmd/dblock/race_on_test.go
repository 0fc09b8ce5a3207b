//go:build race

package main

// raceBuild reports that the tests run under the race detector, so the
// binary they build is instrumented too.
const raceBuild = true
