package queueconfig

import (
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/internal/engine"
)

// AdmissionFairSharing is Kueue's admissionFairSharing block of a
// Configuration, under Kueue's names: with it, ClusterQueues whose
// admissionScope is UsageBasedAdmissionFairSharing order their pending
// workloads by their LocalQueues' recent usage (engine.AdmissionFairSharing).
type AdmissionFairSharing struct {
	// UsageHalfLifeTime: after it, a LocalQueue's past usage counts half;
	// 0 keeps no history.
	UsageHalfLifeTime metav1.Duration `json:"usageHalfLifeTime"`
	// UsageSamplingInterval: how often the usage is brought up to date
	// (DefaultUsageSamplingInterval when left out or 0).
	UsageSamplingInterval metav1.Duration `json:"usageSamplingInterval"`
	// ResourceWeights weigh each resource's usage (default 1).
	ResourceWeights map[string]float64 `json:"resourceWeights,omitempty"`
}

// DefaultUsageSamplingInterval is Kueue's default usageSamplingInterval.
const DefaultUsageSamplingInterval = 5 * time.Minute

// Validate checks the block as Kueue does, naming fields under p.
func (a *AdmissionFairSharing) Validate(p *field.Path) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	if a.UsageHalfLifeTime.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("usageHalfLifeTime"), a.UsageHalfLifeTime.Duration.String(), "must not be negative"))
	}
	if a.UsageSamplingInterval.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("usageSamplingInterval"), a.UsageSamplingInterval.Duration.String(), "must be greater than 0"))
	}
	for _, r := range slices.Sorted(maps.Keys(a.ResourceWeights)) {
		if w := a.ResourceWeights[r]; w < 0 {
			errs = append(errs, field.Invalid(p.Child("resourceWeights").Key(r), fmt.Sprint(w), "must not be negative"))
		}
	}
	return errs
}

// Engine gives the engine's settings, Kueue's defaults filled in; nil
// when the block is absent (the feature is off).
func (a *AdmissionFairSharing) Engine() *engine.AdmissionFairSharing {
	if a == nil {
		return nil
	}
	out := &engine.AdmissionFairSharing{HalfLife: a.UsageHalfLifeTime.Duration, SamplingInterval: a.UsageSamplingInterval.Duration,
		ResourceWeights: maps.Clone(a.ResourceWeights)}
	if out.SamplingInterval <= 0 {
		out.SamplingInterval = DefaultUsageSamplingInterval
	}
	return out
}
