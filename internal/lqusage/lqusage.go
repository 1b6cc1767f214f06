// Package lqusage keeps each LocalQueue's Admission Fair Sharing usage in
// the sluice-lq-usage bucket, one key per LocalQueue. The admission
// replica that decides for the LocalQueue's ClusterQueue writes it; a
// replica that restarts, or takes the cohort tree over, reads it back so
// that the history survives both; the watcher reports it in the
// LocalQueue's status.fairSharing.
package lqusage

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
)

// Bucket is the bucket of LocalQueue usage.
const Bucket = bus.BucketLQUsage

// ErrBadKey: a key that names no LocalQueue.
var ErrBadKey = errors.New("not a LocalQueue's usage key")

// Key is the key of LocalQueue namespace/name: namespaces hold no '/'.
func Key(namespace, name string) string { return namespace + "/" + name }

// Parse splits a key into namespace and name.
func Parse(key string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(key, "/")
	if !ok || ns == "" || n == "" {
		return "", "", fmt.Errorf("%q: %w", key, ErrBadKey)
	}
	return ns, n, nil
}

// Value is what the bucket holds for one LocalQueue.
type Value struct {
	// ConsumedResources is the decayed usage per resource, in the
	// resource's unit (cores for cpu, bytes for memory).
	ConsumedResources map[string]float64 `json:"consumedResources"`
	LastUpdate        time.Time          `json:"lastUpdate"`
	// WeightedShare is what the queue's workloads are ordered by (its
	// weighted usage over its weight); absent when infinite (weight 0).
	WeightedShare *float64 `json:"weightedShare,omitempty"`
}

// Encode turns the engine's usage into the stored value.
func Encode(u engine.LocalQueueUsage) ([]byte, error) {
	v := Value{ConsumedResources: u.Consumed, LastUpdate: u.LastUpdate.UTC()}
	if !math.IsInf(u.Share, 0) && !math.IsNaN(u.Share) {
		share := u.Share
		v.WeightedShare = &share
	}
	return json.Marshal(v)
}

// Decode reads a stored value; an error says what is wrong with it.
func Decode(b []byte) (Value, error) {
	var v Value
	if err := json.Unmarshal(b, &v); err != nil {
		return Value{}, fmt.Errorf("LocalQueue usage: %w", err)
	}
	for r, q := range v.ConsumedResources {
		if q < 0 || math.IsNaN(q) || math.IsInf(q, 0) {
			return Value{}, fmt.Errorf("LocalQueue usage: consumedResources[%s] = %v: must be a non-negative number", r, q)
		}
	}
	return v, nil
}

// Engine is the value as the engine restores it.
func (v Value) Engine() engine.LocalQueueUsage {
	return engine.LocalQueueUsage{Consumed: v.ConsumedResources, LastUpdate: v.LastUpdate}
}

// Resources is the usage as a ResourceList, to thousandths of a unit, for
// the LocalQueue's status.
func (v Value) Resources() corev1.ResourceList {
	out := make(corev1.ResourceList, len(v.ConsumedResources))
	for r, q := range v.ConsumedResources {
		out[corev1.ResourceName(r)] = *resource.NewMilliQuantity(int64(math.Round(min(q*1000, math.MaxInt64/2))), resource.DecimalSI)
	}
	return out
}
