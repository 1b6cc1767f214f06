package jobframework

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
)

// Groups (see Grouper): the members of a group share one work-queue key,
// namespace/group, which is also the name of the group's workload. A lone
// object and a group of the same name in one namespace would share the
// workload's name: the group goes first, and the lone object waits until
// the group's workload ends.

const (
	// groupIndex indexes a Grouper's informer by namespace/group.
	GroupIndex = "sluice-group"
	// groupUIDPrefix marks the UID of a group's workload, which is made of
	// its first member's. It tells a group's record from a lone object's
	// of the same name.
	GroupUIDPrefix = "group-"
)

// GroupLabelValue is base+suffix when it fits a label value's 63
// characters; otherwise base cut short, a hash of hashed (what names the
// group) in place of what does not fit, and suffix kept whole at the end.
func GroupLabelValue(base, hashed, suffix string) string {
	if len(base)+len(suffix) <= 63 {
		return base + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(hashed))
	return strings.TrimRight(base[:min(54, 63-len(suffix)-9)], ".-") + fmt.Sprintf("-%08x", h.Sum32()) + suffix
}

// GroupOf returns the group an object of a Grouper belongs to, "" for a
// lone object or when the adapter has no groups.
func GroupOf(ad Adapter, m metav1.Object) string {
	g, ok := ad.(Grouper)
	if !ok {
		return ""
	}
	return m.GetLabels()[g.GroupLabel()]
}

// WorkKey is the work-queue key of an object: namespace/name, or
// namespace/group for a member of a group.
func WorkKey(ad Adapter, obj any) (string, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", false
	}
	if g := GroupOf(ad, m); g != "" {
		return m.GetNamespace() + "/" + g, true
	}
	return m.GetNamespace() + "/" + m.GetName(), true
}

// IsGroupRecord reports whether a workload record is a group's.
func IsGroupRecord(rec *events.WorkloadSubmittedV1) bool {
	return rec != nil && strings.HasPrefix(rec.Workload.UID, GroupUIDPrefix)
}

// ModeOf returns the mode of the group whose members, oldest first, are
// given: its oldest member's.
func ModeOf(ad Adapter, members []Job) GroupMode {
	g, ok := ad.(Grouper)
	if !ok || len(members) == 0 {
		return GroupMode{}
	}
	return g.GroupModeOf(members[0].Meta())
}

// GroupFinished reports whether every member ended, whether all of them
// succeeded, and the first failure's message.
func GroupFinished(all []Job) (finished, succeeded bool, message string) {
	succeeded = true
	for _, m := range all {
		done, ok, msg := m.Finished()
		if !done {
			return false, false, ""
		}
		if !ok && succeeded {
			succeeded, message = false, m.Meta().GetName()+": "+msg
		}
	}
	if succeeded {
		message = fmt.Sprintf("all %d members succeeded", len(all))
	}
	return true, succeeded, message
}

// GroupWorkload builds the workload of the group ns/group of a Grouper's
// objects from its members that are not being deleted, oldest first;
// complete is false while fewer of them exist than the group's total. An
// error names the member and the field that keep the group from being
// queued.
func GroupWorkload(ad Adapter, ns, group string, live []Job, prio PriorityResolver, opts ...WorkloadOption) (w Workload, complete bool, err error) {
	g, ok := ad.(Grouper)
	if !ok || len(live) == 0 {
		return Workload{}, false, fmt.Errorf("group %s/%s: no members of a grouping kind: %w", ns, group, ErrInvalidGroup)
	}
	first := live[0].Meta()
	var total int32
	queue := first.GetLabels()[v1beta1.QueueNameLabel]
	// First what the members' labels say, which is cheap: while the group
	// is incomplete nothing more is read, so the syncs of a group whose
	// members arrive one by one cost little each.
	for i, m := range live {
		meta := m.Meta()
		_, t, err := g.GroupOf(meta)
		if err != nil {
			return Workload{}, false, fmt.Errorf("%s: %w", meta.GetName(), err)
		}
		if i == 0 {
			total = t // the oldest member's count is the group's
		}
		if t != total {
			return Workload{}, false, fmt.Errorf("%s says the group has %d members, %s says %d: %w", meta.GetName(), t, first.GetName(), total, ErrInvalidGroup)
		}
		if q := meta.GetLabels()[v1beta1.QueueNameLabel]; q != queue {
			return Workload{}, false, fmt.Errorf("%s is queued in %q, %s in %q: %w", meta.GetName(), q, first.GetName(), queue, ErrInvalidGroup)
		}
	}
	if total > MaxGroupSize {
		return Workload{}, false, fmt.Errorf("%s says the group has %d members, more than the %d a group may have: %w", first.GetName(), total, MaxGroupSize, ErrInvalidGroup)
	}
	fast := g.GroupModeOf(first).FastAdmission
	if n := int32(len(live)); n > total {
		return Workload{}, false, fmt.Errorf("%d members exist, more than the group's total of %d: %w", n, total, ErrInvalidGroup)
	} else if n < total && !fast {
		return Workload{}, false, nil
	}
	if fast {
		return fastGroupWorkload(ad, ns, group, queue, total, live, prio, opts...)
	}
	roles := map[string]*WorkloadPodSet{}
	for i, m := range live {
		mw, err := memberWorkload(ad, m, prio, opts...)
		if err != nil {
			return Workload{}, false, err
		}
		if i == 0 {
			w = groupOf(ns, group, queue, mw)
		}
		ps := mw.PodSets[0]
		name := roleName(ps)
		if r := roles[name]; r != nil {
			r.Count++
			r.MinCount++
			continue
		}
		ps.Name, ps.Count, ps.MinCount = name, 1, 1
		roles[name] = &ps
		if len(roles) > MaxPodSets {
			return Workload{}, false, fmt.Errorf("its members have more than %d roles (pod shapes), the most pod sets a workload may have: %w", MaxPodSets, ErrInvalidGroup)
		}
	}
	names := make([]string, 0, len(roles))
	for n := range roles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w.PodSets = append(w.PodSets, *roles[n])
	}
	return w, true, nil
}

// fastGroupWorkload is the workload of a group queued on its first
// member (GroupMode.FastAdmission): one pod set of the group's total
// count, shaped as the oldest member; every member there is must ask for
// the same.
func fastGroupWorkload(ad Adapter, ns, group, queue string, total int32, live []Job, prio PriorityResolver, opts ...WorkloadOption) (Workload, bool, error) {
	mw, err := memberWorkload(ad, live[0], prio, opts...)
	if err != nil {
		return Workload{}, false, err
	}
	ps := mw.PodSets[0]
	role := roleName(ps)
	for _, m := range live[1:] {
		r, _, err := MemberRole(ad.Decode, m)
		if err != nil {
			return Workload{}, false, fmt.Errorf("%s: %w", m.Meta().GetName(), err)
		}
		if r != role {
			return Workload{}, false, fmt.Errorf("%s asks for other resources, node selector or tolerations than %s, and a group queued on its first member has one shape: %w",
				m.Meta().GetName(), live[0].Meta().GetName(), ErrInvalidGroup)
		}
	}
	ps.Name, ps.Count, ps.MinCount = role, total, total
	w := groupOf(ns, group, queue, mw)
	w.PodSets = []WorkloadPodSet{ps}
	return w, true, nil
}

// memberWorkload is the workload of one member alone, of its one pod set.
func memberWorkload(ad Adapter, m Job, prio PriorityResolver, opts ...WorkloadOption) (Workload, error) {
	// A copy: WorkloadOf changes its argument.
	view, err := ad.Decode(m.Object())
	if err != nil {
		return Workload{}, err
	}
	mw, err := WorkloadOf(ad.Kind().Name, view, prio, opts...)
	if err != nil {
		return Workload{}, err
	}
	if len(mw.PodSets) != 1 {
		return Workload{}, fmt.Errorf("%s has %d pod sets, a group member must have one: %w", m.Meta().GetName(), len(mw.PodSets), ErrInvalidGroup)
	}
	return mw, nil
}

// groupOf is the workload of group, without pod sets, as its oldest
// member's workload mw says.
func groupOf(ns, group, queue string, mw Workload) Workload {
	return Workload{Namespace: ns, Name: group, UID: GroupUIDPrefix + mw.UID, LocalQueue: queue,
		PriorityClass: mw.PriorityClass, Priority: mw.Priority, CreationTime: mw.CreationTime,
		MaxExecutionSeconds: mw.MaxExecutionSeconds}
}

// GroupTemplates returns, by pod set (role) of a pod group's workload, the
// pod set of the first member in it, as its user wrote it: what a pod of
// that role looks like.
func GroupTemplates(ad Adapter, members []Job) (map[string]PodSet, error) {
	out := map[string]PodSet{}
	for _, m := range members {
		role, ps, err := MemberRole(ad.Decode, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Meta().GetName(), err)
		}
		if out[role].Spec == nil {
			out[role] = ps
		}
	}
	return out, nil
}

// roleName names the pod set of the members that ask for what ps asks
// for: the same requests, node selector and tolerations.
func roleName(ps WorkloadPodSet) string {
	reqs := make(map[string]string, len(ps.Requests))
	for r, q := range ps.Requests {
		reqs[string(r)] = q.String()
	}
	b, _ := json.Marshal(struct {
		Requests     map[string]string   `json:"r"`
		NodeSelector map[string]string   `json:"n"`
		Tolerations  []corev1.Toleration `json:"t"`
	}{reqs, ps.NodeSelector, ps.Tolerations})
	h := fnv.New32a()
	h.Write(b)
	return fmt.Sprintf("role-%08x", h.Sum32())
}

// MemberRole returns a group member's role and its one pod set, as its
// user wrote it (a copy, decoded with decode).
func MemberRole(decode func(runtime.Object) (Job, error), m Job) (string, PodSet, error) {
	view, err := decode(m.Object())
	if err != nil {
		return "", PodSet{}, err
	}
	if err := Pristine(view); err != nil {
		return "", PodSet{}, err
	}
	sets, err := view.PodSets()
	if err != nil {
		return "", PodSet{}, err
	}
	if len(sets) != 1 {
		return "", PodSet{}, fmt.Errorf("%d pod sets, a group member must have one: %w", len(sets), ErrInvalidGroup)
	}
	return roleName(askOf(sets[0].Spec)), sets[0], nil
}
