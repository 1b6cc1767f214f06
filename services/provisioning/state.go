package provisioning

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscaling "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/events"
)

// Labels and annotations on the requests this controller makes.
const (
	// WorkloadUIDLabel selects a workload's requests (and the informer
	// selects all requests made here by its presence).
	WorkloadUIDLabel = "sluice.dev/workload-uid"
	// WorkloadAnnotation is the workload, as JSON (events.WorkloadRef).
	WorkloadAnnotation = "sluice.dev/workload"
	// CheckAnnotation is the AdmissionCheck's name.
	CheckAnnotation = "sluice.dev/check"
	// AttemptAnnotation is the attempt's number, from 1.
	AttemptAnnotation = "sluice.dev/attempt"
	// AdmissionAnnotation names the reservation the request serves.
	AdmissionAnnotation = "sluice.dev/admission"
	// PodSetsAnnotation lists the workload's pod sets in the request,
	// comma separated: those the Ready answer's updates go to.
	PodSetsAnnotation = "sluice.dev/pod-sets"
)

// Job annotations whose suffix is a request parameter: Sluice's, and
// Kueue's so that Kueue users' jobs work unchanged.
var paramPrefixes = []string{"provreq.sluice.dev/", "provreq.kueue.x-k8s.io/"}

// Messages of answers without a request.
const (
	// NotNeeded: none of the workload's pod sets asks for a managed
	// resource.
	NotNeeded = "the provisioning request is not needed"
)

// maxName is the longest object name (a DNS subdomain).
const maxName = 253

// limitName keeps a generated name within maxName: a longer one is cut
// and ends in a hash of the whole, so two long names stay apart.
func limitName(name string) string {
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:maxName-len(h)-1], "-.") + "-" + h
}

// RequestName is the name of a workload's attempt n at a check.
func RequestName(w events.WorkloadRef, check string, attempt int32) string {
	return limitName(fmt.Sprintf("%s-%s-%s-%d", w.Kind, w.Name, check, attempt))
}

// TemplateName is the name of a request's pod template for a pod set.
func TemplateName(request, podSet string) string {
	return limitName("ppt-" + request + "-" + podSet)
}

// attemptOf reads a request's attempt number (0: not one of ours).
func attemptOf(pr *autoscaling.ProvisioningRequest) int32 {
	n, err := strconv.ParseInt(pr.Annotations[AttemptAnnotation], 10, 32)
	if err != nil || n < 1 {
		return 0
	}
	return int32(n)
}

// Backoff is the delay before retry n (from 1) of a failed request:
// base × 2^(n-1), at most maxSeconds.
func Backoff(n, base, maxSeconds int32) time.Duration {
	d := time.Duration(base) * time.Second
	for i := int32(1); i < n && d < time.Duration(maxSeconds)*time.Second; i++ {
		d *= 2
	}
	return min(d, time.Duration(maxSeconds)*time.Second)
}

// answerOf is the check's answer from a request's conditions, for the
// reservation it serves. started: the workload runs (a booking that
// expires then changes nothing). An answer with no State is Pending.
func answerOf(pr *autoscaling.ProvisioningRequest, spec v1beta1.ProvisioningRequestConfigSpec, started bool) checks.Answer {
	conds := pr.Status.Conditions
	limit, base, maxSeconds := spec.Retries()
	attempt := attemptOf(pr)
	retry := func(c *metav1.Condition, what string) checks.Answer {
		if attempt <= limit {
			return checks.Answer{State: events.CheckRetry, Message: fmt.Sprintf("Retrying after %s: %s", what, c.Message),
				RequeueAfter: Backoff(attempt, base, maxSeconds)}
		}
		return checks.Answer{State: events.CheckRejected, Message: c.Message}
	}
	switch {
	case meta.IsStatusConditionTrue(conds, autoscaling.Failed):
		return retry(meta.FindStatusCondition(conds, autoscaling.Failed), "failure")
	case meta.IsStatusConditionTrue(conds, autoscaling.CapacityRevoked):
		// The nodes are gone: pods replaced now would wait forever.
		return checks.Answer{State: events.CheckRejected, Message: meta.FindStatusCondition(conds, autoscaling.CapacityRevoked).Message}
	case meta.IsStatusConditionTrue(conds, autoscaling.BookingExpired):
		if started {
			return checks.Answer{}
		}
		return retry(meta.FindStatusCondition(conds, autoscaling.BookingExpired), "booking expired")
	case meta.IsStatusConditionTrue(conds, autoscaling.Provisioned):
		return checks.Answer{State: events.CheckReady, Message: meta.FindStatusCondition(conds, autoscaling.Provisioned).Message,
			PodSetUpdates: updatesOf(pr, spec)}
	}
	return checks.Answer{}
}

// failed reports whether a request can no longer serve a reservation that
// has not started: the next reservation makes a new attempt.
func failed(pr *autoscaling.ProvisioningRequest) bool {
	c := pr.Status.Conditions
	return meta.IsStatusConditionTrue(c, autoscaling.Failed) || meta.IsStatusConditionTrue(c, autoscaling.CapacityRevoked) ||
		meta.IsStatusConditionTrue(c, autoscaling.BookingExpired)
}

// updatesOf is what a provisioned request adds to the pods of the pod sets
// it covers: the annotations that tell the autoscaler they consume it, and
// the config's node selector terms with values from the request's status.
func updatesOf(pr *autoscaling.ProvisioningRequest, spec v1beta1.ProvisioningRequestConfigSpec) []events.PodSetUpdateV1 {
	var sel map[string]string
	if u := spec.PodSetUpdates; u != nil {
		for _, ns := range u.NodeSelector {
			v, ok := pr.Status.ProvisioningClassDetails[ns.ValueFromProvisioningClassDetail]
			if !ok {
				continue // the class did not say: no term
			}
			if sel == nil {
				sel = map[string]string{}
			}
			sel[ns.Key] = string(v)
		}
	}
	var out []events.PodSetUpdateV1
	for _, name := range podSetsOf(pr) {
		u := events.PodSetUpdateV1{Name: name, Annotations: map[string]string{
			autoscaling.ProvisioningRequestPodAnnotationKey: pr.Name,
			autoscaling.ProvisioningClassPodAnnotationKey:   pr.Spec.ProvisioningClassName,
		}}
		if sel != nil {
			u.NodeSelector = sel
		}
		out = append(out, u)
	}
	return out
}

func podSetsOf(pr *autoscaling.ProvisioningRequest) []string {
	raw := pr.Annotations[PodSetsAnnotation]
	if raw == "" {
		return nil
	}
	return strings.Split(raw, ",")
}

// matchesConfig reports whether a request was made as the config says
// now (class and parameters); one that was not is replaced.
func matchesConfig(pr *autoscaling.ProvisioningRequest, spec v1beta1.ProvisioningRequestConfigSpec) bool {
	if pr.Spec.ProvisioningClassName != spec.ProvisioningClassName {
		return false
	}
	for k, v := range spec.Parameters {
		if got, ok := pr.Spec.Parameters[k]; !ok || string(got) != v {
			return false
		}
	}
	return true
}

// parameters are the request's parameters: the config's, with the job's
// provreq.* annotations on top.
func parameters(spec v1beta1.ProvisioningRequestConfigSpec, jobAnnotations map[string]string) map[string]autoscaling.Parameter {
	out := map[string]autoscaling.Parameter{}
	for k, v := range spec.Parameters {
		out[k] = autoscaling.Parameter(v)
	}
	for _, k := range slices.Sorted(maps.Keys(jobAnnotations)) {
		for _, p := range paramPrefixes {
			if name, ok := strings.CutPrefix(k, p); ok && name != "" {
				out[name] = autoscaling.Parameter(jobAnnotations[k])
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
