//go:build !race

package main

// raceBuild reports that the tests run without the race detector.
const raceBuild = false
