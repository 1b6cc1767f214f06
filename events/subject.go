package events

import (
	"fmt"
	"strings"
)

// Subject layout. Every event subject is
//
//	sluice.<entity>.v1.<transition>.<kind>.<namespace>.<name>
//
// except the per-ClusterQueue usage snapshot, sluice.quota.v1.usage.<clusterqueue>.
// Config changes use the same seven tokens with "_" as the namespace of a
// cluster-scoped object. Dead letters go to sluice.dlq.<consumer>.
const (
	// SubjectRoot is the first token of every Sluice subject.
	SubjectRoot = "sluice"
	// DLQSubjectPrefix starts every dead-letter subject.
	DLQSubjectPrefix = SubjectRoot + ".dlq."
	// ClusterScope is the token standing for "no namespace".
	ClusterScope = "_"
)

// EncodeToken turns a Kubernetes name into one NATS subject token. Names may
// contain "." (the NATS token separator) but never "_", so "." is written as
// "_"; the empty string (no namespace) becomes ClusterScope. EncodeToken does
// not check the result: characters that are not valid in a Kubernetes name
// make NewMessage refuse the subject.
func EncodeToken(name string) string {
	if name == "" {
		return ClusterScope
	}
	return strings.ReplaceAll(name, ".", "_")
}

// DecodeToken reverses EncodeToken: ClusterScope becomes "", and every other
// "_" becomes ".".
func DecodeToken(token string) string {
	if token == ClusterScope {
		return ""
	}
	return strings.ReplaceAll(token, "_", ".")
}

// SubjectFilter builds a subscription filter for v1 events. An empty
// argument matches anything in its position. With kind and namespace both
// empty the filter ends in ">" and so also matches the shorter usage
// subjects, e.g. SubjectFilter("quota", "", "", "") is "sluice.quota.v1.*.>";
// otherwise it is seven tokens ending in "*" for the name, e.g.
// SubjectFilter("workload", "admitted", "job", "") is
// "sluice.workload.v1.admitted.job.*.*".
func SubjectFilter(entity, transition, kind, namespace string) string {
	head := SubjectRoot + "." + wildcard(entity) + ".v1." + wildcard(transition)
	if kind == "" && namespace == "" {
		return head + ".>"
	}
	return head + "." + wildcard(kind) + "." + wildcard(namespace) + ".*"
}

// DLQSubject is the dead-letter subject of a consumer.
func DLQSubject(consumer string) string { return DLQSubjectPrefix + EncodeToken(consumer) }

// WorkloadSubject is the subject of an event of type eventType about w.
func WorkloadSubject(eventType string, w WorkloadRef) string {
	return subjectBase(eventType) + "." + EncodeToken(w.Kind) + "." + EncodeToken(w.Namespace) + "." + EncodeToken(w.Name)
}

// subjectBase maps dev.sluice.<entity>.v1.<transition> to
// sluice.<entity>.v1.<transition>.
func subjectBase(eventType string) string {
	return SubjectRoot + "." + strings.TrimPrefix(eventType, TypePrefix)
}

func wildcard(tok string) string {
	if tok == "" {
		return "*"
	}
	return EncodeToken(tok)
}

// ValidateSubject checks a subject to publish on: tokens separated by ".",
// none empty, each made of [A-Za-z0-9_-] only (so no wildcard, space or
// control character can reach the server).
func ValidateSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("%w: empty", ErrInvalidSubject)
	}
	for i, tok := range strings.Split(subject, ".") {
		if tok == "" {
			return fmt.Errorf("%w: %q: token %d is empty", ErrInvalidSubject, subject, i)
		}
		for _, r := range tok {
			if !tokenRune(r) {
				return fmt.Errorf("%w: %q: token %q has %q", ErrInvalidSubject, subject, tok, r)
			}
		}
	}
	return nil
}

func tokenRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// SubjectWorkload returns what names the workload in a workload event's
// subject (its kind, namespace and name tokens), the same for every event
// about one workload; "" for any other subject.
func SubjectWorkload(subject string) string {
	parts := strings.SplitN(subject, ".", 5)
	if len(parts) != 5 || parts[0] != SubjectRoot || parts[1] != "workload" {
		return ""
	}
	return parts[4]
}

// WorkloadFilter matches the subject of every event about w, whatever its
// type.
func WorkloadFilter(w WorkloadRef) string {
	return SubjectRoot + ".workload.v1.*." + EncodeToken(w.Kind) + "." + EncodeToken(w.Namespace) + "." + EncodeToken(w.Name)
}
