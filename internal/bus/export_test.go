package bus

// WithCopiesDropped makes the watch blind to the copies of the bucket's
// writes while drop returns true, as a watch is that misses them. It
// takes effect where the watch starts its bucket's follower (the first
// watch of the bucket on its connection).
func WithCopiesDropped(drop func() bool) WatchOption {
	return func(o *watchOptions) { o.drop = drop }
}

// Followers is how many buckets are followed for watches now.
func Followers() int {
	followers.Lock()
	defer followers.Unlock()
	return len(followers.m)
}
