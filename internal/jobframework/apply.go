package jobframework

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
)

const (
	// OriginalAnnotation holds, as JSON ([]Original), what Sluice's first
	// admission changed in each pod set, as the user wrote it.
	OriginalAnnotation = "sluice.dev/original"

	// AdmissionAnnotation holds, as JSON (Assignment), the admission the
	// object runs under: the ClusterQueue and, per pod set, the admitted
	// count and the flavor of each resource.
	AdmissionAnnotation = "sluice.dev/admission"

	// StoppedAnnotation records the admission time of the reservation an
	// object was stopped from, so that the same reservation, still in the
	// ledger until quota accounting releases it, never starts it again.
	StoppedAnnotation = "sluice.dev/stopped-reservation"

	// ActiveAnnotation "false" deactivates a workload, as Kueue's
	// Workload spec.active: false does: evicted if admitted, never
	// admitted until reactivated (ReactivateAnnotation, once this one is
	// gone). `sluice stop workload` sets it.
	ActiveAnnotation = "sluice.dev/active"

	// ReactivateAnnotation reactivates a deactivated workload (after
	// waitForPodsReady's requeuing limit, a Rejected admission check, or
	// its maximum execution time): each new value starts its requeue
	// state over, and it queues again (`sluice resume workload` sets it
	// to the time; any new value does).
	ReactivateAnnotation = "sluice.dev/reactivate"

	// HoldAnnotation holds an object back after its admission: it is
	// queued and admitted (its quota reserved) as usual, but not started
	// while the annotation is there. A multicluster worker's copies carry
	// it until the manager picks the worker, so that a job offered to
	// several workers runs in one only.
	HoldAnnotation = "sluice.dev/hold"
	// HeldAnnotation names the admission (its reservation's name) of a
	// held object: written when it is admitted, removed when that
	// reservation is gone.
	HeldAnnotation = "sluice.dev/held-admission"
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
	// Update is what the admission checks add to the pod set's pods.
	Update *PodSetUpdate `json:"update,omitempty"`
	// Topology places the pod set's pods on a topology-aware flavor's
	// domains (Update carries what enforces it).
	Topology *engine.TopologyAssignment `json:"topologyAssignment,omitempty"`
}

// PodSetUpdate is what admission checks add to the pods of one pod set:
// labels and annotations on the template, node selector terms and
// tolerations in its spec.
type PodSetUpdate struct {
	Labels       map[string]string   `json:"labels,omitempty"`
	Annotations  map[string]string   `json:"annotations,omitempty"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	// SchedulingGates hold the pods until something removes them (the
	// topology gate, removed pod by pod with the node selector of the
	// pod's domain). A Pod that is its own pod set cannot be given gates
	// once created: there they are left out.
	SchedulingGates []string `json:"schedulingGates,omitempty"`
}

// MergeUpdates combines what each check (by name) adds to the pod sets
// into one update per pod set. Two checks that set one key to different
// values are ErrPodSetUpdateConflict.
func MergeUpdates(byCheck map[string][]events.PodSetUpdateV1) (map[string]*PodSetUpdate, error) {
	if len(byCheck) == 0 {
		return nil, nil
	}
	out := map[string]*PodSetUpdate{}
	source := map[string]string{} // pod set, field and key -> check that set it
	for _, check := range slices.Sorted(maps.Keys(byCheck)) {
		for _, u := range byCheck[check] {
			m := out[u.Name]
			if m == nil {
				m = &PodSetUpdate{}
				out[u.Name] = m
			}
			for _, f := range []struct {
				field string
				into  *map[string]string
				from  map[string]string
			}{{"labels", &m.Labels, u.Labels}, {"annotations", &m.Annotations, u.Annotations}, {"nodeSelector", &m.NodeSelector, u.NodeSelector}} {
				for _, k := range slices.Sorted(maps.Keys(f.from)) {
					v := f.from[k]
					at := u.Name + "\x00" + f.field + "\x00" + k
					if cur, ok := (*f.into)[k]; ok && cur != v {
						return nil, fmt.Errorf("pod set %q: checks %q and %q set %s %s to %q and %q: %w", u.Name, source[at], check, f.field, k, cur, v, ErrPodSetUpdateConflict)
					}
					if *f.into == nil {
						*f.into = map[string]string{}
					}
					(*f.into)[k] = v
					source[at] = check
				}
			}
			m.Tolerations = appendNew(m.Tolerations, u.Tolerations)
		}
	}
	return out, nil
}

// applyUpdate adds u to a map of the pod template (labels, annotations,
// node selector), refusing to change a value already there.
func applyUpdate(base, add map[string]string, field string) (map[string]string, error) {
	out := maps.Clone(base)
	for _, k := range slices.Sorted(maps.Keys(add)) {
		v := add[k]
		if cur, ok := out[k]; ok && cur != v {
			return nil, fmt.Errorf("an admission check sets %s %s=%q but the pod template has %q: %w", field, k, v, cur, ErrPodSetUpdateConflict)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out, nil
}

// Original is what Sluice changes in one pod set at admission, as the user
// wrote it. A nil field was unset.
type Original struct {
	Name string `json:"name"`
	// Scale is the count field of a Scaler's pod set.
	Scale        *int32              `json:"scale,omitempty"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	// Meta: the template's Labels and Annotations are recorded (an
	// admission check added to them).
	Meta        bool              `json:"meta,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// HasGates: SchedulingGates are the template's as the user wrote them
	// (recorded by a Sluice that adds gates; older records lack them).
	HasGates        bool                       `json:"hasGates,omitempty"`
	SchedulingGates []corev1.PodSchedulingGate `json:"schedulingGates,omitempty"`
}

// Admit changes j, in memory, to run under a: into each pod set's template
// it writes the user's node selector plus the node labels of the assigned
// flavors, and the user's tolerations plus the flavors'; it lowers a
// Scaler's count for a partial admission; it records the user's values
// (sluice.dev/original, unless an earlier admission did) and the admission
// (sluice.dev/admission); and it resumes j.
//
// "The user's values" come from sluice.dev/original when present, so
// admitting an object whose earlier eviction never restored its templates
// still yields the right templates. j must be suspended (ErrNotSuspended).
// A flavor label that contradicts the user's node selector or another
// flavor's label is ErrNodeSelectorConflict; an assignment that does not
// name exactly j's pod sets, or a count out of range, ErrInvalidAssignment.
func Admit(j Job, a Assignment, flavors map[string]*v1beta1.ResourceFlavor) error {
	if !j.IsSuspended() {
		return ErrNotSuspended
	}
	sets, err := j.PodSets()
	if err != nil {
		return err
	}
	orig, recorded, err := originalsOf(j, sets)
	if err != nil {
		return err
	}
	if a.ClusterQueue == "" {
		return fmt.Errorf("empty clusterQueue: %w", ErrInvalidAssignment)
	}
	if err := sameNames(sets, a.PodSets); err != nil {
		return err
	}
	// Counts are checked against the pod sets as the user wrote them.
	full, err := fullCounts(j, orig)
	if err != nil {
		return err
	}
	scaler := scalerOf(j)
	elastic := IsElastic(j.Meta())
	for i, ps := range sets {
		psa := a.PodSets[i]
		switch {
		case elastic && psa.Count < 0:
			return fmt.Errorf("pod set %q: count %d is negative: %w", psa.Name, psa.Count, ErrInvalidAssignment)
		case elastic:
			// Its count is what the reservation holds now; the pods
			// beyond it wait behind the elastic gate.
		case psa.Count > full[i] || psa.Count < min(1, full[i]):
			return fmt.Errorf("pod set %q: count %d outside 1..%d: %w", psa.Name, psa.Count, full[i], ErrInvalidAssignment)
		case psa.Count < full[i] && scaler == nil:
			return fmt.Errorf("pod set %q: count %d below %d, and this kind cannot run fewer pods: %w", psa.Name, psa.Count, full[i], ErrInvalidAssignment)
		}
		names := assignedFlavors(psa)
		sel, err := mergeNodeSelector(orig[i].NodeSelector, names, flavors)
		if err != nil {
			return fmt.Errorf("pod set %q: %w", ps.Name, err)
		}
		tolerations := mergeTolerations(orig[i].Tolerations, names, flavors)
		if u := psa.Update; u != nil {
			if sel, err = applyUpdate(sel, u.NodeSelector, "node selector"); err != nil {
				return fmt.Errorf("pod set %q: %w", ps.Name, err)
			}
			tolerations = appendNew(tolerations, u.Tolerations)
			if len(u.SchedulingGates) > 0 && !ownMeta(j, ps) {
				if !orig[i].HasGates {
					// No admission added gates before: the template's are
					// the user's.
					orig[i].HasGates, orig[i].SchedulingGates = true, cloneGates(ps.Spec.SchedulingGates)
					recorded = false
				}
				ps.Spec.SchedulingGates = withGates(orig[i].SchedulingGates, u.SchedulingGates)
			}
			rerecord, err := updateMeta(j, ps, &orig[i], u)
			if err != nil {
				return fmt.Errorf("pod set %q: %w", ps.Name, err)
			}
			recorded = recorded && !rerecord
		}
		ps.Spec.NodeSelector = sel
		ps.Spec.Tolerations = tolerations
		if scaler != nil {
			if psa.Count < full[i] {
				scaler.SetScale(ps.Name, ptr(psa.Count))
			} else {
				scaler.SetScale(ps.Name, orig[i].Scale)
			}
		}
	}
	rec := Assignment{ClusterQueue: a.ClusterQueue}
	for _, psa := range a.PodSets {
		psa.Flavors = maps.Clone(psa.Flavors)
		if psa.Update != nil {
			u := *psa.Update
			psa.Update = &u
		}
		rec.PodSets = append(rec.PodSets, psa)
	}
	admission, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode admission: %w", err)
	}
	ann := maps.Clone(j.Meta().GetAnnotations())
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AdmissionAnnotation] = string(admission)
	if !recorded {
		b, err := json.Marshal(orig)
		if err != nil {
			return fmt.Errorf("encode original templates: %w", err)
		}
		ann[OriginalAnnotation] = string(b)
	}
	j.Meta().SetAnnotations(ann)
	j.SetSuspended(false)
	return nil
}

// Restore changes j, in memory, back to what its user wrote: suspended,
// each template's node selector and tolerations and each Scaler count as
// recorded in sluice.dev/original, and neither sluice.dev/original nor
// sluice.dev/admission. It reports whether a pod template changed.
func Restore(j Job) (templatesChanged bool, err error) {
	sets, err := j.PodSets()
	if err != nil {
		return false, err
	}
	orig, recorded, err := originalsOf(j, sets)
	if err != nil {
		return false, err
	}
	// What the admission added to the templates' labels and annotations
	// is taken out key by key (see restoreMeta).
	adm, _, _ := AdmissionOf(j.Meta().GetAnnotations())
	j.SetSuspended(true)
	if ann := j.Meta().GetAnnotations(); ann != nil {
		ann = maps.Clone(ann)
		delete(ann, AdmissionAnnotation)
		delete(ann, OriginalAnnotation)
		if len(ann) == 0 {
			ann = nil
		}
		j.Meta().SetAnnotations(ann)
	}
	if !recorded {
		return false, nil
	}
	scaler := scalerOf(j)
	for i, ps := range sets {
		o := orig[i]
		if !maps.Equal(ps.Spec.NodeSelector, o.NodeSelector) || !sameTolerations(ps.Spec.Tolerations, o.Tolerations) {
			templatesChanged = true
		}
		ps.Spec.NodeSelector = maps.Clone(o.NodeSelector)
		ps.Spec.Tolerations = cloneTolerations(o.Tolerations)
		if o.HasGates && !ownMeta(j, ps) {
			if !sameGates(ps.Spec.SchedulingGates, o.SchedulingGates) {
				templatesChanged = true
			}
			ps.Spec.SchedulingGates = cloneGates(o.SchedulingGates)
		}
		if o.Meta && ps.Meta != nil && !ownMeta(j, ps) {
			labels, annotations := restoreMeta(ps.Meta, o, updateOf(adm, ps.Name))
			if !maps.Equal(ps.Meta.Labels, labels) || !maps.Equal(ps.Meta.Annotations, annotations) {
				templatesChanged = true
			}
			ps.Meta.Labels, ps.Meta.Annotations = labels, annotations
		}
		if scaler != nil {
			scaler.SetScale(ps.Name, o.Scale)
		}
	}
	return templatesChanged, nil
}

// Pristine changes j, in memory, back to its user's pod sets (as Restore
// does, leaving suspension and annotations alone), so that what admission
// injected never leaks back into the workload read from it.
func Pristine(j Job) error {
	sets, err := j.PodSets()
	if err != nil {
		return err
	}
	orig, recorded, err := originalsOf(j, sets)
	if err != nil || !recorded {
		return err
	}
	adm, _, _ := AdmissionOf(j.Meta().GetAnnotations())
	scaler := scalerOf(j)
	for i, ps := range sets {
		ps.Spec.NodeSelector = maps.Clone(orig[i].NodeSelector)
		ps.Spec.Tolerations = cloneTolerations(orig[i].Tolerations)
		if orig[i].HasGates && !ownMeta(j, ps) {
			ps.Spec.SchedulingGates = cloneGates(orig[i].SchedulingGates)
		}
		if orig[i].Meta && ps.Meta != nil && !ownMeta(j, ps) {
			ps.Meta.Labels, ps.Meta.Annotations = restoreMeta(ps.Meta, orig[i], updateOf(adm, ps.Name))
		}
		if scaler != nil {
			scaler.SetScale(ps.Name, orig[i].Scale)
		}
	}
	return nil
}

// AdmissionOf returns the assignment recorded on an object, whether there
// is one, and an ErrBadAnnotation error if it cannot be parsed.
func AdmissionOf(annotations map[string]string) (Assignment, bool, error) {
	raw, ok := annotations[AdmissionAnnotation]
	if !ok {
		return Assignment{}, false, nil
	}
	var a Assignment
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return Assignment{}, true, fmt.Errorf("annotation %s: %w: %v", AdmissionAnnotation, ErrBadAnnotation, err)
	}
	return a, true, nil
}

// originalsOf returns the user's values per pod set, in the pod sets'
// order: from sluice.dev/original when recorded, else read from the
// templates now.
func originalsOf(j Job, sets []PodSet) ([]Original, bool, error) {
	raw, ok := j.Meta().GetAnnotations()[OriginalAnnotation]
	if !ok {
		scaler := scalerOf(j)
		out := make([]Original, len(sets))
		for i, ps := range sets {
			out[i] = Original{Name: ps.Name, NodeSelector: maps.Clone(ps.Spec.NodeSelector), Tolerations: cloneTolerations(ps.Spec.Tolerations)}
			if scaler != nil {
				out[i].Scale = clonePtr(scaler.Scale(ps.Name))
			}
		}
		return out, false, nil
	}
	var rec []Original
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		// Before pod sets, a Job's one pod set was recorded as an object.
		var legacy struct {
			Parallelism  *int32              `json:"parallelism"`
			NodeSelector map[string]string   `json:"nodeSelector"`
			Tolerations  []corev1.Toleration `json:"tolerations"`
		}
		if len(sets) != 1 || json.Unmarshal([]byte(raw), &legacy) != nil {
			return nil, true, fmt.Errorf("annotation %s: %w: %v", OriginalAnnotation, ErrBadAnnotation, err)
		}
		rec = []Original{{Name: sets[0].Name, Scale: legacy.Parallelism, NodeSelector: legacy.NodeSelector, Tolerations: legacy.Tolerations}}
	}
	byName := map[string]Original{}
	for _, o := range rec {
		byName[o.Name] = o
	}
	out := make([]Original, len(sets))
	for i, ps := range sets {
		o, ok := byName[ps.Name]
		if !ok {
			return nil, true, fmt.Errorf("annotation %s has no pod set %q: %w", OriginalAnnotation, ps.Name, ErrBadAnnotation)
		}
		out[i] = o
	}
	return out, true, nil
}

// scalerOf is j as a Scaler, or nil when it is none or is elastic: an
// elastic job's counts are its user's to change while it runs, so
// admission neither records nor restores them.
func scalerOf(j Job) Scaler {
	sc, ok := j.(Scaler)
	if !ok || IsElastic(j.Meta()) {
		return nil
	}
	return sc
}

// fullCounts returns each pod set's count as its user wrote it.
func fullCounts(j Job, orig []Original) ([]int32, error) {
	scaler := scalerOf(j)
	if scaler == nil {
		sets, err := j.PodSets()
		if err != nil {
			return nil, err
		}
		out := make([]int32, len(sets))
		for i, ps := range sets {
			out[i] = ps.Count
		}
		return out, nil
	}
	// Read the counts with the user's scale put back, then undo that.
	sets, _ := j.PodSets()
	now := make([]*int32, len(sets))
	for i, ps := range sets {
		now[i] = clonePtr(scaler.Scale(ps.Name))
		scaler.SetScale(ps.Name, orig[i].Scale)
	}
	sets, err := j.PodSets()
	for i, ps := range sets {
		scaler.SetScale(ps.Name, now[i])
	}
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(sets))
	for i, ps := range sets {
		out[i] = ps.Count
	}
	return out, nil
}

func sameNames(sets []PodSet, assigned []PodSetAssignment) error {
	want := make([]string, len(sets))
	for i, ps := range sets {
		want[i] = ps.Name
	}
	got := make([]string, len(assigned))
	for i, psa := range assigned {
		got[i] = psa.Name
	}
	if !slices.Equal(want, got) {
		return fmt.Errorf("pod sets %q, want %q: %w", got, want, ErrInvalidAssignment)
	}
	return nil
}

// MergePatch returns the JSON merge patch (types.MergePatchType) from
// before to after, carrying metadata.uid, so it cannot apply to an object
// recreated under the same name, and, when rv is set,
// metadata.resourceVersion, so it applies only to that version.
func MergePatch(before, after runtime.Object, uid, rv string) ([]byte, error) {
	a, err := json.Marshal(before)
	if err != nil {
		return nil, fmt.Errorf("encode object: %w", err)
	}
	b, err := json.Marshal(after)
	if err != nil {
		return nil, fmt.Errorf("encode object: %w", err)
	}
	// The patch is taken between the two encodings, looking only into
	// what differs (jobPatchDiff): decoding both whole was most of the
	// cost of every start and stop.
	p, err := jobPatchDiff(a, b)
	if err != nil {
		return nil, fmt.Errorf("compute patch: %w", err)
	}
	delete(p, "status") // writes to the object itself never touch its status
	meta, _ := p["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	if uid != "" {
		meta["uid"] = uid
	}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	p["metadata"] = meta
	return json.Marshal(p)
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

// mergeNodeSelector adds the flavors' node labels to the user's node
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

// updateMeta adds an update's labels and annotations to the pod set's
// template, on top of the user's (recorded in o the first time an update
// touches them). It reports whether o changed and must be recorded again.
func updateMeta(j Job, ps PodSet, o *Original, u *PodSetUpdate) (rerecord bool, err error) {
	if ps.Meta == nil || (len(u.Labels) == 0 && len(u.Annotations) == 0) {
		return false, nil
	}
	if !o.Meta && !ownMeta(j, ps) {
		// No earlier admission changed them: they are the user's.
		o.Meta, o.Labels, o.Annotations = true, maps.Clone(ps.Meta.Labels), maps.Clone(ps.Meta.Annotations)
		rerecord = true
	}
	labels, annotations := o.Labels, o.Annotations
	if ownMeta(j, ps) {
		labels, annotations = ps.Meta.Labels, ps.Meta.Annotations
	}
	if labels, err = applyUpdate(labels, u.Labels, "label"); err != nil {
		return false, err
	}
	if annotations, err = applyUpdate(annotations, u.Annotations, "annotation"); err != nil {
		return false, err
	}
	ps.Meta.Labels, ps.Meta.Annotations = labels, annotations
	return rerecord, nil
}

// updateOf is what an admission added to a pod set's template; nil if
// nothing, or the admission is not recorded.
func updateOf(a Assignment, podSet string) *PodSetUpdate {
	for _, psa := range a.PodSets {
		if psa.Name == podSet {
			return psa.Update
		}
	}
	return nil
}

// restoreMeta is a template's labels and annotations with what the
// admission's update u added taken out: each key it set goes back to the
// user's value, or goes. Other keys stay as they are: the recorded user's
// maps may lack keys the API server put there (a Job's generated template
// labels, which the informer's cache trims). Without u (an admission
// recorded by an older Sluice), the recorded maps are the answer.
func restoreMeta(m *metav1.ObjectMeta, o Original, u *PodSetUpdate) (labels, annotations map[string]string) {
	if u == nil {
		return maps.Clone(o.Labels), maps.Clone(o.Annotations)
	}
	undo := func(cur, user, added map[string]string) map[string]string {
		out := maps.Clone(cur)
		if out == nil {
			out = map[string]string{}
		}
		for k := range added {
			if v, ok := user[k]; ok {
				out[k] = v
			} else {
				delete(out, k)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return undo(m.Labels, o.Labels, u.Labels), undo(m.Annotations, o.Annotations, u.Annotations)
}

// IsPod reports whether j is a Pod: its one pod set is itself, so what
// admission adds goes on the Pod, and no gate can be added to it.
func IsPod(j Job) bool {
	sets, err := j.PodSets()
	return err == nil && len(sets) == 1 && ownMeta(j, sets[0])
}

// ownMeta reports whether the pod set's metadata is the object's own (a
// Pod): it is never recorded nor restored.
func ownMeta(j Job, ps PodSet) bool {
	m, ok := j.Meta().(*metav1.ObjectMeta)
	return ok && m == ps.Meta
}

// appendNew appends the tolerations of add that out does not have.
func appendNew(out, add []corev1.Toleration) []corev1.Toleration {
	for _, t := range add {
		if !slices.ContainsFunc(out, func(have corev1.Toleration) bool { return apiequality.Semantic.DeepEqual(have, t) }) {
			out = append(out, *t.DeepCopy())
		}
	}
	return out
}

// mergeTolerations appends the flavors' tolerations to the user's,
// skipping any already present.
func mergeTolerations(own []corev1.Toleration, flavorNames []string, flavors map[string]*v1beta1.ResourceFlavor) []corev1.Toleration {
	out := cloneTolerations(own)
	for _, name := range flavorNames {
		rf := flavors[name]
		if rf == nil {
			continue
		}
		out = appendNew(out, rf.Spec.Tolerations)
	}
	return out
}

func sameTolerations(a, b []corev1.Toleration) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

func cloneTolerations(in []corev1.Toleration) []corev1.Toleration {
	if in == nil {
		return nil
	}
	out := make([]corev1.Toleration, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

func cloneGates(in []corev1.PodSchedulingGate) []corev1.PodSchedulingGate {
	if in == nil {
		return nil
	}
	return slices.Clone(in)
}

func sameGates(a, b []corev1.PodSchedulingGate) bool {
	return len(a) == len(b) && (len(a) == 0 || slices.Equal(a, b))
}

// withGates is the user's gates and the named ones not among them.
func withGates(own []corev1.PodSchedulingGate, add []string) []corev1.PodSchedulingGate {
	out := cloneGates(own)
	for _, g := range add {
		if !slices.ContainsFunc(out, func(have corev1.PodSchedulingGate) bool { return have.Name == g }) {
			out = append(out, corev1.PodSchedulingGate{Name: g})
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Step is one API write of a stop.
type Step struct {
	// Name says what the write does: "suspend", "unlock" or "restore".
	Name string
	// Status: the write goes to the status subresource.
	Status bool
	// Patch is a JSON merge patch (types.MergePatchType) carrying
	// metadata.uid.
	Patch []byte
	// Last: the object is stopped and restored once this write is done.
	Last bool
}

func (s Step) Subresource() []string {
	if s.Status {
		return []string{"status"}
	}
	return nil
}

// NextStopStep returns the next write that stops j and restores its pod
// templates as its user wrote them. Pod templates cannot change while an
// object runs, so when they must change a running object is first
// suspended ("suspend"); a kind whose templates stay locked after that
// (an Unlocker) is then unlocked through its status ("unlock"); the last
// write ("restore") restores the templates and drops Sluice's annotations.
// An object whose templates Sluice never changed is stopped in one write.
// Apply the step, re-read the object, and ask again until Last.
func NextStopStep(ad Adapter, j Job) (Step, error) {
	uid := string(j.Meta().GetUID())
	restored, err := ad.Decode(j.Object().DeepCopyObject())
	if err != nil {
		return Step{}, err
	}
	changes, err := Restore(restored)
	if err != nil {
		return Step{}, err
	}
	if changes && !j.IsSuspended() {
		suspended, err := ad.Decode(j.Object().DeepCopyObject())
		if err != nil {
			return Step{}, err
		}
		suspended.SetSuspended(true)
		p, err := MergePatch(j.Object(), suspended.Object(), uid, "")
		return Step{Name: "suspend", Patch: p}, err
	}
	if u, ok := j.(Unlocker); ok && changes {
		if p := u.UnlockPatch(); p != nil {
			p, err := WithUID(p, uid)
			return Step{Name: "unlock", Status: true, Patch: p}, err
		}
	}
	p, err := MergePatch(j.Object(), restored.Object(), uid, "")
	return Step{Name: "restore", Patch: p, Last: true}, err
}

// MarkStopped returns step also marking the object stopped from admission
// (StoppedAnnotation) when step is the stop's only write left: the last
// one, to the object itself. Then the mark and the stop are one write,
// and the object is never seen marked while running or stopped without
// its mark. ok is false for any other step (the mark goes first, in a
// write of its own), and when the step removes the object's annotations
// as a whole (a mark added to that would keep what it removes).
func MarkStopped(step Step, admission string) (marked Step, ok bool, err error) {
	if !step.Last || step.Status {
		return step, false, nil
	}
	var p map[string]any
	if err := json.Unmarshal(step.Patch, &p); err != nil {
		return step, false, fmt.Errorf("stop patch: %w", err)
	}
	meta, _ := p["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	ann, present := meta["annotations"]
	annotations, isMap := ann.(map[string]any)
	switch {
	case !present:
		annotations = map[string]any{}
	case !isMap:
		return step, false, nil
	}
	annotations[StoppedAnnotation] = admission
	meta["annotations"] = annotations
	p["metadata"] = meta
	if step.Patch, err = json.Marshal(p); err != nil {
		return step, false, err
	}
	return step, true, nil
}

// MarkPatch is the write that marks an object stopped from admission on
// its own (StoppedAnnotation), for a stop of several steps.
func MarkPatch(uid, admission string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": uid, "annotations": map[string]string{StoppedAnnotation: admission}}})
}

// stringMaps are the fields whose keys the patch removes one by one
// (jobPatchDiff): a pod template's or the object's own labels or
// annotations map removed whole is removed key by key, each key it had as
// it was read. The cache may have trimmed keys the API server put there (a
// Job template's generated labels), which a null would remove with the
// rest; and a null on the object's annotations would remove what was
// written since it was read, the stop's own mark among them.
var stringMaps = map[string]bool{"labels": true, "annotations": true}

// WithUID adds metadata.uid to a merge patch, so it cannot apply to an
// object recreated under the same name.
func WithUID(patch []byte, uid string) ([]byte, error) {
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("unlock patch: %w", err)
	}
	meta, _ := p["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["uid"] = uid
	p["metadata"] = meta
	return json.Marshal(p)
}
