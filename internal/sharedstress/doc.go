// Package sharedstress is the multi-process stress of shared locks: OS
// processes (this test binary re-executed through WorkerMain) take read and write locks of one
// name (KindRW), or permits of one semaphore (KindSemaphore), with the
// fair option or without (KindRWFair, KindSemaphoreFair), each
// recording every section it held in its own file: kind, token, permits,
// wall-clock entry and exit, and whether its lease still held at the exit.
// Some workers are killed with SIGKILL while they hold; their leases run
// out by the database clock and the others go on. The history is then
// checked: no write section overlaps any other section, tokens order as
// promised, and never more permits than the limit out at once.
package sharedstress
