package queueconfig

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/internal/engine"
)

// WaitForPodsReady is Kueue's waitForPodsReady configuration, under
// Kueue's names, for a Configuration document and the services' flags.
type WaitForPodsReady struct {
	// Enable is Kueue v1beta1's switch; left out, the block turns the
	// feature on, as in v1beta2.
	Enable *bool `json:"enable,omitempty"`
	// Timeout: 5m when left out.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// RecoveryTimeout: Timeout when left out; 0s turns it off.
	RecoveryTimeout   *metav1.Duration   `json:"recoveryTimeout,omitempty"`
	BlockAdmission    *bool              `json:"blockAdmission,omitempty"`
	RequeuingStrategy *RequeuingStrategy `json:"requeuingStrategy,omitempty"`
}

// RequeuingStrategy is how a workload evicted by PodsReadyTimeout queues
// again.
type RequeuingStrategy struct {
	// Timestamp: Eviction (default) or Creation.
	Timestamp          string `json:"timestamp,omitempty"`
	BackoffLimitCount  *int32 `json:"backoffLimitCount,omitempty"`
	BackoffBaseSeconds *int32 `json:"backoffBaseSeconds,omitempty"`
	BackoffMaxSeconds  *int32 `json:"backoffMaxSeconds,omitempty"`
}

// Kueue's defaults.
const (
	DefaultPodsReadyTimeout   = 5 * time.Minute
	DefaultBackoffBaseSeconds = 60
	DefaultBackoffMaxSeconds  = 3600
)

// Validate checks the block as Kueue does, naming fields under p.
func (w *WaitForPodsReady) Validate(p *field.Path) field.ErrorList {
	if w == nil {
		return nil
	}
	var errs field.ErrorList
	if w.Timeout != nil && w.Timeout.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("timeout"), w.Timeout.Duration.String(), "must be positive"))
	}
	if w.RecoveryTimeout != nil && w.RecoveryTimeout.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("recoveryTimeout"), w.RecoveryTimeout.Duration.String(), "must not be negative"))
	}
	if r := w.RequeuingStrategy; r != nil {
		rp := p.Child("requeuingStrategy")
		if r.Timestamp != "" && r.Timestamp != "Eviction" && r.Timestamp != "Creation" {
			errs = append(errs, field.NotSupported(rp.Child("timestamp"), r.Timestamp, []string{"Eviction", "Creation"}))
		}
		for _, f := range []struct {
			name string
			v    *int32
		}{{"backoffLimitCount", r.BackoffLimitCount}, {"backoffBaseSeconds", r.BackoffBaseSeconds}, {"backoffMaxSeconds", r.BackoffMaxSeconds}} {
			if f.v != nil && *f.v < 0 {
				errs = append(errs, field.Invalid(rp.Child(f.name), *f.v, "must not be negative"))
			}
		}
		if r.BackoffBaseSeconds != nil && r.BackoffMaxSeconds != nil && *r.BackoffMaxSeconds < *r.BackoffBaseSeconds {
			errs = append(errs, field.Invalid(rp.Child("backoffMaxSeconds"), *r.BackoffMaxSeconds, "must not be less than backoffBaseSeconds"))
		}
	}
	return errs
}

// Engine returns the engine's settings, with Kueue's defaults filled in;
// nil when the feature is off.
func (w *WaitForPodsReady) Engine() *engine.WaitForPodsReady {
	if w == nil || (w.Enable != nil && !*w.Enable) {
		return nil
	}
	out := &engine.WaitForPodsReady{
		Timeout:     DefaultPodsReadyTimeout,
		BackoffBase: DefaultBackoffBaseSeconds * time.Second,
		BackoffMax:  DefaultBackoffMaxSeconds * time.Second,
	}
	if w.Timeout != nil {
		out.Timeout = w.Timeout.Duration
	}
	out.RecoveryTimeout = out.Timeout
	if w.RecoveryTimeout != nil {
		out.RecoveryTimeout = w.RecoveryTimeout.Duration
	}
	out.BlockAdmission = w.BlockAdmission != nil && *w.BlockAdmission
	if r := w.RequeuingStrategy; r != nil {
		out.RequeueByCreation = r.Timestamp == "Creation"
		out.BackoffLimitCount = r.BackoffLimitCount
		if r.BackoffBaseSeconds != nil {
			out.BackoffBase = time.Duration(*r.BackoffBaseSeconds) * time.Second
		}
		if r.BackoffMaxSeconds != nil {
			out.BackoffMax = time.Duration(*r.BackoffMaxSeconds) * time.Second
		}
	}
	return out
}

// ValidateFairStrategies accepts the preemption strategy lists Kueue
// accepts: [LessThanOrEqualToFinalShare], [LessThanInitialShare], or both
// in that order; empty is the default (both).
func ValidateFairStrategies(p *field.Path, s []string) field.ErrorList {
	ok := len(s) == 0 ||
		(len(s) == 1 && (s[0] == engine.LessThanOrEqualToFinalShare || s[0] == engine.LessThanInitialShare)) ||
		(len(s) == 2 && s[0] == engine.LessThanOrEqualToFinalShare && s[1] == engine.LessThanInitialShare)
	if ok {
		return nil
	}
	return field.ErrorList{field.Invalid(p, s, "must be [LessThanOrEqualToFinalShare], [LessThanInitialShare] or [LessThanOrEqualToFinalShare, LessThanInitialShare], as in Kueue")}
}
