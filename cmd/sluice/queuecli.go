package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/services/integration/kinds"
)

// defaultServer is where `sluice dev` serves its HTTP address.
const defaultServer = "http://127.0.0.1:8090"

// output is -o: table (default), json or yaml.
type output string

func (o output) check() error {
	switch o {
	case "table", "json", "yaml":
		return nil
	}
	return usageError{Err: fmt.Errorf("-o %q: must be table, json or yaml", string(o))}
}

// print writes v as JSON or YAML, or calls table.
func (o output) print(w io.Writer, v any, table func(io.Writer)) error {
	switch o {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// newPendingCmd: `sluice pending`, where waiting workloads stand.
func newPendingCmd() *cobra.Command {
	var api adminAPI
	var namespace, queue, clusterQueue string
	var limit, offset int
	var all bool
	out := output("table")
	cmd := &cobra.Command{
		Use:   "pending (--cluster-queue CQ | -n NAMESPACE [--queue LQ] | -A)",
		Short: "List waiting workloads in admission order, with their positions and reasons",
		Long: "List a ClusterQueue's or a LocalQueue's waiting workloads in the order admission would take them now, from the " +
			"admission service's pending API: at --server or $SLUICE_SERVER; otherwise at " + defaultServer + " (sluice dev), or, when " +
			"nothing listens there, through the cluster's API server (the aggregated API visibility.sluice.dev), as the kubeconfig's user. " +
			"With -n alone (or -A), what waits in every LocalQueue of the namespace (of every namespace), by ClusterQueue and place, " +
			"read from the workloads API.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			var path string
			across := clusterQueue == "" && queue == "" && (namespace != "" || all)
			switch {
			case all && (clusterQueue != "" || queue != ""):
				return usageError{Err: fmt.Errorf("-A lists every namespace: give it without --cluster-queue or --queue")}
			case across:
			case clusterQueue != "" && queue == "":
				path = "/clusterqueues/" + url.PathEscape(clusterQueue) + "/pendingworkloads"
			case queue != "" && clusterQueue == "":
				if namespace == "" {
					namespace = "default"
				}
				path = "/namespaces/" + url.PathEscape(namespace) + "/localqueues/" + url.PathEscape(queue) + "/pendingworkloads"
			default:
				return usageError{Err: fmt.Errorf("give --cluster-queue, --queue (a LocalQueue, with -n), -n alone or -A")}
			}
			var sum visibility.PendingWorkloadsSummary
			if across {
				var err error
				if sum, err = pendingAcross(cmd.Context(), api, namespace, all); err != nil {
					return err
				}
				return out.print(cmd.OutOrStdout(), sum, func(w io.Writer) {
					fmt.Fprintln(w, "CLUSTERQUEUE\tPOSITION\tLQ POSITION\tWORKLOAD\tKIND\tLOCALQUEUE\tPRIORITY\tWAITING\tREASON")
					for _, it := range sum.Items {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s/%s\t%s\t%s\t%d\t%s\t%s\n", dash(it.ClusterQueueName), inLine(it.PositionInClusterQueue),
							inLine(it.PositionInLocalQueue), it.Metadata.Namespace, it.Metadata.Name, it.JobKind, it.LocalQueueName, it.Priority,
							(time.Duration(it.WaitingSeconds) * time.Second).String(), it.Reason)
					}
					fmt.Fprintf(w, "(%d waiting)\n", sum.Total)
				})
			}
			q := url.Values{"limit": {fmt.Sprint(limit)}, "offset": {fmt.Sprint(offset)}}
			if err := api.get(cmd.Context(), visibility.Prefix+path, q, &sum); err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), sum, func(w io.Writer) {
				fmt.Fprintln(w, "POSITION\tLQ POSITION\tWORKLOAD\tKIND\tLOCALQUEUE\tPRIORITY\tWAITING\tREASON")
				for _, it := range sum.Items {
					name := it.Metadata.Name
					if it.ScaleUp {
						name += " (scale-up)"
					}
					fmt.Fprintf(w, "%d\t%d\t%s/%s\t%s\t%s\t%d\t%s\t%s\n", it.PositionInClusterQueue, it.PositionInLocalQueue,
						it.Metadata.Namespace, name, it.JobKind, it.LocalQueueName, it.Priority,
						(time.Duration(it.WaitingSeconds) * time.Second).String(), it.Reason)
				}
				fmt.Fprintf(w, "(%d of %d waiting)\n", len(sum.Items), sum.Total)
			})
		},
	}
	f := cmd.Flags()
	bindServer(f, &api)
	f.StringVar(&api.namespace, "sluice-namespace", "", "no longer needed: the API server serves the pending API itself")
	_ = f.MarkDeprecated("sluice-namespace", "the API server serves the pending API (visibility.sluice.dev) itself")
	f.StringVarP(&namespace, "namespace", "n", "", "namespace of the LocalQueue; alone, every LocalQueue of the namespace (default: default)")
	f.BoolVarP(&all, "all-namespaces", "A", false, "what waits in every namespace")
	f.StringVar(&queue, "queue", "", "a LocalQueue")
	f.StringVar(&clusterQueue, "cluster-queue", "", "a ClusterQueue")
	f.IntVar(&limit, "limit", visibility.DefaultLimit, "at most this many workloads")
	f.IntVar(&offset, "offset", 0, "skip this many first")
	f.StringVarP((*string)(&out), "output", "o", "table", "table, json or yaml")
	return cmd
}

// bindServer adds the flags that say where the admission service is.
func bindServer(f *pflag.FlagSet, api *adminAPI) {
	f.StringVar(&api.server, "server", "", "the admission service's HTTP address (default $SLUICE_SERVER, then "+defaultServer+
		", then the cluster's API server)")
	f.StringVar(&api.common.kubeconfig, "kubeconfig", "", "kubeconfig whose user reads the visibility API through the API server (default: $KUBECONFIG, then ~/.kube/config)")
}

// inLine is a place in line; "-" for a workload not in line (deactivated).
func inLine(p int32) string {
	if p == 1<<31-1 {
		return "-"
	}
	return fmt.Sprint(p)
}

// getJSON fetches u and decodes it; an error answer's message is returned.
func getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return usageError{Err: fmt.Errorf("--server: %w", err)}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reach the admission service at %s: %w", req.URL.Host, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswerBytes+1))
	if err != nil {
		return err
	}
	if len(body) > maxAnswerBytes {
		return fmt.Errorf("GET %s: the answer is more than the %d bytes an answer may have", u, maxAnswerBytes)
	}
	if res.StatusCode != http.StatusOK {
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &st) == nil && st.Message != "" {
			if res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusBadRequest {
				return usageError{Err: fmt.Errorf("%s", st.Message)}
			}
			return fmt.Errorf("%s: %s", res.Status, st.Message)
		}
		return fmt.Errorf("GET %s: %s", u, res.Status)
	}
	return json.Unmarshal(body, v)
}

var (
	clusterQueues = schema.GroupVersionResource{Group: v1beta1.GroupVersion.Group, Version: v1beta1.GroupVersion.Version, Resource: "clusterqueues"}
	localQueues   = schema.GroupVersionResource{Group: v1beta1.GroupVersion.Group, Version: v1beta1.GroupVersion.Version, Resource: "localqueues"}
)

// queueRow is one line of `sluice queues`.
type queueRow struct {
	Kind       string                `json:"kind"`
	Name       string                `json:"name"`
	Namespace  string                `json:"namespace,omitempty"`
	Cohort     string                `json:"cohort,omitempty"`
	ClusterQ   string                `json:"clusterQueue,omitempty"`
	StopPolicy string                `json:"stopPolicy,omitempty"`
	Pending    int32                 `json:"pending"`
	Admitted   int32                 `json:"admitted"`
	Usage      []v1beta1.FlavorUsage `json:"flavorsUsage,omitempty"`
	Quota      map[string]string     `json:"nominalQuota,omitempty"`
}

// newQueuesCmd: `sluice queues`, the queues and what they hold.
func newQueuesCmd() *cobra.Command {
	c := &common{}
	out := output("table")
	var namespace string
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "List ClusterQueues and LocalQueues with their usage, pending and admitted workloads",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			dyn, err := c.dynamic()
			if err != nil {
				return err
			}
			rows, err := listQueues(cmd.Context(), dyn, namespace)
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), rows, func(w io.Writer) {
				fmt.Fprintln(w, "KIND\tQUEUE\tCOHORT / CLUSTERQUEUE\tSTOP\tPENDING\tADMITTED\tUSAGE")
				for _, r := range rows {
					name, parent := r.Name, r.Cohort
					if r.Kind == "LocalQueue" {
						name, parent = r.Namespace+"/"+r.Name, r.ClusterQ
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.Kind, name, dash(parent), dash(r.StopPolicy), r.Pending, r.Admitted, usageText(r))
				}
			})
		},
	}
	cmd.Flags().StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only LocalQueues of this namespace (default: all)")
	cmd.Flags().StringVarP((*string)(&out), "output", "o", "table", "table, json or yaml")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// usageText renders "flavor: res used/nominal, …".
func usageText(r queueRow) string {
	var parts []string
	for _, fu := range r.Usage {
		for _, ru := range fu.Resources {
			p := fmt.Sprintf("%s %s %s", fu.Name, ru.Name, ru.Total.String())
			if q, ok := r.Quota[fu.Name+"/"+string(ru.Name)]; ok {
				p += "/" + q
			}
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func listQueues(ctx context.Context, dyn dynamic.Interface, namespace string) ([]queueRow, error) {
	var rows []queueRow
	if namespace == "" {
		cqs, err := dyn.Resource(clusterQueues).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list ClusterQueues: %w", err)
		}
		for i := range cqs.Items {
			var cq v1beta1.ClusterQueue
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cqs.Items[i].Object, &cq); err != nil {
				return nil, fmt.Errorf("ClusterQueue %s: %w", cqs.Items[i].GetName(), err)
			}
			r := queueRow{Kind: "ClusterQueue", Name: cq.Name, Cohort: cq.Spec.Cohort, StopPolicy: string(ptrOr(cq.Spec.StopPolicy)),
				Pending: cq.Status.PendingWorkloads, Admitted: cq.Status.AdmittedWorkloads, Usage: cq.Status.FlavorsUsage, Quota: map[string]string{}}
			for _, g := range cq.Spec.ResourceGroups {
				for _, f := range g.Flavors {
					for _, q := range f.Resources {
						r.Quota[string(f.Name)+"/"+string(q.Name)] = q.NominalQuota.String()
					}
				}
			}
			rows = append(rows, r)
		}
	}
	lqs, err := dyn.Resource(localQueues).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list LocalQueues: %w", err)
	}
	for i := range lqs.Items {
		var lq v1beta1.LocalQueue
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(lqs.Items[i].Object, &lq); err != nil {
			return nil, fmt.Errorf("LocalQueue %s/%s: %w", lqs.Items[i].GetNamespace(), lqs.Items[i].GetName(), err)
		}
		rows = append(rows, queueRow{Kind: "LocalQueue", Name: lq.Name, Namespace: lq.Namespace, ClusterQ: lq.Spec.ClusterQueue,
			StopPolicy: string(ptrOr(lq.Spec.StopPolicy)), Pending: lq.Status.PendingWorkloads, Admitted: lq.Status.AdmittedWorkloads, Usage: lq.Status.FlavorsUsage})
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Kind != rows[j].Kind {
			return rows[i].Kind == "ClusterQueue"
		}
		return rows[i].Namespace+"/"+rows[i].Name < rows[j].Namespace+"/"+rows[j].Name
	})
	return rows, nil
}

func ptrOr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// newStopCmds: `sluice stop` and `sluice resume` set a queue's stopPolicy.
func newStopCmds() []*cobra.Command {
	mk := func(use, short string, policy func(drain bool) string) *cobra.Command {
		c := &common{}
		var drain bool
		cmd := &cobra.Command{
			Use:   use + " (clusterqueue NAME | localqueue NAMESPACE/NAME | workload [KIND/]NAMESPACE/NAME)",
			Short: short,
			Args: func(_ *cobra.Command, args []string) error {
				if len(args) == 2 && args[0] == "workload" {
					_, err := parseWorkloadRef(args[1])
					if err != nil {
						return usageError{Err: err}
					}
					return nil
				}
				if len(args) != 2 || (args[0] != "clusterqueue" && args[0] != "localqueue") {
					return usageError{Err: fmt.Errorf("give clusterqueue NAME or localqueue NAMESPACE/NAME")}
				}
				if args[0] == "localqueue" && strings.Count(args[1], "/") != 1 {
					return usageError{Err: fmt.Errorf("localqueue %q: give NAMESPACE/NAME", args[1])}
				}
				return nil
			},
			RunE: func(cmd *cobra.Command, args []string) error {
				dyn, err := c.dynamic()
				if err != nil {
					return err
				}
				if args[0] == "workload" {
					return setActive(cmd, dyn, args[1], use == "resume")
				}
				p := policy(drain)
				body := fmt.Sprintf(`{"spec":{"stopPolicy":%q}}`, p)
				var ri dynamic.ResourceInterface = dyn.Resource(clusterQueues)
				name := args[1]
				if args[0] == "localqueue" {
					ns, n, _ := strings.Cut(args[1], "/")
					ri, name = dyn.Resource(localQueues).Namespace(ns), n
				}
				var obj *unstructured.Unstructured
				if obj, err = ri.Patch(cmd.Context(), name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("%s %s: %w", args[0], args[1], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s: stopPolicy %s\n", args[0], obj.GetName(), p)
				return nil
			},
		}
		cmd.Flags().StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
		if use == "stop" {
			cmd.Flags().BoolVar(&drain, "drain", false, "also evict what runs (HoldAndDrain); without it, Hold: admit nothing new")
		}
		return cmd
	}
	return []*cobra.Command{
		mk("stop", "Stop a queue from admitting (stopPolicy Hold, or HoldAndDrain with --drain), or deactivate a workload", func(drain bool) string {
			if drain {
				return string(v1beta1.HoldAndDrain)
			}
			return string(v1beta1.Hold)
		}),
		mk("resume", "Let a stopped queue admit again (stopPolicy None), or reactivate a deactivated workload", func(bool) string { return string(v1beta1.None) }),
	}
}

// setActive deactivates a workload (its object's active annotation
// "false"), or reactivates it: the active annotation removed and the
// reactivate annotation set to the time, so that a deactivated workload
// queues again whatever deactivated it.
func setActive(cmd *cobra.Command, dyn dynamic.Interface, arg string, active bool) error {
	ref, _ := parseWorkloadRef(arg)
	ad, err := kinds.Select([]string{ref.Kind})
	if err != nil {
		return usageError{Err: fmt.Errorf("workload %s: %w", arg, err)}
	}
	ann := map[string]any{jobframework.ActiveAnnotation: "false"}
	said := jobframework.ActiveAnnotation + "=false (evicted if admitted; not admitted until resumed)"
	if active {
		token := time.Now().UTC().Format(time.RFC3339Nano)
		ann = map[string]any{jobframework.ActiveAnnotation: nil, jobframework.ReactivateAnnotation: token}
		said = jobframework.ReactivateAnnotation + "=" + token + " (queued again if it was deactivated)"
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(ad[0].Kind().GVR()).Namespace(ref.Namespace).Patch(cmd.Context(), ref.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("workload %s: %w", arg, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "workload %s/%s/%s: %s\n", ref.Kind, ref.Namespace, ref.Name, said)
	return nil
}

func (c *common) dynamic() (dynamic.Interface, error) {
	kc, err := c.kube()
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(kc)
}
