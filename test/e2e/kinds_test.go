package e2e

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/appwrapper"
	"github.com/sluice-dev/sluice/services/integration/jaxjob"
	"github.com/sluice-dev/sluice/services/integration/jobset"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/integration/mpijob"
	"github.com/sluice-dev/sluice/services/integration/paddlejob"
	"github.com/sluice-dev/sluice/services/integration/pytorchjob"
	"github.com/sluice-dev/sluice/services/integration/raycluster"
	"github.com/sluice-dev/sluice/services/integration/rayjob"
	"github.com/sluice-dev/sluice/services/integration/tfjob"
	"github.com/sluice-dev/sluice/services/integration/trainjob"
	"github.com/sluice-dev/sluice/services/integration/xgboostjob"
)

// pod is a pod template asking for one CPU and one GPU; %s is an
// indentation-free nodeSelector line or "".
const gpuPod = `{spec: {restartPolicy: Never, %scontainers: [{name: main, image: busybox, resources: {requests: {cpu: "1", nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]}}`

// kindCase is one kind's part in the lifecycle test: a manifest whose pod
// sets ask for 3 GPUs in all (one pod set keeps a nodeSelector of its
// own, disk=ssd), and how the kind's operator reports its end.
type kindCase struct {
	adapter  jobframework.Adapter
	manifest string // %[1]s namespace, %[2]s name
	// finish ends the object as its operator would; nil: delete it (a
	// RayCluster never ends by itself).
	finish func(u *unstructured.Unstructured) error
	// prepare, if set, creates in a cluster what the object refers to (a
	// TrainJob's runtime).
	prepare func(t *testing.T, dyn dynamic.Interface)
}

var userSelector = `nodeSelector: {disk: ssd}, `

var kindCases = map[string]kindCase{
	"jobset": {
		adapter: jobset.Adapter{},
		manifest: `apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: %[2]s, namespace: %[1]s, labels: {sluice.dev/queue-name: q}}
spec:
  replicatedJobs:
  - {name: leader, replicas: 1, template: {spec: {parallelism: 1, completions: 1, template: ` + fmt.Sprintf(gpuPod, "") + `}}}
  - {name: workers, replicas: 2, template: {spec: {parallelism: 1, completions: 1, template: ` + fmt.Sprintf(gpuPod, userSelector) + `}}}
`,
		finish: conditionTrue("Completed", true),
	},
	"rayjob": {
		adapter: rayjob.Adapter{},
		manifest: `apiVersion: ray.io/v1
kind: RayJob
metadata: {name: %[2]s, namespace: %[1]s, labels: {sluice.dev/queue-name: q}}
spec:
  entrypoint: python -c 'print(1)'
  shutdownAfterJobFinishes: true
  submitterPodTemplate: {spec: {restartPolicy: Never, containers: [{name: submit, image: busybox, resources: {requests: {cpu: 500m}}}]}}
  rayClusterSpec:
    headGroupSpec: {rayStartParams: {}, template: ` + fmt.Sprintf(gpuPod, "") + `}
    workerGroupSpecs:
    - {groupName: gpus, replicas: 2, minReplicas: 1, maxReplicas: 4, rayStartParams: {}, template: ` + fmt.Sprintf(gpuPod, userSelector) + `}
`,
		finish: func(u *unstructured.Unstructured) error {
			if err := unstructured.SetNestedField(u.Object, "Complete", "status", "jobDeploymentStatus"); err != nil {
				return err
			}
			return unstructured.SetNestedField(u.Object, "SUCCEEDED", "status", "jobStatus")
		},
	},
	"raycluster": {
		adapter: raycluster.Adapter{},
		manifest: `apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: %[2]s, namespace: %[1]s, labels: {sluice.dev/queue-name: q}}
spec:
  headGroupSpec: {rayStartParams: {}, template: ` + fmt.Sprintf(gpuPod, "") + `}
  workerGroupSpecs:
  - {groupName: gpus, replicas: 2, minReplicas: 1, maxReplicas: 4, rayStartParams: {}, template: ` + fmt.Sprintf(gpuPod, userSelector) + `}
`,
	},
	"mpijob": {
		adapter: mpijob.Adapter{},
		manifest: `apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: %[2]s, namespace: %[1]s, labels: {sluice.dev/queue-name: q}}
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher: {replicas: 1, template: ` + fmt.Sprintf(gpuPod, "") + `}
    Worker: {replicas: 2, template: ` + fmt.Sprintf(gpuPod, userSelector) + `}
`,
		finish: conditionTrue("Succeeded", false),
	},
	"pytorchjob": {adapter: pytorchjob.Adapter{}, manifest: trainingJob("PyTorchJob", "pytorchReplicaSpecs", "Master"), finish: conditionTrue("Succeeded", false)},
	"tfjob":      {adapter: tfjob.Adapter{}, manifest: trainingJob("TFJob", "tfReplicaSpecs", "PS"), finish: conditionTrue("Succeeded", false)},
	"xgboostjob": {adapter: xgboostjob.Adapter{}, manifest: trainingJob("XGBoostJob", "xgbReplicaSpecs", "Master"), finish: conditionTrue("Failed", false)},
	"paddlejob":  {adapter: paddlejob.Adapter{}, manifest: trainingJob("PaddleJob", "paddleReplicaSpecs", "Master"), finish: conditionTrue("Succeeded", false)},
	"appwrapper": {
		adapter: appwrapper.Adapter{},
		// A Job whose pod set the AppWrapper project infers, and a Job
		// whose pod set is declared.
		manifest: `apiVersion: workload.codeflare.dev/v1beta2
kind: AppWrapper
metadata: {name: %[2]s, namespace: %[1]s, labels: {sluice.dev/queue-name: q}}
spec:
  components:
  - template: {apiVersion: batch/v1, kind: Job, metadata: {name: leader}, spec: {template: ` + fmt.Sprintf(gpuPod, "") + `}}
  - podSets: [{replicas: 2, path: template.spec.template}]
    template: {apiVersion: batch/v1, kind: Job, metadata: {name: workers}, spec: {parallelism: 2, completions: 2, template: ` + fmt.Sprintf(gpuPod, userSelector) + `}}
`,
		finish: func(u *unstructured.Unstructured) error {
			return unstructured.SetNestedField(u.Object, "Succeeded", "status", "phase")
		},
	},
	"jaxjob": {adapter: jaxjob.Adapter{}, manifest: trainingJob("JAXJob", "jaxReplicaSpecs", ""), finish: conditionTrue("Succeeded", false)},
	"trainjob": {
		adapter: trainjob.Adapter{},
		// The runtime's leader job, and the trainer's job of numNodes pods
		// with a nodeSelector of its own.
		manifest: `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: %[2]s, namespace: %[1]s, labels: {sluice.dev/queue-name: q}}
spec:
  runtimeRef: {name: e2e-kinds}
  trainer: {numNodes: 2}
`,
		finish: conditionTrue("Complete", true),
		prepare: func(t *testing.T, dyn dynamic.Interface) {
			applyTo(t, dyn, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: e2e-kinds}
spec:
  mlPolicy: {numNodes: 1}
  template:
    spec:
      replicatedJobs:
      - {name: leader, template: {spec: {template: `+fmt.Sprintf(gpuPod, "")+`}}}
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: `+fmt.Sprintf(gpuPod, userSelector)+`}
`)
		},
	},
}

// trainingJob is the manifest of a training operator job of kind whose
// replicas are under spec.<field>: one replica of type first and two
// workers with a nodeSelector of their own, or (first empty, a JAXJob)
// three such workers.
func trainingJob(kind, field, first string) string {
	head, workers := "", "3"
	if first != "" {
		head, workers = `
    `+first+`: {replicas: 1, restartPolicy: OnFailure, template: `+fmt.Sprintf(gpuPod, "")+`}`, "2"
	}
	return `apiVersion: kubeflow.org/v1
kind: ` + kind + `
metadata: {name: %[2]s, namespace: %[1]s, labels: {sluice.dev/queue-name: q}}
spec:
  ` + field + `:` + head + `
    Worker: {replicas: ` + workers + `, restartPolicy: OnFailure, template: ` + fmt.Sprintf(gpuPod, userSelector) + `}
`
}

// conditionTrue appends a True condition of type t to status.conditions,
// as metav1.Condition (meta) or as a Kubeflow JobCondition.
func conditionTrue(t string, meta bool) func(u *unstructured.Unstructured) error {
	return func(u *unstructured.Unstructured) error {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		now := time.Now().UTC().Format(time.RFC3339)
		c := map[string]any{"type": t, "status": "True", "reason": "TestFinished", "message": "finished by the test", "lastTransitionTime": now}
		if !meta {
			c["lastUpdateTime"] = now
		}
		return unstructured.SetNestedSlice(u.Object, append(conds, c), "status", "conditions")
	}
}

func getObject(t *testing.T, k jobframework.Kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := env.dyn.Resource(k.GVR()).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", k.Name, ns, name, err)
	}
	return u
}

// podSetSelectors reads each pod set's nodeSelector through the adapter.
func podSetSelectors(t *testing.T, ad jobframework.Adapter, u *unstructured.Unstructured) (bool, map[string]map[string]string) {
	t.Helper()
	if b, ok := ad.(jobframework.Binder); ok {
		ad = b.Bind(env.dyn) // a TrainJob's runtime: the same in every cluster here
	}
	j, err := ad.Decode(u)
	if err != nil {
		t.Fatalf("decode %s: %v", ad.Kind().Name, err)
	}
	sets, err := j.PodSets()
	if err != nil {
		t.Fatalf("pod sets of %s: %v", ad.Kind().Name, err)
	}
	out := map[string]map[string]string{}
	for _, ps := range sets {
		out[ps.Name] = maps.Clone(ps.Spec.NodeSelector)
	}
	return j.IsSuspended(), out
}

// TestKindLifecycle takes an object of each kind through Sluice: suspended
// on create, admitted with the flavor's node label in every pod set's
// template (the user's own selector kept), preempted by a higher-priority
// Job (suspended, templates restored, quota released), admitted again once
// the Job is done, and finished (or deleted), which releases its quota. No
// kind's operator runs here: the test writes the status the operator would.
// The kinds' CRDs are installed after `sluice dev` started.
func TestKindLifecycle(t *testing.T) {
	installKindCRDs(t)
	// Every kind with a CRD of its own; Job and Pod have tests of their own.
	for _, ad := range kinds.All {
		name := ad.Kind().Name
		if ad.Kind().Module == "" || ad.Kind().IsParent() {
			continue // a parent kind (RayService) has a test of its own
		}
		t.Run(name, func(t *testing.T) {
			c, ok := kindCases[name]
			if !ok {
				t.Fatalf("kind %s has no case in kindCases: a new kind's lifecycle is tested here", name)
			}
			kindLifecycle(t, c)
		})
	}
}

func kindLifecycle(t *testing.T, c kindCase) {
	k := c.adapter.Kind()
	ns := "e2e-" + k.Name
	queues(t, ns, 4, "LowerPriority")
	if c.prepare != nil {
		c.prepare(t, env.dyn)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(c.manifest, ns, "train")), &doc); err != nil {
		t.Fatalf("bad manifest: %v", err)
	}
	ri := env.dyn.Resource(k.GVR()).Namespace(ns)
	// The integration starts once discovery shows the CRD: retry the
	// create until the webhook suspends it.
	eventually(t, 60*time.Second, k.Name+" suspended on create by its webhook", func() (bool, string) {
		got, err := ri.Create(context.Background(), &unstructured.Unstructured{Object: doc}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		if s, _ := podSetSelectors(t, c.adapter, got); !s {
			return false, "not suspended (integration not started yet)"
		}
		return true, ""
	})
	created, err := ri.Create(context.Background(), &unstructured.Unstructured{Object: doc}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", k.Name, err)
	}
	if s, _ := podSetSelectors(t, c.adapter, created); !s {
		t.Fatalf("%s was not suspended on create", k.Name)
	}
	key := k.Name + "/" + ns + "/train"
	_, want := podSetSelectors(t, c.adapter, created)

	admitted := func() (bool, string) {
		suspended, got := podSetSelectors(t, c.adapter, getObject(t, k, ns, "train"))
		if suspended {
			return false, fmt.Sprintf("suspended; %v", got)
		}
		for ps, sel := range got {
			if sel["instance-type"] != "a100" {
				return false, fmt.Sprintf("pod set %s runs without the flavor's label: %v", ps, got)
			}
			for k, v := range want[ps] {
				if sel[k] != v {
					return false, fmt.Sprintf("pod set %s lost the user's selector: %v", ps, got)
				}
			}
		}
		return true, ""
	}
	eventually(t, 30*time.Second, k.Name+" admitted with the flavor in every pod template", admitted)
	waitEvent(t, ns, "train", "Admitted", "ClusterQueue "+ns, 10*time.Second)
	if r, ok := reservations(t)[key]; !ok || len(r.PodSets) != len(want) {
		t.Fatalf("reservation of %s = %+v, %v; want one with %d pod sets", key, r, ok, len(want))
	}

	// A higher-priority Job needs 2 of the 4 GPUs the object (3) holds.
	createJob(t, jobSpec{ns: ns, name: "urgent", queue: "q", priorityClass: "high", pods: 2, gpus: 1, runFor: "4s"})
	eventually(t, 30*time.Second, k.Name+" preempted: suspended with its templates restored", func() (bool, string) {
		u := getObject(t, k, ns, "train")
		suspended, got := podSetSelectors(t, c.adapter, u)
		if !suspended {
			return false, "still running"
		}
		for ps := range want {
			if !maps.Equal(got[ps], want[ps]) {
				return false, fmt.Sprintf("not restored: %v, want %v", got, want)
			}
		}
		if _, ok := u.GetAnnotations()["sluice.dev/admission"]; ok {
			return false, "admission annotation left"
		}
		return true, ""
	})
	waitEvent(t, ns, "train", "Preempted", "urgent", 10*time.Second)
	waitComplete(t, ns, "urgent", 60*time.Second)
	eventually(t, 60*time.Second, k.Name+" admitted again after the preemptor finished", admitted)

	if c.finish == nil {
		if err := ri.Delete(context.Background(), "train", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", k.Name, err)
		}
	} else {
		u := getObject(t, k, ns, "train")
		if err := c.finish(u); err != nil {
			t.Fatal(err)
		}
		if _, err := ri.UpdateStatus(context.Background(), u, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("finish %s: %v", k.Name, err)
		}
	}
	eventually(t, 30*time.Second, "quota of the ended "+k.Name+" released", func() (bool, string) {
		if r, ok := reservations(t)[key]; ok {
			return false, "still reserved in " + r.ClusterQueue
		}
		return true, ""
	})
}
