package pessimistic

// TestHooks let tests order events between Lockers: BeforeBegin runs in an
// acquisition attempt before its transaction begins (on SQLite after its
// fencing tokens were issued), Watched after each pass of the session
// watcher that asked the server. Either may be nil.
type TestHooks struct {
	BeforeBegin func(names []string)
	Watched     func(err error)
}

// SetTestHooks installs hooks on l; call it before l is used.
func SetTestHooks(l *Locker, h TestHooks) {
	l.hooks4test = testHooks{beforeBegin: h.BeforeBegin, watched: h.Watched}
}
