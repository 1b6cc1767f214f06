package bus

// WithCopiesDropped makes the watch blind to the copies of the bucket's
// writes while drop returns true, as a watch is that misses them.
func WithCopiesDropped(drop func() bool) WatchOption {
	return func(w *kvWatch) { w.drop = drop }
}
