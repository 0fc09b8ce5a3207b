package postgres

// Bounded is bounded, for the tests of package postgres_test.
var Bounded = bounded
