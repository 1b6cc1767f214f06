package simulate

import (
	"errors"
	"strings"
	"testing"
)

// TestDeviceClaimsThatCannotBeCounted: a workload whose claims cannot be
// counted against quota refuses the scenario, naming its document, pod
// set, claim and why; without deviceClassMappings claims count nothing.
func TestDeviceClaimsThatCannotBeCounted(t *testing.T) {
	mappings := docHead + "kind: Configuration\nresources:\n  deviceClassMappings: [{name: example.com/gpu, deviceClassNames: [gpu-a100]}]\n"
	template := func(name, class string) string {
		return "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: " + name + ", namespace: ns}\nspec:\n  spec:\n    devices:\n      requests:\n      - {name: r, exactly: {deviceClassName: " + class + "}}\n"
	}
	claiming := func(tmpl string) string {
		return workload("ns", "w", "  queueName: q\n  runtime: 1m\n  podSets:\n  - name: main\n    count: 1\n    requests: {cpu: 1}\n    resourceClaims: [{name: c, resourceClaimTemplateName: "+tmpl+"}]\n")
	}
	base := []string{flavor("f"), clusterQueue("cq", cpuQueue("f", "4", "")), localQueue("ns", "q", "  clusterQueue: cq\n")}
	cases := []struct {
		name    string
		docs    []string
		wantErr string
	}{
		{name: "an unmapped DeviceClass", docs: []string{mappings, template("fpga", "fpga.example.com"), claiming("fpga")},
			wantErr: `spec.podSets[0] (main): resourceClaims[0] (c): devices.requests[0] (r): DeviceClass "fpga.example.com": DeviceClass is not mapped in resources.deviceClassMappings`},
		{name: "a template the scenario lacks", docs: []string{mappings, claiming("missing")},
			wantErr: "resourceClaims[0] (c): ResourceClaimTemplate ns/missing is not in the scenario"},
		{name: "no mappings: claims count nothing", docs: []string{template("fpga", "fpga.example.com"), claiming("fpga")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			yaml := scenario(append(append([]string(nil), base...), tc.docs...)...)
			_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(yaml)}})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if s := workloadResult(t, summaryOf(t, run(t, yaml, Options{})), "ns/w"); s.State != "finished" {
					t.Errorf("ns/w ends %s, want finished", s.State)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "test.yaml: document") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Load: %v, want an invalid scenario naming the document and %q", err, tc.wantErr)
			}
		})
	}
}
