package convert

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestConvert(t *testing.T) {
	cases := []struct {
		name         string
		in           string
		drop         bool
		want         string
		wantWarnings []string
		wantErr      string
	}{
		{
			name: "v1beta1 ClusterQueue: only the apiVersion changes",
			in: `apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohort: research
  namespaceSelector: {}
  flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: TryNextFlavor}
  preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 9, lendingLimit: 4}]
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata:
  name: team-a
spec:
  cohort: research
  flavorFungibility:
    whenCanBorrow: MayStopSearch
    whenCanPreempt: TryNextFlavor
  namespaceSelector: {}
  preemption:
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources:
    - cpu
    flavors:
    - name: default
      resources:
      - lendingLimit: 4
        name: cpu
        nominalQuota: 9
`,
		},
		{
			name: "v1beta2 renames: cohortName and parentName",
			in: `apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec: {cohortName: research}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec: {parentName: company}
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata:
  name: team-a
spec:
  cohort: research
---
apiVersion: sluice.dev/v1beta1
kind: Cohort
metadata:
  name: research
spec:
  parent: company
`,
		},
		{
			name: "status and server-set metadata go; labels and annotations stay",
			in: `apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  name: main
  namespace: team-a
  labels: {team: a}
  uid: 0b5d1c9e-1111-4222-8333-944455556666
  resourceVersion: "42"
  generation: 3
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields: [{manager: kubectl}]
spec: {clusterQueue: team-a}
status: {pendingWorkloads: 3, admittedWorkloads: 1}
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata:
  labels:
    team: a
  name: main
  namespace: team-a
spec:
  clusterQueue: team-a
`,
		},
		{
			name: "a List from kubectl get -o yaml: each item a document; Kueue's finalizer and kubectl's record go",
			in: `apiVersion: v1
kind: List
items:
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: ResourceFlavor
  metadata:
    name: default
    finalizers: [kueue.x-k8s.io/resource-in-use, example.com/keep]
    annotations: {kubectl.kubernetes.io/last-applied-configuration: "{}"}
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: LocalQueue
  metadata: {name: lq, namespace: ns, finalizers: [kueue.x-k8s.io/resource-in-use]}
  spec: {clusterQueue: cq}
metadata: {resourceVersion: ""}
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata:
  finalizers:
  - example.com/keep
  name: default
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata:
  name: lq
  namespace: ns
spec:
  clusterQueue: cq
`,
		},
		{
			name:    "an unsupported item of a List is named by its index",
			in:      "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: kueue.x-k8s.io/v1beta1, kind: MultiKueueCluster, metadata: {name: t}}\n",
			wantErr: "queues.yaml: document 1, items[0] (MultiKueueCluster t): MultiKueueCluster of kueue.x-k8s.io/v1beta1: not supported by Sluice",
		},
		{
			name: "other API groups pass through as written, comments and all",
			in: `# a job
apiVersion: batch/v1
kind: Job
metadata: {name: train, labels: {kueue.x-k8s.io/queue-name: main}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
`,
			want: `# a job
apiVersion: batch/v1
kind: Job
metadata: {name: train, labels: {kueue.x-k8s.io/queue-name: main}}
---
apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata:
  name: high
value: 1000
`,
		},
		{
			name: "an AdmissionCheck converts; Kueue's built-in controllers and parameter group become Sluice's",
			in: `apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: prov, uid: x}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: prov-config}
status: {conditions: [{type: Active, status: "True"}]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: custom}
spec: {controllerName: example.com/budget}
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: AdmissionCheck
metadata:
  name: prov
spec:
  controllerName: sluice.dev/provisioning-request
  parameters:
    apiGroup: sluice.dev
    kind: ProvisioningRequestConfig
    name: prov-config
---
apiVersion: sluice.dev/v1beta1
kind: AdmissionCheck
metadata:
  name: custom
spec:
  controllerName: example.com/budget
`,
		},
		{
			name: "a MultiKueue check and its MultiKueueConfig become a multicluster check and MultiClusterConfig",
			in: `apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: sample-multikueue}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: multikueue-test}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {name: multikueue-test}
spec:
  clusters: [multikueue-test-worker1, worker2]
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: AdmissionCheck
metadata:
  name: sample-multikueue
spec:
  controllerName: sluice.dev/multicluster
  parameters:
    apiGroup: sluice.dev
    kind: MultiClusterConfig
    name: multikueue-test
---
apiVersion: sluice.dev/v1beta1
kind: MultiClusterConfig
metadata:
  name: multikueue-test
spec:
  clusters:
  - multikueue-test-worker1
  - worker2
`,
		},
		{
			name: "a ProvisioningRequestConfig converts as it is",
			in: `apiVersion: kueue.x-k8s.io/v1beta2
kind: ProvisioningRequestConfig
metadata: {name: prov-config}
spec:
  provisioningClassName: check-capacity.autoscaling.x-k8s.io
  managedResources: [nvidia.com/gpu]
  retryStrategy: {backoffLimitCount: 2, backoffBaseSeconds: 60, backoffMaxSeconds: 1800}
  podSetMergePolicy: IdenticalWorkloadSchedulingRequirements
  podSetUpdates:
    nodeSelector: [{key: cloud.example/pool, valueFromProvisioningClassDetail: RequestKey}]
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: ProvisioningRequestConfig
metadata:
  name: prov-config
spec:
  managedResources:
  - nvidia.com/gpu
  podSetMergePolicy: IdenticalWorkloadSchedulingRequirements
  podSetUpdates:
    nodeSelector:
    - key: cloud.example/pool
      valueFromProvisioningClassDetail: RequestKey
  provisioningClassName: check-capacity.autoscaling.x-k8s.io
  retryStrategy:
    backoffBaseSeconds: 60
    backoffLimitCount: 2
    backoffMaxSeconds: 1800
`,
		},
		{
			name:    "MultiKueue's cluster kind is refused",
			in:      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: MultiKueueCluster\nmetadata: {name: worker}\n",
			wantErr: "queues.yaml: document 1 (MultiKueueCluster worker): MultiKueueCluster of kueue.x-k8s.io/v1beta1: not supported by Sluice",
		},
		{
			name: "a Topology (v1alpha1 or v1beta1) and a flavor's topologyName are kept",
			in:   "apiVersion: kueue.x-k8s.io/v1alpha1\nkind: Topology\nmetadata: {name: default}\nspec:\n  levels:\n  - nodeLabel: cloud.provider.com/topology-block\n  - nodeLabel: kubernetes.io/hostname\n---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: tas}\nspec: {nodeLabels: {pool: a}, topologyName: default}\n",
			want: `apiVersion: sluice.dev/v1beta1
kind: Topology
metadata:
  name: default
spec:
  levels:
  - nodeLabel: cloud.provider.com/topology-block
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata:
  name: tas
spec:
  nodeLabels:
    pool: a
  topologyName: default
`,
		},
		{
			name: "admission checks on a ClusterQueue are kept",
			in: `apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  admissionChecksStrategy: {admissionChecks: [{name: prov, onFlavors: [a]}]}
`,
			want: "apiVersion: sluice.dev/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: cq\nspec:\n  admissionChecksStrategy:\n    admissionChecks:\n    - name: prov\n      onFlavors:\n      - a\n",
		},
		{
			name: "Kueue's manager Configuration keeps fair sharing and waitForPodsReady, and drops its process settings",
			in: `apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
namespace: kueue-system
metrics: {bindAddress: ":8080"}
manageJobsWithoutQueueName: false
fairSharing: {enable: true, preemptionStrategies: [LessThanInitialShare]}
waitForPodsReady: {enable: true, timeout: 10m, requeuingStrategy: {backoffLimitCount: 5}}
`,
			want: "apiVersion: sluice.dev/v1beta1\nfairSharing:\n  enable: true\n  preemptionStrategies:\n  - LessThanInitialShare\nkind: Configuration\n" +
				"waitForPodsReady:\n  enable: true\n  requeuingStrategy:\n    backoffLimitCount: 5\n  timeout: 10m\n",
			wantWarnings: []string{"dropped queues.yaml: document 1 (Configuration): metrics, namespace: settings of Kueue's own process (Sluice's services take flags)"},
		},
		{
			name: "Kueue v1beta2 has no enable: its blocks turn the features on, and the converted blocks say so",
			in: `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
fairSharing: {preemptionStrategies: [LessThanInitialShare]}
waitForPodsReady: {timeout: 10m}
`,
			want: "apiVersion: sluice.dev/v1beta1\nfairSharing:\n  enable: true\n  preemptionStrategies:\n  - LessThanInitialShare\nkind: Configuration\n" +
				"waitForPodsReady:\n  enable: true\n  timeout: 10m\n",
		},
		{
			name: "in Kueue v1beta1 a block without enable is off, and stays off",
			in: `apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing: {preemptionStrategies: [LessThanInitialShare]}
waitForPodsReady: {timeout: 10m}
`,
			want: "apiVersion: sluice.dev/v1beta1\nfairSharing:\n  enable: false\n  preemptionStrategies:\n  - LessThanInitialShare\nkind: Configuration\n" +
				"waitForPodsReady:\n  enable: false\n  timeout: 10m\n",
		},
		{
			name:    "a Configuration setting of decisions Sluice lacks is refused by name",
			in:      "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nmultiKueue: {gcInterval: 1m}\n",
			wantErr: "queues.yaml: document 1 (Configuration): multiKueue: not supported by Sluice",
		},
		{
			name: "jobs without a queue name held in the namespaces a selector picks are kept",
			in: `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
manageJobsWithoutQueueName: true
managedJobsNamespaceSelector:
  matchLabels: {kueue.x-k8s.io/managed-namespace: "true"}
`,
			want: "apiVersion: sluice.dev/v1beta1\nkind: Configuration\nmanageJobsWithoutQueueName: true\nmanagedJobsNamespaceSelector:\n  matchLabels:\n    kueue.x-k8s.io/managed-namespace: \"true\"\n",
		},
		{
			name:    "and so is an unknown field inside a kept block",
			in:      "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nwaitForPodsReady: {timeout: 5m, podsReadyGate: x}\n",
			wantErr: "queues.yaml: document 1 (Configuration): waitForPodsReady.podsReadyGate: not supported by Sluice",
		},
		{
			name: "Kueue's resources block is kept: excluded prefixes and transformations",
			in: "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n  excludeResourcePrefixes: [example.com/]\n" +
				"  transformations:\n  - {input: nvidia.com/mig-1g.5gb, strategy: Replace, outputs: {example.com/accelerator-memory: 5Gi}}\n",
			want: "apiVersion: sluice.dev/v1beta1\nkind: Configuration\nresources:\n  excludeResourcePrefixes:\n  - example.com/\n" +
				"  transformations:\n  - input: nvidia.com/mig-1g.5gb\n    outputs:\n      example.com/accelerator-memory: 5Gi\n    strategy: Replace\n",
		},
		{
			name:    "a resources setting Sluice lacks is refused by its path",
			in:      "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n  deviceClassMappings: [{name: gpus, deviceClassNames: [gpu.example.com], sources: [{counter: {name: memory}}]}]\n",
			wantErr: "queues.yaml: document 1 (Configuration): resources.deviceClassMappings[0].sources: not supported by Sluice",
		},
		{
			name: "deviceClassMappings are kept",
			in:   "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n  deviceClassMappings:\n  - name: example.com/gpu\n    deviceClassNames: [gpu.example.com]\n",
			want: "apiVersion: sluice.dev/v1beta1\nkind: Configuration\nresources:\n  deviceClassMappings:\n  - deviceClassNames:\n    - gpu.example.com\n    name: example.com/gpu\n",
		},
		{
			name: "a LocalQueue's Admission Fair Sharing weight is kept",
			in:   "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: q, namespace: ns}\nspec: {clusterQueue: cq, fairSharing: {weight: 2}}\n",
			want: "apiVersion: sluice.dev/v1beta1\nkind: LocalQueue\nmetadata:\n  name: q\n  namespace: ns\nspec:\n  clusterQueue: cq\n  fairSharing:\n    weight: 2\n",
		},
		{
			name: "a weight written as a string, as Kueue's examples do",
			in:   "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lq-b, namespace: default}\nspec:\n  clusterQueue: shared\n  fairSharing:\n    weight: \"1\"\n",
			want: "apiVersion: sluice.dev/v1beta1\nkind: LocalQueue\nmetadata:\n  name: lq-b\n  namespace: default\nspec:\n  clusterQueue: shared\n  fairSharing:\n    weight: \"1\"\n",
		},
		{
			name: "a ClusterQueue's admissionScope is kept",
			in:   "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec: {admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}}\n",
			want: "apiVersion: sluice.dev/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: cq\nspec:\n  admissionScope:\n    admissionMode: UsageBasedAdmissionFairSharing\n",
		},
		{
			name: "the admissionFairSharing block is kept",
			in:   "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nadmissionFairSharing:\n  usageHalfLifeTime: 168h\n  usageSamplingInterval: 5m\n  resourceWeights: {cpu: 2.0, memory: 1.0}\n",
			want: "admissionFairSharing:\n  resourceWeights:\n    cpu: 2\n    memory: 1\n  usageHalfLifeTime: 168h\n  usageSamplingInterval: 5m\napiVersion: sluice.dev/v1beta1\nkind: Configuration\n",
		},
		{
			name:    "any other field Sluice lacks is refused by its path",
			in:      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n  flavorFungibility: {whenCanBorrow: TryNextFlavor, futurePolicy: Sometimes}\n",
			wantErr: "queues.yaml: document 1 (ClusterQueue cq): spec.flavorFungibility.futurePolicy: not supported by Sluice",
		},
		{
			name:         "and dropped when asked",
			in:           "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n  flavorFungibility: {whenCanBorrow: TryNextFlavor, futurePolicy: Sometimes}\n",
			drop:         true,
			want:         "apiVersion: sluice.dev/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: cq\nspec:\n  flavorFungibility:\n    whenCanBorrow: TryNextFlavor\n",
			wantWarnings: []string{"dropped queues.yaml: document 1 (ClusterQueue cq): spec.flavorFungibility.futurePolicy: not supported by Sluice"},
		},
		{
			name: "unknown keys holding '.' and '\"' are dropped too (they once made the converter spin)",
			in: "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n  cohort: a\n  example.com/x: 1\n" +
				"  'say\"hi': 2\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n    - {name: f, a.b: 3, resources: [{name: cpu, nominalQuota: 1}]}\n",
			drop: true,
			want: "apiVersion: sluice.dev/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: cq\nspec:\n  cohort: a\n  resourceGroups:\n  - coveredResources:\n    - cpu\n" +
				"    flavors:\n    - name: f\n      resources:\n      - name: cpu\n        nominalQuota: 1\n",
			wantWarnings: []string{"dropped queues.yaml: document 1 (ClusterQueue cq): spec.example.com/x, spec.resourceGroups[0].flavors[0].a.b, spec.say\"hi: not supported by Sluice"},
		},
		{
			name:    "cohort and cohortName that disagree",
			in:      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec: {cohort: a, cohortName: b}\n",
			wantErr: "queues.yaml: document 1 (ClusterQueue cq): spec.cohortName and spec.cohort name the same field with different values",
		},
		{
			name:    "not YAML",
			in:      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: [\n",
			wantErr: "queues.yaml: document 1: not valid YAML",
		},
		{
			name:    "a document that is not a mapping",
			in:      "- a\n- b\n",
			wantErr: "queues.yaml: document 1: a document must be a mapping with apiVersion and kind",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Convert("queues.yaml", []byte(tc.in), Options{DropUnsupported: tc.drop})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "not supported") && !errors.Is(err, ErrUnsupported) {
					t.Errorf("error %v is not ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, string(res.Output)); d != "" {
				t.Errorf("output (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantWarnings, res.Warnings); d != "" {
				t.Errorf("warnings (-want +got):\n%s", d)
			}
		})
	}
}
