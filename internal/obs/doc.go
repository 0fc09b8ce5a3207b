// Package obs is what the lock packages report through: Events carries an
// acquisition's life (acquired, released, lost, a failed renewal) to the
// application's dblock.Hooks and to the OpenTelemetry instruments, and a
// Recorder times acquire, release and Do calls as spans and histograms.
// The names and attributes are those documented in package telemetry.
package obs
