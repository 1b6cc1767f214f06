package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/visibility"
)

// kubectl runs kubectl on the suite's cluster, as its admin.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root(), "bin", "devcluster"), append([]string{"kubectl", "--dir", env.state}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestWorkloadsInKubectl: `kubectl get workloads` lists a finished, a
// running and a waiting Job with their queue, state, flavor, place and
// reason (the aggregated API's workloads); -o wide, -o yaml, describe and
// --watch work as for any resource; a tenant reads its own namespace's
// workloads only.
func TestWorkloadsInKubectl(t *testing.T) {
	registerVisibility(t)
	ns, other := "e2e-wl-a", "e2e-wl-b"
	for _, n := range []string{ns, other} {
		queues(t, n, 1, "Never")
	}
	createJob(t, jobSpec{ns: ns, name: "done", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	waitComplete(t, ns, "done", 60*time.Second)
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 1, gpus: 1, runFor: "600s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "waiting", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	waitEvent(t, ns, "waiting", "Pending", "insufficient unused quota", 45*time.Second)
	// More GPUs than its ClusterQueue has: it never runs (the quota
	// checker of ns's queues does not know other's).
	createJob(t, jobSpec{ns: other, name: "elsewhere", queue: "q", pods: 1, gpus: 2, runFor: "1s"})

	// Columns at a glance: NAME QUEUE STATE FLAVOR PRIORITY POSITION
	// REASON AGE.
	rows := map[string]*regexp.Regexp{
		"job.done":    regexp.MustCompile(`(?m)^job\.done\s+q\s+Finished\s+a100\s+0\s+Succeeded: .*\s+\d+[sm]$`),
		"job.running": regexp.MustCompile(`(?m)^job\.running\s+q\s+Running\s+a100\s+0\s+\d+[sm]$`),
		"job.waiting": regexp.MustCompile(`(?m)^job\.waiting\s+q\s+Pending\s+0\s+0\s+.*insufficient unused quota.*\s+\d+[sm]$`),
	}
	var out string
	eventually(t, 30*time.Second, "kubectl get workloads shows all three", func() (bool, string) {
		var err error
		out, err = kubectl(t, "get", "workloads", "-n", ns)
		if err != nil {
			return false, out
		}
		for name, re := range rows {
			if !re.MatchString(out) {
				return false, name + " not as expected in:\n" + out
			}
		}
		return true, out
	})
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if got := strings.Join(header, " "); got != "NAME QUEUE STATE FLAVOR PRIORITY POSITION REASON AGE" {
		t.Errorf("header: %q", got)
	}
	if strings.Contains(out, "elsewhere") {
		t.Errorf("-n %s lists %s's workload:\n%s", ns, other, out)
	}
	if all, err := kubectl(t, "get", "workloads", "-A"); err != nil || !regexp.MustCompile(`(?m)^`+other+`\s+job\.elsewhere\s`).MatchString(all) {
		t.Errorf("get workloads -A: %v\n%s", err, all)
	}
	if wide, err := kubectl(t, "get", "workloads", "-n", ns, "-o", "wide"); err != nil ||
		!strings.Contains(wide, "CLUSTERQUEUE") || !strings.Contains(wide, "TRACE") || !regexp.MustCompile(`job\.waiting\s.*\s`+ns+`\s+0\s`).MatchString(wide) {
		t.Errorf("get workloads -o wide: %v\n%s", err, wide)
	}
	if y, err := kubectl(t, "get", "workload", "job.running", "-n", ns, "-o", "yaml"); err != nil ||
		!strings.Contains(y, "kind: Workload") || !strings.Contains(y, "state: Running") || !strings.Contains(y, "jobName: running") {
		t.Errorf("get workload -o yaml: %v\n%s", err, y)
	}
	if d, err := kubectl(t, "describe", "workload", "job.waiting", "-n", ns); err != nil ||
		!strings.Contains(d, "workload.v1.submitted") || !strings.Contains(d, "workload.v1.pending") || !regexp.MustCompile(`Trace\s*I[Dd]:\s+[0-9a-f]{32}`).MatchString(d) {
		t.Errorf("describe workload: %v\n%s", err, d)
	}

	// The same without kubectl: sluice get workloads, and sluice pending
	// for a whole namespace or every one.
	if got := sluiceCLI(t, "get", "workloads", "-n", ns); !regexp.MustCompile(`(?m)^job\.waiting\s+q\s+Pending\s+-\s+0\s+0\s+pod set main: insufficient`).MatchString(got) {
		t.Errorf("sluice get workloads:\n%s", got)
	}
	if got := sluiceCLI(t, "pending", "-n", ns); !regexp.MustCompile(`(?m)^`+ns+`\s+0\s+0\s+`+ns+`/waiting\s+job\s+q\s`).MatchString(got) ||
		strings.Contains(got, "elsewhere") || !strings.Contains(got, "(1 waiting)") {
		t.Errorf("sluice pending -n %s:\n%s", ns, got)
	}
	if got := sluiceCLI(t, "pending", "-A"); !strings.Contains(got, ns+"/waiting") || !strings.Contains(got, other+"/elsewhere") {
		t.Errorf("sluice pending -A:\n%s", got)
	}

	// --watch: the running Job deleted, the waiting one is admitted.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := exec.CommandContext(ctx, filepath.Join(root(), "bin", "devcluster"), "kubectl", "--dir", env.state, "get", "workloads", "-n", ns, "--watch")
	stdout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = w.Wait() }()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The list comes first; the deletion only after it.
	seen := ""
	for !strings.Contains(seen, "job.waiting") {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl get --watch ended:\n%s", seen)
			}
			seen += l + "\n"
		case <-ctx.Done():
			t.Fatalf("kubectl get --watch listed nothing:\n%s", seen)
		}
	}
	bg := metav1.DeletePropagationBackground
	if err := env.kube.BatchV1().Jobs(ns).Delete(context.Background(), "running", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	admitted := regexp.MustCompile(`^job\.waiting\s+q\s+(Admitted|Running)\s+a100\s`)
	for watching := true; watching; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl get --watch ended before job.waiting was admitted:\n%s", seen)
			}
			seen += l + "\n"
			watching = !admitted.MatchString(l)
		case <-ctx.Done():
			t.Fatalf("kubectl get --watch never showed job.waiting admitted:\n%s", seen)
		}
	}

	// A tenant of ns with the right to read workloads there: its own, and
	// nothing of other or of every namespace.
	token := tenant(t, ns)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "workload-viewer", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{visibility.Group}, Resources: []string{"workloads"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := env.kube.RbacV1().Roles(ns).Create(context.Background(), role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-workload-viewer", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "workload-viewer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: ns}}}
	if _, err := env.kube.RbacV1().RoleBindings(ns).Create(context.Background(), rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tc := asTenant(t, token)
	eventually(t, 20*time.Second, "the tenant lists its namespace's workloads", func() (bool, string) {
		code, body := getRaw(tc, visibility.Prefix+"/namespaces/"+ns+"/workloads")
		var l visibility.WorkloadList
		if err := json.Unmarshal(body, &l); err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %s", code, body)
		}
		var names []string
		for _, it := range l.Items {
			names = append(names, it.Name)
		}
		return strings.Join(names, ",") == "job.done,job.waiting", strings.Join(names, ",")
	})
	for _, path := range []string{"/namespaces/" + other + "/workloads", "/workloads", "/namespaces/" + other + "/workloads/job.elsewhere"} {
		if code, body := getRaw(tc, visibility.Prefix+path); code != http.StatusForbidden {
			t.Errorf("tenant of %s reads %s: %d %s, want 403", ns, path, code, body)
		}
	}
}
