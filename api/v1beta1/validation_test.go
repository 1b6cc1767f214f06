package v1beta1_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// validationCase is one object sent to the API server: created, or, when old
// is set, updated from old.
type validationCase struct {
	name     string
	old      string
	obj      string
	wantErrs []fieldError // nil: the object is accepted
}

func runValidationCases(t *testing.T, kind string, cases []validationCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			server := apiServerFor(t, kind)
			var errs []fieldError
			if tc.old == "" {
				_, got := server.create(t, tc.obj)
				errs = fieldErrors(got)
			} else {
				errs = fieldErrors(server.update(t, tc.old, tc.obj))
			}
			if diff := cmp.Diff(tc.wantErrs, errs); diff != "" {
				t.Errorf("validation errors (-want +got):\n%s", diff)
			}
		})
	}
}

// Messages the API server itself produces, repeated in many cases. The API
// server skips the CEL rules when the schema already refused the object with
// a type, required, enum or size error, and says so with notChecked.
const (
	notChecked = `Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation`
	notDNSName = `should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'`
)

func TestClusterQueueValidation(t *testing.T) {
	const quota = "spec.resourceGroups[0].flavors[0].resources[0]"
	runValidationCases(t, "ClusterQueue", []validationCase{
		{
			name: "empty spec",
			obj:  clusterQueue(`{}`),
		},
		{
			name: "quotas as integers, numeric strings and suffixed quantities",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu, memory, pods, nvidia.com/gpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
				    - {name: memory, nominalQuota: 36Gi}
				    - {name: pods, nominalQuota: "50"}
				    - {name: nvidia.com/gpu, nominalQuota: 500m}
			`),
		},
		{
			name: "zero quotas",
			obj: clusterQueue(`
				cohort: research
				resourceGroups:
				- coveredResources: [cpu, memory]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 0, borrowingLimit: "0", lendingLimit: 0}
				    - {name: memory, nominalQuota: "0"}
			`),
		},
		{
			name: "flavors list the covered resources in any order",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu, memory]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
				    - {name: memory, nominalQuota: 36Gi}
				  - name: spot
				    resources:
				    - {name: memory, nominalQuota: 72Gi}
				    - {name: cpu, nominalQuota: 18}
				- coveredResources: [nvidia.com/gpu]
				  flavors:
				  - name: a100
				    resources:
				    - {name: nvidia.com/gpu, nominalQuota: 8}
			`),
		},
		{
			name: "borrowing and lending limits in a cohort",
			obj: clusterQueue(`
				cohort: research
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9, borrowingLimit: 3, lendingLimit: 4500m}
			`),
		},
		{
			name: "every policy set",
			obj: clusterQueue(`
				cohort: research
				queueingStrategy: StrictFIFO
				stopPolicy: HoldAndDrain
				namespaceSelector:
				  matchLabels: {team: a}
				flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: Preempt}
				preemption:
				  withinClusterQueue: LowerOrNewerEqualPriority
				  reclaimWithinCohort: Any
				  borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
				fairSharing: {weight: "1.5"}
			`),
		},
		{
			name: "fair sharing weight zero",
			obj:  clusterQueue(`fairSharing: {weight: 0}`),
		},
		{
			name: "negative integer nominalQuota",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: -1}
			`),
			wantErrs: []fieldError{
				{quota + ".nominalQuota", `Invalid value: "object": nominalQuota must not be negative`},
			},
		},
		{
			name: "negative string nominalQuota",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: "-1"}
			`),
			wantErrs: []fieldError{
				{quota + ".nominalQuota", `Invalid value: "object": nominalQuota must not be negative`},
			},
		},
		{
			name: "negative suffixed nominalQuota",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [memory]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: memory, nominalQuota: -1Gi}
			`),
			wantErrs: []fieldError{
				{quota + ".nominalQuota", `Invalid value: "object": nominalQuota must not be negative`},
			},
		},
		{
			name: "negative borrowingLimit and lendingLimit",
			obj: clusterQueue(`
				cohort: research
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9, borrowingLimit: -1, lendingLimit: "-500m"}
			`),
			wantErrs: []fieldError{
				{quota + ".borrowingLimit", `Invalid value: "object": borrowingLimit must not be negative`},
				{quota + ".lendingLimit", `Invalid value: "object": lendingLimit must not be negative`},
			},
		},
		{
			name: "lendingLimit up to nominalQuota, in any notation",
			obj: clusterQueue(`
				cohort: research
				resourceGroups:
				- coveredResources: [cpu, memory]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: "2", lendingLimit: 2000m}
				    - {name: memory, nominalQuota: 1Gi, lendingLimit: 1024Mi}
			`),
		},
		{
			name: "lendingLimit above nominalQuota (Kueue refuses it too)",
			obj: clusterQueue(`
				cohort: research
				resourceGroups:
				- coveredResources: [cpu, memory]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 2, lendingLimit: 3}
				    - {name: memory, nominalQuota: 1Gi, lendingLimit: 1025Mi}
			`),
			wantErrs: []fieldError{
				{quota + ".lendingLimit", `Invalid value: "object": lendingLimit must not be more than nominalQuota`},
				{"spec.resourceGroups[0].flavors[0].resources[1].lendingLimit", `Invalid value: "object": lendingLimit must not be more than nominalQuota`},
			},
		},
		{
			name: "Admission Fair Sharing by usage",
			obj:  clusterQueue(`admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}`),
		},
		{
			name: "an admission mode Kueue does not have",
			obj:  clusterQueue(`admissionScope: {admissionMode: ByUsage}`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec.admissionScope.admissionMode", `Unsupported value: "ByUsage": supported values: "UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"`},
			},
		},
		{
			name: "Kueue's MayStopSearch in both fungibility fields",
			obj:  clusterQueue(`flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: MayStopSearch}`),
		},
		{
			name: "flavorFungibility preference with both policies TryNextFlavor",
			obj:  clusterQueue(`flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor, preference: PreemptionOverBorrowing}`),
		},
		{
			name: "flavorFungibility preference while the search may stop (Kueue refuses it too)",
			obj:  clusterQueue(`flavorFungibility: {whenCanPreempt: TryNextFlavor, preference: BorrowingOverPreemption}`),
			wantErrs: []fieldError{
				{"spec.flavorFungibility", `Invalid value: "object": preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor`},
			},
		},
		{
			name: "borrowWithinCohort with reclaiming on",
			obj:  clusterQueue(`preemption: {reclaimWithinCohort: Any, borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}}`),
		},
		{
			name: "borrowWithinCohort without reclaiming (Kueue refuses it too)",
			obj:  clusterQueue(`preemption: {borrowWithinCohort: {policy: LowerPriority}}`),
			wantErrs: []fieldError{
				{"spec.preemption.borrowWithinCohort", `Invalid value: "object": borrowWithinCohort needs reclaimWithinCohort other than Never`},
			},
		},
		{
			name: "malformed quantity gets one error, from the pattern",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: lots}
			`),
			wantErrs: []fieldError{
				{quota + ".nominalQuota", `Invalid value: "lots": ` + quota + `.nominalQuota in body should match '^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$'`},
			},
		},
		{
			name: "fractional number is not a quantity",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 1.5}
			`),
			wantErrs: []fieldError{
				{"<nil>", `Invalid value: "": "` + quota + `.nominalQuota" must validate at least one schema (anyOf)`},
				{"<nil>", notChecked},
				{quota + ".nominalQuota", `Invalid value: "number": ` + quota + `.nominalQuota in body must be of type integer,string: "number"`},
				{quota + ".nominalQuota", `Invalid value: "number": ` + quota + `.nominalQuota in body must be of type integer: "number"`},
			},
		},
		{
			name: "quantity longer than 64 characters",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: "` + strings.Repeat("9", 65) + `"}
			`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{quota + ".nominalQuota", "Too long: may not be more than 64 bytes"},
			},
		},
		{
			name: "missing nominalQuota",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu}
			`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{quota + ".nominalQuota", "Required value"},
			},
		},
		{
			name: "borrowingLimit without a cohort",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9, borrowingLimit: 1}
			`),
			wantErrs: []fieldError{
				{"spec", `Invalid value: "object": borrowingLimit and lendingLimit need a cohort`},
			},
		},
		{
			name: "lendingLimit without a cohort",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
				- coveredResources: [memory]
				  flavors:
				  - name: on-demand-memory
				    resources:
				    - {name: memory, nominalQuota: 36Gi, lendingLimit: 10Gi}
			`),
			wantErrs: []fieldError{
				{"spec", `Invalid value: "object": borrowingLimit and lendingLimit need a cohort`},
			},
		},
		{
			name: "flavor misses a covered resource",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu, memory]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
				    - {name: memory, nominalQuota: 36Gi}
				  - name: spot
				    resources:
				    - {name: cpu, nominalQuota: 18}
			`),
			wantErrs: []fieldError{
				{"spec.resourceGroups[0].flavors", `Invalid value: "object": every flavor must list a quota for exactly the coveredResources of its group: cpu, memory`},
			},
		},
		{
			name: "flavor lists a resource its group does not cover",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu, memory]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
				    - {name: nvidia.com/gpu, nominalQuota: 8}
			`),
			wantErrs: []fieldError{
				{"spec.resourceGroups[0].flavors", `Invalid value: "object": every flavor must list a quota for exactly the coveredResources of its group: cpu, memory`},
			},
		},
		{
			name: "flavor lists an extra resource",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
				    - {name: memory, nominalQuota: 36Gi}
			`),
			wantErrs: []fieldError{
				{"spec.resourceGroups[0].flavors", `Invalid value: "object": every flavor must list a quota for exactly the coveredResources of its group: cpu`},
			},
		},
		{
			name: "resource listed twice in a flavor",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
				    - {name: cpu, nominalQuota: 10}
			`),
			wantErrs: []fieldError{
				{"spec.resourceGroups[0].flavors", `Invalid value: "object": every flavor must list a quota for exactly the coveredResources of its group: cpu`},
				{"spec.resourceGroups[0].flavors[0].resources[1]", `Duplicate value: {"name":"cpu"}`},
			},
		},
		{
			name: "resource covered twice in a group",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu, cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
			`),
			wantErrs: []fieldError{
				{"spec.resourceGroups[0].coveredResources[1]", `Duplicate value: "cpu"`},
				{"spec.resourceGroups[0].flavors", `Invalid value: "object": every flavor must list a quota for exactly the coveredResources of its group: cpu, cpu`},
			},
		},
		{
			name: "flavor name is not a DNS subdomain",
			obj: clusterQueue(`
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: On_Demand
				    resources:
				    - {name: cpu, nominalQuota: 9}
			`),
			wantErrs: []fieldError{
				{"spec.resourceGroups[0].flavors[0].name", `Invalid value: "On_Demand": spec.resourceGroups[0].flavors[0].name in body ` + notDNSName},
			},
		},
		{
			name: "empty cohort",
			obj:  clusterQueue(`cohort: ""`),
			wantErrs: []fieldError{
				{"spec.cohort", `Invalid value: "": spec.cohort in body should be at least 1 chars long`},
			},
		},
		{
			name: "unknown queueingStrategy",
			obj:  clusterQueue(`queueingStrategy: LIFO`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec.queueingStrategy", `Unsupported value: "LIFO": supported values: "StrictFIFO", "BestEffortFIFO"`},
			},
		},
		{
			name: "unknown stopPolicy",
			obj:  clusterQueue(`stopPolicy: Pause`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec.stopPolicy", `Unsupported value: "Pause": supported values: "None", "Hold", "HoldAndDrain"`},
			},
		},
		{
			name: "withinClusterQueue cannot preempt Any",
			obj:  clusterQueue(`preemption: {withinClusterQueue: Any}`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec.preemption.withinClusterQueue", `Unsupported value: "Any": supported values: "Never", "LowerPriority", "LowerOrNewerEqualPriority"`},
			},
		},
		{
			name: "whenCanBorrow cannot be Preempt",
			obj:  clusterQueue(`flavorFungibility: {whenCanBorrow: Preempt}`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec.flavorFungibility.whenCanBorrow", `Unsupported value: "Preempt": supported values: "Borrow", "MayStopSearch", "TryNextFlavor"`},
			},
		},
		{
			name: "negative fair sharing weight",
			obj:  clusterQueue(`fairSharing: {weight: "-0.5"}`),
			wantErrs: []fieldError{
				{"spec.fairSharing.weight", `Invalid value: "object": weight must not be negative`},
			},
		},
		{
			name: "admission checks, for all flavors or some",
			obj:  clusterQueue(`admissionChecksStrategy: {admissionChecks: [{name: prov, onFlavors: [a100]}, {name: budget}]}`),
		},
		{
			name: "admissionChecks and admissionChecksStrategy together",
			obj:  clusterQueue("admissionChecks: [prov]\nadmissionChecksStrategy: {admissionChecks: [{name: prov}]}"),
			wantErrs: []fieldError{
				{"spec", `Invalid value: "object": either admissionChecks or admissionChecksStrategy can be set, not both`},
			},
		},
	})
}

func TestAdmissionCheckValidation(t *testing.T) {
	runValidationCases(t, "AdmissionCheck", []validationCase{
		{
			name: "a controller and its parameters",
			obj:  admissionCheck(`{controllerName: sluice.dev/provisioning-request, parameters: {apiGroup: sluice.dev, kind: ProvisioningRequestConfig, name: prov}}`),
		},
		{
			name:     "no controller",
			obj:      admissionCheck(`{parameters: {apiGroup: sluice.dev, kind: ProvisioningRequestConfig, name: prov}}`),
			wantErrs: []fieldError{{"<nil>", notChecked}, {"spec.controllerName", "Required value"}},
		},
		{
			name:     "the controller cannot change",
			old:      admissionCheck(`{controllerName: example.com/a}`),
			obj:      admissionCheck(`{controllerName: example.com/b}`),
			wantErrs: []fieldError{{"spec.controllerName", `Invalid value: "string": controllerName is immutable`}},
		},
	})
}

func TestProvisioningRequestConfigValidation(t *testing.T) {
	runValidationCases(t, "ProvisioningRequestConfig", []validationCase{
		{
			name: "Kueue's example, every field",
			obj: provisioningRequestConfig(`{provisioningClassName: check-capacity.autoscaling.x-k8s.io, managedResources: [nvidia.com/gpu],
				parameters: {ValidUntilSeconds: "600"}, podSetMergePolicy: IdenticalWorkloadSchedulingRequirements,
				retryStrategy: {backoffLimitCount: 2, backoffBaseSeconds: 60, backoffMaxSeconds: 1800},
				podSetUpdates: {nodeSelector: [{key: cloud.example.com/request, valueFromProvisioningClassDetail: RequestKey}]}}`),
		},
		{
			name:     "no class",
			obj:      provisioningRequestConfig(`{managedResources: [nvidia.com/gpu]}`),
			wantErrs: []fieldError{{"spec.provisioningClassName", "Required value"}},
		},
		{
			name:     "a merge policy Kueue does not have",
			obj:      provisioningRequestConfig(`{provisioningClassName: c, podSetMergePolicy: Always}`),
			wantErrs: []fieldError{{"spec.podSetMergePolicy", `Unsupported value: "Always": supported values: "IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"`}},
		},
		{
			name:     "a negative retry count",
			obj:      provisioningRequestConfig(`{provisioningClassName: c, retryStrategy: {backoffLimitCount: -1}}`),
			wantErrs: []fieldError{{"spec.retryStrategy.backoffLimitCount", "Invalid value: -1: spec.retryStrategy.backoffLimitCount in body should be greater than or equal to 0"}},
		},
	})
}

func TestMultiClusterConfigValidation(t *testing.T) {
	runValidationCases(t, "MultiClusterConfig", []validationCase{
		{
			name: "every field",
			obj: multiClusterConfig(`{clusters: [worker-1, worker2], workerLostTimeout: 5m,
				dispatching: {mode: Incremental, stepSize: 1, roundTimeout: 2m}}`),
		},
		{
			name:     "no cluster",
			obj:      multiClusterConfig(`{clusters: []}`),
			wantErrs: []fieldError{{"spec.clusters", "Invalid value: 0: spec.clusters in body should have at least 1 items"}},
		},
		{
			name:     "a cluster name a leaf node user cannot have",
			obj:      multiClusterConfig(`{clusters: [Worker_1]}`),
			wantErrs: []fieldError{{"spec.clusters[0]", `Invalid value: "Worker_1": spec.clusters[0] in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`}},
		},
		{
			name:     "a mode Kueue does not have",
			obj:      multiClusterConfig(`{clusters: [w], dispatching: {mode: Random}}`),
			wantErrs: []fieldError{{"spec.dispatching.mode", `Unsupported value: "Random": supported values: "AllAtOnce", "Incremental"`}},
		},
		{
			name:     "a worker listed twice",
			obj:      multiClusterConfig(`{clusters: [w, w]}`),
			wantErrs: []fieldError{{"spec.clusters[1]", `Duplicate value: "w"`}},
		},
	})
}

func TestCohortValidation(t *testing.T) {
	runValidationCases(t, "Cohort", []validationCase{
		{
			name: "root cohort without spec",
			obj:  cohort("research", ``),
		},
		{
			name: "cohort with a parent, limits and a weight",
			obj: cohort("research", `
				parent: company
				fairSharing: {weight: 2}
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 100, borrowingLimit: 10, lendingLimit: 50}
			`),
		},
		{
			name: "Kueue's parentName",
			obj:  cohort("research", `parentName: company`),
		},
		{
			name: "parent and parentName alike",
			obj:  cohort("research", `{parent: company, parentName: company}`),
		},
		{
			name: "parent and parentName differ",
			obj:  cohort("research", `{parent: company, parentName: other}`),
			wantErrs: []fieldError{
				{"spec.parentName", `Invalid value: "object": parent and parentName name the same field: give one, or the same value`},
			},
		},
		{
			name: "cohort is its own parentName",
			obj:  cohort("research", `parentName: research`),
			wantErrs: []fieldError{
				{"spec.parentName", `Invalid value: "object": a Cohort cannot be its own parent`},
			},
		},
		{
			name: "limits under a parentName",
			obj: cohort("research", `
				parentName: company
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 100, borrowingLimit: 10, lendingLimit: 50}
			`),
		},
		{
			name: "cohort is its own parent",
			obj:  cohort("research", `parent: research`),
			wantErrs: []fieldError{
				{"spec.parent", `Invalid value: "object": a Cohort cannot be its own parent`},
			},
		},
		{
			name: "limits without a parent",
			obj: cohort("company", `
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: 100, lendingLimit: 50}
			`),
			wantErrs: []fieldError{
				{"spec", `Invalid value: "object": borrowingLimit and lendingLimit need a parent`},
			},
		},
		{
			name: "empty parent",
			obj:  cohort("research", `parent: ""`),
			wantErrs: []fieldError{
				{"spec.parent", `Invalid value: "": spec.parent in body should be at least 1 chars long`},
			},
		},
		{
			name: "negative quota in a cohort",
			obj: cohort("research", `
				resourceGroups:
				- coveredResources: [cpu]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: cpu, nominalQuota: -100}
			`),
			wantErrs: []fieldError{
				{"spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", `Invalid value: "object": nominalQuota must not be negative`},
			},
		},
		{
			name: "flavor misses a covered resource in a cohort",
			obj: cohort("research", `
				resourceGroups:
				- coveredResources: [cpu, memory]
				  flavors:
				  - name: on-demand
				    resources:
				    - {name: memory, nominalQuota: 1Ti}
			`),
			wantErrs: []fieldError{
				{"spec.resourceGroups[0].flavors", `Invalid value: "object": every flavor must list a quota for exactly the coveredResources of its group: cpu, memory`},
			},
		},
	})
}

func TestLocalQueueValidation(t *testing.T) {
	runValidationCases(t, "LocalQueue", []validationCase{
		{
			name: "points at a ClusterQueue",
			obj:  localQueue(`clusterQueue: team-a`),
		},
		{
			name: "held",
			obj:  localQueue(`{clusterQueue: team-a, stopPolicy: Hold}`),
		},
		{
			name: "an Admission Fair Sharing weight",
			obj:  localQueue(`{clusterQueue: team-a, fairSharing: {weight: 2}}`),
		},
		{
			name: "a negative Admission Fair Sharing weight",
			obj:  localQueue(`{clusterQueue: team-a, fairSharing: {weight: "-1"}}`),
			wantErrs: []fieldError{
				{"spec.fairSharing.weight", `Invalid value: "object": weight must not be negative`},
			},
		},
		{
			name: "missing spec",
			obj:  localQueue(``),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec", "Required value"},
			},
		},
		{
			name: "missing clusterQueue",
			obj:  localQueue(`{stopPolicy: Hold}`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec.clusterQueue", "Required value"},
			},
		},
		{
			name: "clusterQueue is not a DNS subdomain",
			obj:  localQueue(`clusterQueue: Team_A`),
			wantErrs: []fieldError{
				{"spec.clusterQueue", `Invalid value: "Team_A": spec.clusterQueue in body ` + notDNSName},
			},
		},
		{
			name: "update keeps clusterQueue and changes stopPolicy",
			old:  localQueue(`clusterQueue: team-a`),
			obj:  localQueue(`{clusterQueue: team-a, stopPolicy: HoldAndDrain}`),
		},
		{
			name: "update changes clusterQueue",
			old:  localQueue(`clusterQueue: team-a`),
			obj:  localQueue(`clusterQueue: team-b`),
			wantErrs: []fieldError{
				{"spec.clusterQueue", `Invalid value: "string": clusterQueue is immutable`},
			},
		},
	})
}

func TestResourceFlavorValidation(t *testing.T) {
	runValidationCases(t, "ResourceFlavor", []validationCase{
		{
			name: "labels, taints and tolerations",
			obj: resourceFlavor(`
				nodeLabels: {cloud.example.com/gpu: a100, spot: "true"}
				nodeTaints:
				- {key: spot, value: "true", effect: NoSchedule}
				tolerations:
				- {key: spot, operator: Equal, value: "true", effect: NoSchedule}
			`),
		},
		{
			name: "taint without key",
			obj:  resourceFlavor(`nodeTaints: [{effect: NoSchedule}]`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec.nodeTaints[0].key", "Required value"},
			},
		},
		{
			name: "too many node labels",
			obj:  resourceFlavor(`nodeLabels: {a: "1", b: "2", c: "3", d: "4", e: "5", f: "6", g: "7", h: "8", i: "9"}`),
			wantErrs: []fieldError{
				{"<nil>", notChecked},
				{"spec.nodeLabels", "Too many: 9: must have at most 8 items"},
			},
		},
		{
			name: "topology-aware",
			obj:  resourceFlavor(`{nodeLabels: {pool: gpu}, topologyName: datacenter}`),
		},
		{
			name: "topology-aware without nodeLabels",
			obj:  resourceFlavor(`topologyName: datacenter`),
			wantErrs: []fieldError{
				{"spec", "Invalid value: \"object\": a flavor with topologyName needs nodeLabels to say which nodes are its own"},
			},
		},
	})
}

func TestTopologyValidation(t *testing.T) {
	runValidationCases(t, "Topology", []validationCase{
		{
			name: "block, rack and hostname",
			obj:  topology(`{levels: [{nodeLabel: cloud.provider.com/topology-block}, {nodeLabel: cloud.provider.com/topology-rack}, {nodeLabel: kubernetes.io/hostname}]}`),
		},
		{
			name:     "no levels",
			obj:      topology(`{levels: []}`),
			wantErrs: []fieldError{{"spec.levels", "Invalid value: 0: spec.levels in body should have at least 1 items"}},
		},
		{
			name:     "a label twice",
			obj:      topology(`{levels: [{nodeLabel: rack}, {nodeLabel: rack}]}`),
			wantErrs: []fieldError{{"spec.levels", `Invalid value: "array": each level needs its own nodeLabel`}},
		},
		{
			name:     "hostname not last",
			obj:      topology(`{levels: [{nodeLabel: kubernetes.io/hostname}, {nodeLabel: rack}]}`),
			wantErrs: []fieldError{{"spec.levels", `Invalid value: "array": kubernetes.io/hostname can only be the last level`}},
		},
		{
			name: "not a label",
			obj:  topology(`{levels: [{nodeLabel: "rack name"}]}`),
			wantErrs: []fieldError{
				{"spec.levels[0].nodeLabel", `Invalid value: "rack name": spec.levels[0].nodeLabel in body should match '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$'`}},
		},
	})
}

func TestWorkloadPriorityClassValidation(t *testing.T) {
	runValidationCases(t, "WorkloadPriorityClass", []validationCase{
		{
			name: "value and description",
			obj: workloadPriorityClass(`
				value: 1000
				description: production batch
			`),
		},
		{
			name: "negative value",
			obj:  workloadPriorityClass(`value: -10`),
		},
		{
			name: "missing value",
			obj:  workloadPriorityClass(`description: no value`),
			wantErrs: []fieldError{
				{"value", "Required value"},
			},
		},
		{
			name: "value is not a number",
			obj:  workloadPriorityClass(`value: high`),
			wantErrs: []fieldError{
				{"value", `Invalid value: "string": value in body must be of type integer: "string"`},
			},
		},
	})
}

// TestDefaults checks the defaults the API server fills in on create.
func TestDefaults(t *testing.T) {
	cases := []struct {
		name     string
		kind     string
		obj      string
		wantSpec map[string]interface{}
	}{
		{
			name: "empty ClusterQueue",
			kind: "ClusterQueue",
			obj:  clusterQueue(`{}`),
			wantSpec: map[string]interface{}{
				"queueingStrategy": "BestEffortFIFO",
				"stopPolicy":       "None",
			},
		},
		{
			name: "ClusterQueue with empty policies",
			kind: "ClusterQueue",
			obj:  clusterQueue(`{flavorFungibility: {}, preemption: {borrowWithinCohort: {}}}`),
			wantSpec: map[string]interface{}{
				"queueingStrategy":  "BestEffortFIFO",
				"stopPolicy":        "None",
				"flavorFungibility": map[string]interface{}{"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"},
				"preemption": map[string]interface{}{
					"withinClusterQueue":  "Never",
					"reclaimWithinCohort": "Never",
					"borrowWithinCohort":  map[string]interface{}{"policy": "Never"},
				},
			},
		},
		{
			name:     "LocalQueue",
			kind:     "LocalQueue",
			obj:      localQueue(`clusterQueue: team-a`),
			wantSpec: map[string]interface{}{"clusterQueue": "team-a", "stopPolicy": "None"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj, errs := apiServerFor(t, tc.kind).create(t, tc.obj)
			if len(errs) > 0 {
				t.Fatalf("create: %v", errs.ToAggregate())
			}
			if diff := cmp.Diff(tc.wantSpec, obj.Object["spec"]); diff != "" {
				t.Errorf("spec after defaulting (-want +got):\n%s", diff)
			}
		})
	}
}

// Manifests. Bodies are YAML indented with tabs to fit the Go code around
// them; the common tab indentation is removed.

func clusterQueue(spec string) string {
	return object("ClusterQueue", "name: team-a", "spec", spec)
}

func cohort(name, spec string) string {
	return object("Cohort", "name: "+name, "spec", spec)
}

func localQueue(spec string) string {
	return object("LocalQueue", "{name: default, namespace: team-a}", "spec", spec)
}

func resourceFlavor(spec string) string {
	return object("ResourceFlavor", "name: spot-a100", "spec", spec)
}

func topology(spec string) string {
	return object("Topology", "name: datacenter", "spec", spec)
}

func admissionCheck(spec string) string {
	return object("AdmissionCheck", "name: prov", "spec", spec)
}

func provisioningRequestConfig(spec string) string {
	return object("ProvisioningRequestConfig", "name: prov", "spec", spec)
}

func multiClusterConfig(spec string) string {
	return object("MultiClusterConfig", "name: workers", "spec", spec)
}

func workloadPriorityClass(fields string) string {
	return object("WorkloadPriorityClass", "name: production", "", fields)
}

// object writes a manifest of kind; body goes under key, or at the top level
// when key is empty, and is left out when empty.
func object(kind, metadata, key, body string) string {
	var b strings.Builder
	b.WriteString("apiVersion: sluice.dev/v1beta1\nkind: " + kind + "\n")
	b.WriteString("metadata:\n" + indent(metadata, "  "))
	body = dedent(body)
	switch {
	case body == "":
	case key == "":
		b.WriteString(body)
	default:
		b.WriteString(key + ":\n" + indent(body, "  "))
	}
	return b.String()
}

// dedent removes a leading newline, the trailing indentation, and the tabs
// common to every line.
func dedent(s string) string {
	lines := strings.Split(strings.TrimLeft(s, "\n"), "\n")
	if n := len(lines); n > 0 && strings.TrimSpace(lines[n-1]) == "" {
		lines = lines[:n-1]
	}
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		tabs := len(l) - len(strings.TrimLeft(l, "\t"))
		if common < 0 || tabs < common {
			common = tabs
		}
	}
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			lines[i] = l[common:]
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}
