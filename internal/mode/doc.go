// Package mode is what every lock mode shares and users never call: the
// Lease constructor and its control, option resolution and validation, Run
// (the body of every Do), and the library's silent default logger.
package mode
