package engine

import "strings"

// Fixed parts of the pending reasons of a wait for quota, so that a
// reader can tell the kinds of waiting apart without parsing the text.
const (
	waitingBehind     = "waiting behind "
	waitingIn         = "waiting in ClusterQueue "
	insufficientQuota = "insufficient unused quota for "
	waitingForRelease = "preempted workload(s) to release quota"
	quotaKeptFor      = "the quota it fits in is kept for "
)

// PositionQueue reports whether a pending reason says only where the
// workload waits in its queue ("waiting behind …" or "waiting in …"), and
// names that ClusterQueue.
func PositionQueue(reason string) (clusterQueue string, ok bool) {
	if !strings.HasPrefix(reason, waitingBehind) && !strings.HasPrefix(reason, waitingIn) {
		return "", false
	}
	_, q, _ := strings.Cut(reason, "ClusterQueue ")
	return q, true
}

// ShortOfQuota reports whether a pending reason says the workload, at the
// head of its queue, lacks unused quota.
func ShortOfQuota(reason string) bool { return strings.Contains(reason, insufficientQuota) }

// KeptForPreemptor reports whether a pending reason says the quota the
// workload would fit in is kept for another workload, which waits for its
// preemption victims to give theirs up.
func KeptForPreemptor(reason string) bool { return strings.HasPrefix(reason, quotaKeptFor) }

// ReasonClass is what a pending reason says with the workload it waits
// behind (or the preemptor quota is kept for) and every number taken out:
// two reasons of one class are the same wait, told apart only by a place
// in line or an amount that moved.
func ReasonClass(reason string) string {
	for _, before := range []string{waitingBehind, "kept for "} {
		if i := strings.Index(reason, before); i >= 0 {
			rest := reason[i+len(before):]
			if j := strings.IndexByte(rest, ' '); j >= 0 {
				reason = reason[:i+len(before)] + "*" + rest[j:]
			}
		}
	}
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, reason)
}

// AwaitsQuota reports whether a pending reason is a wait for quota: short
// of it, behind others in its queue, or for preempted workloads to give
// theirs up.
func AwaitsQuota(reason string) bool {
	_, pos := PositionQueue(reason)
	return pos || ShortOfQuota(reason) || strings.HasSuffix(reason, waitingForRelease)
}
