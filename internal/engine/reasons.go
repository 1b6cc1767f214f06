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

// News reports whether a pending reason of class next (ReasonClass) is
// worth telling after one of class prev. Only a change in kind is. Which
// workload it waits behind or which preemptor keeps quota, or a number, is
// not (ReasonClass takes them out), nor is a move between the head of its
// queue, which says what quota it lacks, and a place behind the head,
// which says only that it waits, nor one between lacking unused quota and
// finding the quota it fits in kept for a preemptor (quota others hold,
// running or about to run): each pair is the same wait for quota, and its
// live reason and place are in the pending API. Waiting for its own
// preemption victims is news, and so is a first reason (prev "").
func News(prev, next string) bool {
	pq, prevPos := PositionQueue(prev)
	nq, nextPos := PositionQueue(next)
	switch {
	case prev == next:
		return false
	case prevPos && nextPos:
		return pq != nq
	case nextPos:
		// Someone got ahead of it: it still waits for quota.
		return !AwaitsQuota(prev)
	case prevPos:
		// It reached the head of its queue, short of quota.
		return !ShortOfQuota(next) && !KeptForPreemptor(next)
	case ShortOfQuota(prev) && KeptForPreemptor(next), KeptForPreemptor(prev) && ShortOfQuota(next):
		return false
	}
	return true
}

// Retold says whether a reason of class next is news after one of class
// prev (News), and which class to judge the next reason against: next
// when it is news, else the more telling of the two, so that a reason
// saying what quota it lacks is not judged against a place in line.
func Retold(prev, next string) (class string, news bool) {
	if News(prev, next) {
		return next, true
	}
	if _, was := PositionQueue(prev); was {
		if _, is := PositionQueue(next); !is {
			return next, false
		}
	}
	return prev, false
}

// AwaitsQuota reports whether a pending reason is a wait for quota: short
// of it, behind others in its queue, or for preempted workloads to give
// theirs up.
func AwaitsQuota(reason string) bool {
	_, pos := PositionQueue(reason)
	return pos || ShortOfQuota(reason) || strings.HasSuffix(reason, waitingForRelease)
}
