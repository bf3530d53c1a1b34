// Package contention answers one question for the manager's fair shares (internal/fairqueue,
// internal/writeseats): has a namespace other than this one asked for the shared resource within the last
// window? A namespace alone may use all of a resource; while others use it too, each is held to its share.
package contention

import "time"

// DefaultWindow is how long after its last request a namespace still counts as using a resource.
const DefaultWindow = time.Second

// Recent remembers the latest request of any namespace and the latest of any other, enough to answer Others
// in constant time whatever the number of namespaces. It is not safe for concurrent use: its owner's lock
// guards it. The zero value has seen nothing.
type Recent struct {
	last            string
	lastAt, otherAt time.Time
}

// Mark records a request of ns at now.
func (r *Recent) Mark(ns string, now time.Time) {
	if ns != r.last {
		r.otherAt = r.lastAt // the latest of every namespace but ns: the one that asked last until now
		r.last = ns
	}
	r.lastAt = now
}

// Others reports whether a namespace other than ns asked within window (not positive: DefaultWindow) of now.
func (r *Recent) Others(ns string, now time.Time, window time.Duration) bool {
	other := r.otherAt
	if ns != r.last {
		other = r.lastAt
	}
	if window <= 0 {
		window = DefaultWindow
	}
	return !other.IsZero() && now.Sub(other) < window
}
