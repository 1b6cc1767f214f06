// Package workloads names the workload records that job integrations keep
// in the sluice-workloads KV bucket: one key per job, holding the submitted
// workload (pod sets, queue, priority) as JSON. The record exists from
// submission until the job finishes or is deleted; it is what lets every
// service rebuild its state after a restart.
package workloads

import (
	"strings"

	"github.com/sluice-dev/sluice/events"
)

// Bucket is the KV bucket of workload records.
const Bucket = "sluice-workloads"

// Key is the KV key of a workload: kind.namespace.name. Kinds and
// namespaces hold no dots, so the name is everything after the second.
func Key(w events.WorkloadRef) string { return w.Kind + "." + w.Namespace + "." + w.Name }

// EngineKey is the engine's key for a workload: kind/namespace/name.
func EngineKey(w events.WorkloadRef) string { return w.Kind + "/" + w.Namespace + "/" + w.Name }

// EngineKeyFromKV turns a KV key into the engine's key.
func EngineKeyFromKV(key string) string {
	parts := strings.SplitN(key, ".", 3)
	if len(parts) != 3 {
		return key
	}
	return parts[0] + "/" + parts[1] + "/" + parts[2]
}

// KVKeyFromEngine turns the engine's key into a KV key.
func KVKeyFromEngine(key string) string {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 {
		return key
	}
	return parts[0] + "." + parts[1] + "." + parts[2]
}

// AdmittedID is the event id of the announcement of one admission
// (dev.sluice.workload.v1.admitted), named by ledger.Reservation.Admission.
// The admission service publishes under it, and an integration looks for
// it before it starts the job, so a start never precedes its admission.
func AdmittedID(w events.WorkloadRef, admission string) string {
	return events.ID(events.TypeWorkloadAdmittedV1, w.UID, admission)
}
