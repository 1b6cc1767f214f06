// Package workloop is the one loop over a rate-limited work queue that the
// integration, the watcher, the provisioning controller and the worker
// agent share: take a key, handle it, and map the result to the queue as
// a controller does. Success forgets the key's backoff; an error requeues
// it with backoff (after failed is told); After requeues it after a fixed
// delay, for a key that waits on something known to come.
package workloop

import (
	"errors"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// after is an error that asks for the key again after d.
type after struct {
	d   time.Duration
	err error
}

func (a *after) Error() string { return a.err.Error() }
func (a *after) Unwrap() error { return a.err }

// After wraps err so that Next requeues the key after d, without backoff
// and without telling failed.
func After(d time.Duration, err error) error { return &after{d: d, err: err} }

// Next handles one key of q; false once q is shut down (and drained).
func Next[T comparable](q workqueue.TypedRateLimitingInterface[T], handle func(T) error, failed func(T, error)) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	err := handle(key)
	var a *after
	switch {
	case err == nil:
		q.Forget(key)
	case errors.As(err, &a):
		q.AddAfter(key, a.d)
	default:
		if failed != nil {
			failed(key, err)
		}
		q.AddRateLimited(key)
	}
	return true
}
