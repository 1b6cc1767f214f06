package usage

// Followers is how many connections' buckets are followed for trackers.
func Followers() int {
	followers.Lock()
	defer followers.Unlock()
	return len(followers.m)
}
