package visibility

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// The states of a workload, as `kubectl get workloads` shows them.
const (
	// StatePending: waiting for quota (or not admissible: Reason says).
	StatePending = "Pending"
	// StateReserved: quota reserved, waiting for its admission checks.
	StateReserved = "Reserved"
	// StateAdmitted: admitted; its job is being started.
	StateAdmitted = "Admitted"
	// StateRunning: its job runs.
	StateRunning = "Running"
	// StateFinished: its job ended (Succeeded says how).
	StateFinished = "Finished"
	// StateEvicted: its admission was taken back (preempted, a node
	// failed, pods not ready …); it queues again.
	StateEvicted = "Evicted"
	// StateDeactivated: it waits for its user to reactivate it.
	StateDeactivated = "Deactivated"
)

// Workload is one job Sluice manages, a read-only object of the
// aggregated API: what the event stream says of it, with its place in
// line while it waits. Its name is KIND.NAME (the job integration and the
// job's name: job.train, jobset.train), unique in its namespace.
type Workload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              WorkloadSpec   `json:"spec"`
	Status            WorkloadStatus `json:"status"`
}

// WorkloadSpec is what the job asks for.
type WorkloadSpec struct {
	// JobKind is the job integration (job, jobset, …), JobName the job.
	JobKind       string           `json:"jobKind"`
	JobName       string           `json:"jobName"`
	LocalQueue    string           `json:"localQueue"`
	Priority      int32            `json:"priority"`
	PriorityClass string           `json:"priorityClass,omitempty"`
	PodSets       []WorkloadPods   `json:"podSets,omitempty"`
	Elastic       bool             `json:"elastic,omitempty"`
	MaxExecution  *metav1.Duration `json:"maximumExecutionTime,omitempty"`
}

// WorkloadPods is one pod set: its name and how many pods.
type WorkloadPods struct {
	Name  string `json:"name"`
	Count int32  `json:"count"`
}

// WorkloadStatus is where the workload stands.
type WorkloadStatus struct {
	State        string `json:"state"`
	ClusterQueue string `json:"clusterQueue,omitempty"`
	// Flavors are the ResourceFlavors of its admission, resource=flavor.
	Flavors []string `json:"flavors,omitempty"`
	// Admission names the current (or last) admission.
	Admission string `json:"admission,omitempty"`
	// Positions count from 0 in the order admission would take the
	// waiting workloads now (Pending only; absent in a watch).
	PositionInClusterQueue *int32 `json:"positionInClusterQueue,omitempty"`
	PositionInLocalQueue   *int32 `json:"positionInLocalQueue,omitempty"`
	// Reason is why it waits, was evicted or deactivated, or how its job
	// ended.
	Reason    string `json:"reason,omitempty"`
	Succeeded *bool  `json:"succeeded,omitempty"`
	// LastTransitionTime is when State last changed.
	LastTransitionTime metav1.Time  `json:"lastTransitionTime"`
	AdmittedAt         *metav1.Time `json:"admittedAt,omitempty"`
	FinishedAt         *metav1.Time `json:"finishedAt,omitempty"`
	// TraceID is the workload's trace (W3C), as its events carry it.
	TraceID string `json:"traceID,omitempty"`
	// Events are every stored event of the workload, oldest first (a
	// get of one workload only).
	Events []WorkloadEvent `json:"events,omitempty"`
}

// WorkloadEvent is one event of a workload's story.
type WorkloadEvent struct {
	Time    metav1.Time `json:"time"`
	Type    string      `json:"type"`
	Message string      `json:"message,omitempty"`
	TraceID string      `json:"traceID,omitempty"`
}

// WorkloadList is a list answer.
type WorkloadList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []Workload `json:"items"`
}

// WorkloadWatchEvent is one change a watch sends.
type WorkloadWatchEvent struct {
	// Type is ADDED, MODIFIED or DELETED.
	Type     string
	Workload Workload
}

// ErrExpired: a watch asked to start from a resourceVersion older than the
// changes kept (HTTP 410: list again).
var ErrExpired = errors.New("resourceVersion too old: list again")

// WorkloadSource answers for the workloads: the admission service's
// catalog of the event stream.
type WorkloadSource interface {
	// ListWorkloads lists a namespace's workloads (every namespace's for
	// ""), with the resourceVersion they are as of.
	ListWorkloads(ctx context.Context, namespace string) ([]Workload, string, error)
	// GetWorkload is one workload with its events.
	GetWorkload(ctx context.Context, namespace, name string) (Workload, bool, error)
	// WatchWorkloads sends the changes of a namespace's workloads after
	// resourceVersion ("": from now) until ctx ends; ErrExpired when
	// that is too old.
	WatchWorkloads(ctx context.Context, namespace, resourceVersion string) (<-chan WorkloadWatchEvent, error)
}

// WorkloadKind and friends name the resource.
const (
	WorkloadKind     = "Workload"
	WorkloadResource = "workloads"
)

// WorkloadName is the object name of the workload of a job: KIND.NAME.
func WorkloadName(kind, name string) string { return kind + "." + name }

// ParseWorkloadName splits KIND.NAME; ok is false without a dot.
func ParseWorkloadName(s string) (kind, name string, ok bool) {
	kind, name, ok = strings.Cut(s, ".")
	return kind, name, ok && kind != "" && name != ""
}

// RegisterWorkloads adds list, get and watch of workloads to mux, as JSON
// or, for kubectl, as a Table (Accept: application/json;as=Table); now
// gives the Table's ages.
func RegisterWorkloads(mux *http.ServeMux, src WorkloadSource, now func() time.Time) {
	list := func(w http.ResponseWriter, r *http.Request, ns string) {
		sel, err := selectorOf(r)
		if err != nil {
			fail(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
		if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
			watch(w, r, src, ns, sel, now)
			return
		}
		items, rv, err := src.ListWorkloads(r.Context(), ns)
		if err != nil {
			unavailable(w, err)
			return
		}
		kept := items[:0]
		for _, it := range items {
			if sel.match(it) {
				kept = append(kept, it)
			}
		}
		if asTable(r) {
			writeJSON(w, table(kept, rv, includeObject(r), true, now()))
			return
		}
		for i := range kept {
			kept[i].TypeMeta = workloadType
		}
		writeJSON(w, WorkloadList{TypeMeta: metav1.TypeMeta{Kind: "WorkloadList", APIVersion: APIVersion},
			ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: kept})
	}
	mux.HandleFunc("GET "+Prefix+"/workloads", func(w http.ResponseWriter, r *http.Request) { list(w, r, "") })
	mux.HandleFunc("GET "+Prefix+"/namespaces/{namespace}/workloads", func(w http.ResponseWriter, r *http.Request) {
		list(w, r, r.PathValue("namespace"))
	})
	mux.HandleFunc("GET "+Prefix+"/namespaces/{namespace}/workloads/{name}", func(w http.ResponseWriter, r *http.Request) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		wl, found, err := src.GetWorkload(r.Context(), ns, name)
		switch {
		case err != nil:
			unavailable(w, err)
			return
		case !found:
			fail(w, http.StatusNotFound, "NotFound", fmt.Sprintf("workloads.%s %q not found in namespace %q", Group, name, ns))
			return
		}
		if asTable(r) {
			writeJSON(w, table([]Workload{wl}, wl.ResourceVersion, includeObject(r), true, now()))
			return
		}
		wl.TypeMeta = workloadType
		writeJSON(w, wl)
	})
}

var workloadType = metav1.TypeMeta{Kind: WorkloadKind, APIVersion: APIVersion}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func unavailable(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrBusy) {
		w.Header().Set("Retry-After", "1")
		fail(w, http.StatusTooManyRequests, "TooManyRequests", err.Error())
		return
	}
	fail(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error())
}

// selector is what a list or watch may select by: fieldSelector
// metadata.name, metadata.namespace and status.state (= or ==, and !=),
// as kubectl sends for `get workloads NAME --watch`. Labels select
// nothing: workloads carry none, so only an empty labelSelector is taken.
type selector []fieldReq

type fieldReq struct {
	field, value string
	not          bool
}

func selectorOf(r *http.Request) (selector, error) {
	if ls := strings.TrimSpace(r.URL.Query().Get("labelSelector")); ls != "" {
		return nil, fmt.Errorf("labelSelector %q: workloads carry no labels; select by fieldSelector (metadata.name, metadata.namespace, status.state)", ls)
	}
	fs := strings.TrimSpace(r.URL.Query().Get("fieldSelector"))
	if fs == "" {
		return nil, nil
	}
	var sel selector
	for _, term := range strings.Split(fs, ",") {
		var req fieldReq
		var ok bool
		if req.field, req.value, ok = strings.Cut(term, "!="); ok {
			req.not = true
		} else if req.field, req.value, ok = strings.Cut(term, "=="); !ok {
			req.field, req.value, ok = strings.Cut(term, "=")
		}
		req.field = strings.TrimSpace(req.field)
		if !ok {
			return nil, fmt.Errorf("fieldSelector %q: term %q is not FIELD=VALUE or FIELD!=VALUE", fs, term)
		}
		switch req.field {
		case "metadata.name", "metadata.namespace", "status.state":
		default:
			return nil, fmt.Errorf("fieldSelector %q: field %q is not supported (metadata.name, metadata.namespace, status.state)", fs, req.field)
		}
		req.value = strings.TrimSpace(req.value)
		sel = append(sel, req)
	}
	return sel, nil
}

func (s selector) match(w Workload) bool {
	for _, req := range s {
		var v string
		switch req.field {
		case "metadata.name":
			v = w.Name
		case "metadata.namespace":
			v = w.Namespace
		case "status.state":
			v = w.Status.State
		}
		if (v == req.value) == req.not {
			return false
		}
	}
	return true
}

// watch streams changes as Kubernetes watch events, one JSON object per
// line, until the client leaves.
func watch(w http.ResponseWriter, r *http.Request, src WorkloadSource, ns string, sel selector, now func() time.Time) {
	rv := r.URL.Query().Get("resourceVersion")
	if rv == "0" {
		rv = "" // "any": from now, after the current state
	}
	ctx := r.Context()
	ch, err := src.WatchWorkloads(ctx, ns, rv)
	if errors.Is(err, ErrExpired) {
		// As the API server does: a 200 with one ERROR event.
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": status{Kind: "Status", APIVer: "v1",
			Status: "Failure", Message: err.Error(), Reason: "Expired", Code: http.StatusGone}})
		return
	}
	if err != nil {
		unavailable(w, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	tbl, include, first := asTable(r), includeObject(r), true
	enc := json.NewEncoder(w)
	keepAlive := time.NewTicker(30 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepAlive.C:
			// Nothing to send: a watch event stream has no comments, and
			// kubectl keeps the connection open without one.
			continue
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if !sel.match(ev.Workload) {
				continue
			}
			var obj any
			if tbl {
				// Column definitions with the first event only, as the
				// API server sends them.
				obj = table([]Workload{ev.Workload}, ev.Workload.ResourceVersion, include, first, now())
				first = false
			} else {
				ev.Workload.TypeMeta = workloadType
				obj = ev.Workload
			}
			if enc.Encode(map[string]any{"type": ev.Type, "object": obj}) != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// asTable: the client asks for a meta.k8s.io Table (kubectl get does).
func asTable(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if strings.Contains(part, "as=Table") && strings.Contains(part, "g=meta.k8s.io") {
			return true
		}
	}
	return false
}

// includeObject is the Table's includeObject: None, Metadata (default)
// or Object.
func includeObject(r *http.Request) string {
	switch v := r.URL.Query().Get("includeObject"); v {
	case "None", "Object":
		return v
	}
	return "Metadata"
}

// The columns kubectl prints: priority 0 always, 1 with -o wide.
var workloadColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "KIND.NAME: the job integration and the job's name"},
	{Name: "Queue", Type: "string", Description: "the LocalQueue the job was submitted to"},
	{Name: "State", Type: "string", Description: "Pending, Reserved, Admitted, Running, Finished, Evicted or Deactivated"},
	{Name: "Flavor", Type: "string", Description: "the ResourceFlavors of its admission"},
	{Name: "Priority", Type: "integer", Description: "the workload's priority"},
	{Name: "Position", Type: "string", Description: "place in its ClusterQueue's line (from 0) while it waits"},
	{Name: "Reason", Type: "string", Description: "why it waits, was evicted or deactivated, or how its job ended"},
	{Name: "Age", Type: "string", Description: "time since the job was created"},
	{Name: "ClusterQueue", Type: "string", Priority: 1, Description: "the ClusterQueue of its LocalQueue"},
	{Name: "LQ Position", Type: "string", Priority: 1, Description: "place in its LocalQueue's line (from 0) while it waits"},
	{Name: "Priority Class", Type: "string", Priority: 1, Description: "the workload's priority class"},
	{Name: "Pods", Type: "integer", Priority: 1, Description: "pods over all its pod sets"},
	{Name: "Trace", Type: "string", Priority: 1, Description: "the workload's trace id"},
}

// table renders workloads as kubectl's Table, ages as of now; withColumns
// false leaves the column definitions out (watch events after the first).
func table(items []Workload, rv, include string, withColumns bool, now time.Time) metav1.Table {
	t := metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: rv}, Rows: make([]metav1.TableRow, 0, len(items))}
	if withColumns {
		t.ColumnDefinitions = workloadColumns
	}
	for _, wl := range items {
		pods := int64(0)
		for _, ps := range wl.Spec.PodSets {
			pods += int64(ps.Count)
		}
		row := metav1.TableRow{Cells: []any{
			wl.Name, wl.Spec.LocalQueue, wl.Status.State, strings.Join(flavorNames(wl.Status.Flavors), ","),
			int64(wl.Spec.Priority), position(wl.Status.PositionInClusterQueue), oneLine(wl.Status.Reason),
			age(wl.CreationTimestamp.Time, now), wl.Status.ClusterQueue, position(wl.Status.PositionInLocalQueue),
			wl.Spec.PriorityClass, pods, wl.Status.TraceID,
		}}
		var obj any
		switch include {
		case "Object":
			wl.TypeMeta = workloadType
			wl.Status.Events = nil
			obj = wl
		case "Metadata":
			obj = metav1.PartialObjectMetadata{
				TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
				ObjectMeta: wl.ObjectMeta,
			}
		}
		if obj != nil {
			row.Object.Raw, _ = json.Marshal(obj) // plain structs: never fails
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// flavorNames are the distinct flavors of resource=flavor pairs, in order.
func flavorNames(pairs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range pairs {
		_, f, _ := strings.Cut(p, "=")
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

func position(p *int32) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(int(*p))
}

// oneLine keeps a reason to one short line for a column.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 80 {
		return string(r[:79]) + "…"
	}
	return s
}

// age is the time since t, as kubectl prints ages (5m, 2d3h).
func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}
