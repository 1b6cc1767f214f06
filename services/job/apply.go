package job

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

const (
	// OriginalAnnotation holds, as JSON (OriginalSpec), the Job's own
	// parallelism, nodeSelector and tolerations from before Sluice's first
	// admission changed them.
	OriginalAnnotation = "sluice.dev/original"

	// AdmissionAnnotation holds, as JSON (Assignment), the admission the Job
	// is running under: the ClusterQueue and, per pod set, the admitted count
	// and the flavor of each resource.
	AdmissionAnnotation = "sluice.dev/admission"
)

// Assignment is an admission decision for one workload. It is also the JSON
// recorded in the sluice.dev/admission annotation.
type Assignment struct {
	ClusterQueue string             `json:"clusterQueue"`
	PodSets      []PodSetAssignment `json:"podSets"`
}

// PodSetAssignment is the admission of one pod set.
type PodSetAssignment struct {
	Name string `json:"name"`
	// Count is the number of pods admitted; lower than the pod set's Count
	// for a partial admission.
	Count int32 `json:"count"`
	// Flavors maps a resource name to the ResourceFlavor it was assigned.
	Flavors map[string]string `json:"flavors,omitempty"`
}

// OriginalSpec is what Sluice changes at admission, as the user wrote it. It
// is the JSON recorded in the sluice.dev/original annotation. A nil field was
// unset on the Job.
type OriginalSpec struct {
	Parallelism  *int32              `json:"parallelism,omitempty"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
}

// PatchStep is one API write of a multi-write change.
type PatchStep struct {
	// Name says what the step does: "suspend", "clear-start-time" or
	// "restore".
	Name string
	// Subresource is "" for the Job itself or "status".
	Subresource string
	// Type is always types.MergePatchType.
	Type  types.PatchType
	Patch []byte
}

// AdmissionPatch returns the JSON merge patch (types.MergePatchType) that
// starts an admitted Job in one write. The patch
//
//   - sets spec.template.spec.nodeSelector to the Job's own node selector
//     plus the node labels of every assigned flavor,
//   - sets spec.template.spec.tolerations to the Job's own tolerations plus
//     those of the assigned flavors (duplicates dropped),
//   - sets spec.parallelism to the admitted count when that is lower than
//     the Job's pod count (partial admission),
//   - records the Job's own values in the sluice.dev/original annotation,
//     unless it is already there from an earlier admission,
//   - records the assignment in the sluice.dev/admission annotation,
//   - sets spec.suspend to false,
//   - carries metadata.uid, so it cannot apply to a recreated Job.
//
// "The Job's own" values come from sluice.dev/original when present, so
// admitting a Job whose earlier eviction never restored its template still
// yields the right template.
//
// The API server accepts the template change only because the stored Job is
// suspended and never started; AdmissionPatch returns ErrNotSuspended for a
// Job that is not suspended (check IsAdmitted first to skip redelivered
// admissions) and ErrTemplateLocked for a suspended Job whose
// status.startTime is still set (clear it with ResetStartTimePatch first).
// A flavor label that contradicts the Job's node selector or another
// flavor's label is ErrNodeSelectorConflict.
func AdmissionPatch(job *batchv1.Job, assignment Assignment, flavors map[string]*v1beta1.ResourceFlavor) ([]byte, error) {
	if job == nil {
		return nil, fmt.Errorf("nil job: %w", ErrInvalidJob)
	}
	if !isSuspended(job) {
		return nil, fmt.Errorf("job %s: %w", jobKey(job), ErrNotSuspended)
	}
	orig, recorded, err := OriginalOf(job)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", jobKey(job), err)
	}
	if !recorded {
		orig = currentSpec(job)
	}

	psa, err := mainAssignment(job, assignment, orig.Parallelism)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", jobKey(job), err)
	}

	flavorNames := assignedFlavors(psa)
	nodeSelector, err := mergeNodeSelector(orig.NodeSelector, flavorNames, flavors)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", jobKey(job), err)
	}
	tolerations := mergeTolerations(orig.Tolerations, flavorNames, flavors)

	parallelism := orig.Parallelism
	if full := fullCount(job, orig.Parallelism); psa.Count < full {
		parallelism = &psa.Count
	}

	target := OriginalSpec{Parallelism: parallelism, NodeSelector: nodeSelector, Tolerations: tolerations}
	if templateChanges(job, target) && job.Status.StartTime != nil {
		return nil, fmt.Errorf("job %s: admission changes the pod template but status.startTime is set: %w", jobKey(job), ErrTemplateLocked)
	}

	admission, err := json.Marshal(Assignment{ClusterQueue: assignment.ClusterQueue, PodSets: []PodSetAssignment{psa}})
	if err != nil {
		return nil, fmt.Errorf("job %s: encode admission: %w", jobKey(job), err)
	}
	annotations := map[string]any{AdmissionAnnotation: string(admission)}
	if !recorded {
		original, err := json.Marshal(orig)
		if err != nil {
			return nil, fmt.Errorf("job %s: encode original spec: %w", jobKey(job), err)
		}
		annotations[OriginalAnnotation] = string(original)
	}

	meta := metadataPatch(job)
	meta["annotations"] = annotations
	spec := specPatch(job, target)
	spec["suspend"] = false
	patch, err := encodePatch(meta, spec)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", jobKey(job), err)
	}
	return patch, nil
}

// EvictionPatch returns the JSON merge patch (types.MergePatchType) that
// leaves a Job suspended and as its user wrote it: spec.suspend=true, the
// nodeSelector, tolerations and parallelism from sluice.dev/original, and
// neither sluice.dev/original nor sluice.dev/admission. For a Job without
// sluice.dev/original it only suspends and drops sluice.dev/admission.
//
// When the patch has to change the pod template, the API server accepts it
// only if the stored Job is already suspended with status.startTime unset;
// otherwise EvictionPatch returns ErrTemplateLocked. EvictionSteps returns
// the writes that get a running Job there.
func EvictionPatch(job *batchv1.Job) ([]byte, error) {
	if job == nil {
		return nil, fmt.Errorf("nil job: %w", ErrInvalidJob)
	}
	patch, changesTemplate, err := restorePatch(job)
	if err != nil {
		return nil, err
	}
	if changesTemplate && templateLocked(job) {
		return nil, fmt.Errorf("job %s: restoring the pod template needs a suspended job with no status.startTime: %w", jobKey(job), ErrTemplateLocked)
	}
	return patch, nil
}

// StopPatch returns the JSON merge patch that suspends a Job and nothing
// else: the first step of evicting a running Job.
func StopPatch(job *batchv1.Job) ([]byte, error) {
	if job == nil {
		return nil, fmt.Errorf("nil job: %w", ErrInvalidJob)
	}
	return encodePatch(metadataPatch(job), map[string]any{"suspend": true})
}

// ResetStartTimePatch returns the JSON merge patch, for the Job's status
// subresource, that clears status.startTime. The API server allows it for a
// suspended Job, and it unlocks the pod template's scheduling directives.
func ResetStartTimePatch(job *batchv1.Job) ([]byte, error) {
	if job == nil {
		return nil, fmt.Errorf("nil job: %w", ErrInvalidJob)
	}
	patch := map[string]any{"status": map[string]any{"startTime": nil}}
	if meta := metadataPatch(job); len(meta) > 0 {
		patch["metadata"] = meta
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("encode patch: %w", err)
	}
	return b, nil
}

// EvictionSteps returns, in order, the writes that evict a Job and restore
// its template:
//
//  1. "suspend" (StopPatch), if the Job is not suspended;
//  2. "clear-start-time" (ResetStartTimePatch, status subresource), if the
//     template must change and the Job is running or has a start time;
//  3. "restore" (EvictionPatch).
//
// A Job whose template Sluice never changed is evicted in one write. Every
// step is idempotent; if one fails (for example the Job controller set
// status.startTime in between, and the restore is refused as invalid),
// re-read the Job and call EvictionSteps again.
func EvictionSteps(job *batchv1.Job) ([]PatchStep, error) {
	if job == nil {
		return nil, fmt.Errorf("nil job: %w", ErrInvalidJob)
	}
	restore, changesTemplate, err := restorePatch(job)
	if err != nil {
		return nil, err
	}
	var steps []PatchStep
	if changesTemplate && templateLocked(job) {
		if !isSuspended(job) {
			stop, err := StopPatch(job)
			if err != nil {
				return nil, err
			}
			steps = append(steps, PatchStep{Name: "suspend", Type: types.MergePatchType, Patch: stop})
		}
		reset, err := ResetStartTimePatch(job)
		if err != nil {
			return nil, err
		}
		steps = append(steps, PatchStep{Name: "clear-start-time", Subresource: "status", Type: types.MergePatchType, Patch: reset})
	}
	steps = append(steps, PatchStep{Name: "restore", Type: types.MergePatchType, Patch: restore})
	return steps, nil
}

// IsFinished reports whether the Job reached a terminal condition (Complete
// or Failed set to True), whether it succeeded, and the condition's message
// (its reason when the message is empty).
func IsFinished(job *batchv1.Job) (finished bool, succeeded bool, message string) {
	if job == nil {
		return false, false, ""
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true, conditionText(c, "job completed")
		case batchv1.JobFailed:
			return true, false, conditionText(c, "job failed")
		}
	}
	return false, false, ""
}

// IsAdmitted reports whether the Job runs under a Sluice admission: it has
// the sluice.dev/admission annotation and is not suspended.
func IsAdmitted(job *batchv1.Job) bool {
	if job == nil {
		return false
	}
	_, ok := job.Annotations[AdmissionAnnotation]
	return ok && !isSuspended(job)
}

// AdmissionOf returns the assignment recorded on the Job, whether there is
// one, and an ErrBadAnnotation error if it cannot be parsed.
func AdmissionOf(job *batchv1.Job) (Assignment, bool, error) {
	if job == nil {
		return Assignment{}, false, nil
	}
	raw, ok := job.Annotations[AdmissionAnnotation]
	if !ok {
		return Assignment{}, false, nil
	}
	var a Assignment
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return Assignment{}, true, fmt.Errorf("annotation %s: %w: %v", AdmissionAnnotation, ErrBadAnnotation, err)
	}
	return a, true, nil
}

// OriginalOf returns the original spec recorded on the Job, whether there is
// one, and an ErrBadAnnotation error if it cannot be parsed.
func OriginalOf(job *batchv1.Job) (OriginalSpec, bool, error) {
	if job == nil {
		return OriginalSpec{}, false, nil
	}
	raw, ok := job.Annotations[OriginalAnnotation]
	if !ok {
		return OriginalSpec{}, false, nil
	}
	var o OriginalSpec
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		return OriginalSpec{}, true, fmt.Errorf("annotation %s: %w: %v", OriginalAnnotation, ErrBadAnnotation, err)
	}
	return o, true, nil
}

// originalOrCurrent returns the recorded original spec, or the live one.
func originalOrCurrent(job *batchv1.Job) (OriginalSpec, error) {
	o, ok, err := OriginalOf(job)
	if err != nil {
		return OriginalSpec{}, err
	}
	if !ok {
		return currentSpec(job), nil
	}
	return o, nil
}

func currentSpec(job *batchv1.Job) OriginalSpec {
	var par *int32
	if job.Spec.Parallelism != nil {
		v := *job.Spec.Parallelism
		par = &v
	}
	return OriginalSpec{
		Parallelism:  par,
		NodeSelector: maps.Clone(job.Spec.Template.Spec.NodeSelector),
		Tolerations:  cloneTolerations(job.Spec.Template.Spec.Tolerations),
	}
}

// restorePatch builds the eviction patch and says whether it changes the
// pod template.
func restorePatch(job *batchv1.Job) ([]byte, bool, error) {
	orig, recorded, err := OriginalOf(job)
	if err != nil {
		return nil, false, fmt.Errorf("job %s: %w", jobKey(job), err)
	}
	meta := metadataPatch(job)
	drop := map[string]any{}
	for _, key := range []string{AdmissionAnnotation, OriginalAnnotation} {
		if _, ok := job.Annotations[key]; ok {
			drop[key] = nil
		}
	}
	switch {
	case len(drop) == 0:
	case len(drop) == len(job.Annotations):
		// Nothing else is left: null the whole map rather than leave an
		// empty one behind.
		meta["annotations"] = nil
	default:
		meta["annotations"] = drop
	}

	spec := map[string]any{}
	changesTemplate := false
	if recorded {
		spec = specPatch(job, orig)
		changesTemplate = templateChanges(job, orig)
	}
	spec["suspend"] = true

	patch, err := encodePatch(meta, spec)
	if err != nil {
		return nil, false, fmt.Errorf("job %s: %w", jobKey(job), err)
	}
	return patch, changesTemplate, nil
}

// mainAssignment validates the assignment against the Job and returns the
// main pod set's part, with its flavors copied.
func mainAssignment(job *batchv1.Job, a Assignment, parallelism *int32) (PodSetAssignment, error) {
	if a.ClusterQueue == "" {
		return PodSetAssignment{}, fmt.Errorf("empty clusterQueue: %w", ErrInvalidAssignment)
	}
	if len(a.PodSets) != 1 || a.PodSets[0].Name != MainPodSet {
		names := make([]string, 0, len(a.PodSets))
		for _, ps := range a.PodSets {
			names = append(names, ps.Name)
		}
		return PodSetAssignment{}, fmt.Errorf("pod sets %q, want exactly [%q]: %w", names, MainPodSet, ErrInvalidAssignment)
	}
	psa := a.PodSets[0]
	full := fullCount(job, parallelism)
	if psa.Count > full || psa.Count < min(1, full) {
		return PodSetAssignment{}, fmt.Errorf("pod set %q: count %d outside 1..%d: %w", psa.Name, psa.Count, full, ErrInvalidAssignment)
	}
	psa.Flavors = maps.Clone(psa.Flavors)
	return psa, nil
}

// fullCount is the number of pods the Job runs at once when fully admitted.
func fullCount(job *batchv1.Job, parallelism *int32) int32 {
	n := int32(1)
	if parallelism != nil {
		n = *parallelism
	}
	if c := job.Spec.Completions; c != nil {
		n = min(n, *c)
	}
	return n
}

func assignedFlavors(psa PodSetAssignment) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range psa.Flavors {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// mergeNodeSelector adds the flavors' node labels to the Job's own node
// selector, refusing contradictions.
func mergeNodeSelector(own map[string]string, flavorNames []string, flavors map[string]*v1beta1.ResourceFlavor) (map[string]string, error) {
	out := maps.Clone(own)
	source := map[string]string{} // label key -> flavor that set it
	for _, name := range flavorNames {
		rf := flavors[name]
		if rf == nil {
			return nil, fmt.Errorf("flavor %q is not known: %w", name, ErrInvalidAssignment)
		}
		keys := slices.Sorted(maps.Keys(rf.Spec.NodeLabels))
		for _, k := range keys {
			v := rf.Spec.NodeLabels[k]
			cur, ok := out[k]
			switch {
			case !ok:
				if out == nil {
					out = map[string]string{}
				}
				out[k] = v
				source[k] = name
			case cur == v:
			case source[k] != "":
				return nil, fmt.Errorf("flavors %q and %q need node label %s=%q and %s=%q: %w", source[k], name, k, cur, k, v, ErrNodeSelectorConflict)
			default:
				return nil, fmt.Errorf("flavor %q needs node label %s=%q but the pod template selects %s=%q: %w", name, k, v, k, cur, ErrNodeSelectorConflict)
			}
		}
	}
	return out, nil
}

// mergeTolerations appends the flavors' tolerations to the Job's own,
// skipping any already present.
func mergeTolerations(own []corev1.Toleration, flavorNames []string, flavors map[string]*v1beta1.ResourceFlavor) []corev1.Toleration {
	out := cloneTolerations(own)
	for _, name := range flavorNames {
		rf := flavors[name]
		if rf == nil {
			continue
		}
		for _, t := range rf.Spec.Tolerations {
			dup := slices.ContainsFunc(out, func(have corev1.Toleration) bool {
				return apiequality.Semantic.DeepEqual(have, t)
			})
			if !dup {
				out = append(out, *t.DeepCopy())
			}
		}
	}
	return out
}

// templateChanges reports whether setting target's nodeSelector and
// tolerations would change the Job's pod template.
func templateChanges(job *batchv1.Job, target OriginalSpec) bool {
	tpl := &job.Spec.Template.Spec
	return !sameStringMap(tpl.NodeSelector, target.NodeSelector) ||
		!sameTolerations(tpl.Tolerations, target.Tolerations)
}

// templateLocked reports whether the API server would refuse a change to
// the Job's pod template scheduling directives (KEP-2926).
func templateLocked(job *batchv1.Job) bool {
	return !isSuspended(job) || job.Status.StartTime != nil
}

// specPatch returns the "spec" part of a merge patch that moves the Job to
// target's parallelism, nodeSelector and tolerations. Unchanged fields are
// left out.
func specPatch(job *batchv1.Job, target OriginalSpec) map[string]any {
	spec := map[string]any{}
	if !equalInt32Ptr(job.Spec.Parallelism, target.Parallelism) {
		if target.Parallelism == nil {
			spec["parallelism"] = nil
		} else {
			spec["parallelism"] = *target.Parallelism
		}
	}
	podSpec := map[string]any{}
	cur := job.Spec.Template.Spec.NodeSelector
	if !sameStringMap(cur, target.NodeSelector) {
		if len(target.NodeSelector) == 0 {
			podSpec["nodeSelector"] = nil
		} else {
			ns := map[string]any{}
			for k := range cur {
				if _, keep := target.NodeSelector[k]; !keep {
					ns[k] = nil
				}
			}
			for k, v := range target.NodeSelector {
				if cur[k] != v {
					ns[k] = v
				}
			}
			podSpec["nodeSelector"] = ns
		}
	}
	if !sameTolerations(job.Spec.Template.Spec.Tolerations, target.Tolerations) {
		if len(target.Tolerations) == 0 {
			podSpec["tolerations"] = nil
		} else {
			podSpec["tolerations"] = target.Tolerations
		}
	}
	if len(podSpec) > 0 {
		spec["template"] = map[string]any{"spec": podSpec}
	}
	return spec
}

// metadataPatch starts the "metadata" part of a merge patch: the Job's uid,
// when known, as a precondition against a recreated Job.
func metadataPatch(job *batchv1.Job) map[string]any {
	meta := map[string]any{}
	if job.UID != "" {
		meta["uid"] = string(job.UID)
	}
	return meta
}

// encodePatch encodes a merge patch from its metadata and spec parts.
func encodePatch(meta, spec map[string]any) ([]byte, error) {
	patch := map[string]any{"spec": spec}
	if len(meta) > 0 {
		patch["metadata"] = meta
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("encode patch: %w", err)
	}
	return b, nil
}

func isSuspended(job *batchv1.Job) bool {
	return job.Spec.Suspend != nil && *job.Spec.Suspend
}

func equalInt32Ptr(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// sameStringMap treats nil and empty alike, as the API server does for
// omitempty maps.
func sameStringMap(a, b map[string]string) bool {
	return maps.Equal(a, b)
}

func sameTolerations(a, b []corev1.Toleration) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

func conditionText(c batchv1.JobCondition, fallback string) string {
	switch {
	case c.Message != "":
		return c.Message
	case c.Reason != "":
		return c.Reason
	default:
		return fallback
	}
}
