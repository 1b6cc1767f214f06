package events

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// Event is implemented by every event type. All methods work on the zero
// value except Validate, and none has side effects.
type Event interface {
	// Type is the CloudEvents type, dev.sluice.<entity>.v1.<transition>.
	Type() string
	// NATSSubject is the subject the event is published on.
	NATSSubject() string
	// CESubject is the CloudEvents subject attribute: "namespace/name" of
	// the workload (or object) the event is about.
	CESubject() string
	// Validate checks the fields; a failure wraps ErrInvalidEvent.
	Validate() error
}

// registry lists every event type once, in documentation order.
var registry = []Event{
	WorkloadSubmittedV1{},
	WorkloadPendingV1{},
	WorkloadReservedV1{},
	WorkloadAdmittedV1{},
	WorkloadPreemptedV1{},
	WorkloadEvictedV1{},
	WorkloadMovedV1{},
	WorkloadResizedV1{},
	WorkloadStartedV1{},
	WorkloadStoppedV1{},
	WorkloadFinishedV1{},
	WorkloadDeletedV1{},
	PreemptionRequestedV1{},
	QuotaReleasedV1{},
	QuotaUsageV1{},
	ConfigChangedV1{},
	CheckUpdatedV1{},
}

var byType = func() map[string]reflect.Type {
	m := make(map[string]reflect.Type, len(registry))
	for _, e := range registry {
		m[e.Type()] = reflect.TypeOf(e)
	}
	return m
}()

// All returns the zero value of every registered event type.
func All() []Event {
	out := make([]Event, len(registry))
	copy(out, registry)
	return out
}

// Known reports whether eventType is registered.
func Known(eventType string) bool {
	_, ok := byType[eventType]
	return ok
}

// New returns a pointer to a new zero value of the Go type of eventType
// (e.g. *WorkloadAdmittedV1), ready to unmarshal into.
func New(eventType string) (Event, error) {
	t, ok := byType[eventType]
	if !ok {
		return nil, &DecodeError{Reason: ReasonUnknownType, Field: HeaderType, Err: fmt.Errorf("%w: %q", ErrUnknownType, eventType)}
	}
	ev, ok := reflect.New(t).Interface().(Event)
	if !ok {
		return nil, fmt.Errorf("events: %s does not implement Event", t)
	}
	return ev, nil
}

// Parse decodes data as the payload of eventType and validates it. The
// result is the value type (e.g. WorkloadAdmittedV1), not a pointer.
func Parse(eventType string, data []byte) (Event, error) {
	ptr, err := New(eventType)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, ptr); err != nil {
		return nil, &DecodeError{Reason: ReasonBadData, Err: err}
	}
	ev, ok := reflect.ValueOf(ptr).Elem().Interface().(Event)
	if !ok {
		return nil, fmt.Errorf("events: %T does not implement Event", ptr)
	}
	if err := ev.Validate(); err != nil {
		return nil, &DecodeError{Reason: ReasonInvalidData, Err: err}
	}
	return ev, nil
}

// WorkloadOf returns the workload an event is about: the workload of a
// workload event, the preemptor of a preemption request, the workload
// whose quota a release frees. Events about no workload report false.
func WorkloadOf(ev Event) (WorkloadRef, bool) {
	switch e := ev.(type) {
	case WorkloadSubmittedV1:
		return e.Workload, true
	case WorkloadPendingV1:
		return e.Workload, true
	case WorkloadReservedV1:
		return e.Workload, true
	case WorkloadAdmittedV1:
		return e.Workload, true
	case WorkloadPreemptedV1:
		return e.Workload, true
	case WorkloadEvictedV1:
		return e.Workload, true
	case WorkloadMovedV1:
		return e.Workload, true
	case WorkloadResizedV1:
		return e.Workload, true
	case WorkloadStartedV1:
		return e.Workload, true
	case WorkloadStoppedV1:
		return e.Workload, true
	case WorkloadFinishedV1:
		return e.Workload, true
	case WorkloadDeletedV1:
		return e.Workload, true
	case PreemptionRequestedV1:
		return e.Preemptor, true
	case QuotaReleasedV1:
		return e.Workload, true
	case CheckUpdatedV1:
		return e.Workload, true
	}
	return WorkloadRef{}, false
}
