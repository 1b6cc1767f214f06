package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/build"
)

type stage struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		ResourceRef struct {
			APIGroup string `yaml:"apiGroup"`
			Kind     string `yaml:"kind"`
		} `yaml:"resourceRef"`
		Delay *struct {
			DurationFrom struct {
				JQ struct {
					Expression string `yaml:"expression"`
				} `yaml:"jq"`
			} `yaml:"durationFrom"`
		} `yaml:"delay"`
		Next struct {
			Delete  bool `yaml:"delete"`
			Patches []struct {
				Subresource string `yaml:"subresource"`
				Root        string `yaml:"root"`
				Template    string `yaml:"template"`
			} `yaml:"patches"`
		} `yaml:"next"`
	} `yaml:"spec"`
}

func readStages(t *testing.T) map[string]stage {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(kwokStages))
	dec.KnownFields(false)
	out := map[string]stage{}
	for {
		var s stage
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("kwok-stages.yaml: %v", err)
		}
		if s.Kind != "Stage" || s.Spec.ResourceRef.Kind != "Pod" || s.Spec.ResourceRef.APIGroup != "v1" {
			t.Errorf("stage %q: kind %q on %s/%s, want Stage on v1/Pod", s.Metadata.Name, s.Kind, s.Spec.ResourceRef.APIGroup, s.Spec.ResourceRef.Kind)
		}
		out[s.Metadata.Name] = s
	}
	return out
}

// render runs a stage's status template the way kwok does, with stand-ins
// for kwok's template functions, on pod.
func render(t *testing.T, tpl string, pod *corev1.Pod) map[string]any {
	t.Helper()
	funcs := template.FuncMap{
		"Now":        func() string { return "2030-01-02T03:04:05Z" },
		"Quote":      func(v any) string { b, _ := json.Marshal(v); return string(b) },
		"NodeIPWith": func(string) string { return "127.0.0.1" },
		"PodIPWith":  func(string, bool, string, string, string) string { return "10.244.0.7" },
		"list":       func(v ...any) []any { return v },
	}
	tmpl, err := template.New("status").Funcs(funcs).Parse(tpl)
	if err != nil {
		t.Fatalf("template does not parse: %v", err)
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		t.Fatalf("template fails: %v", err)
	}
	var status map[string]any
	if err := yaml.Unmarshal(buf.Bytes(), &status); err != nil {
		t.Fatalf("template output is not YAML: %v\n%s", err, buf.String())
	}
	// The status must also decode as a PodStatus.
	js, _ := json.Marshal(status)
	var ps corev1.PodStatus
	if err := json.Unmarshal(js, &ps); err != nil {
		t.Fatalf("template output is not a PodStatus: %v\n%s", err, buf.String())
	}
	return status
}

func TestStages(t *testing.T) {
	stages := readStages(t)
	for _, name := range []string{"sluice-pod-start", "sluice-pod-finish", "sluice-pod-remove"} {
		if _, ok := stages[name]; !ok {
			t.Fatalf("no stage %s", name)
		}
	}
	if !stages["sluice-pod-remove"].Spec.Next.Delete {
		t.Error("sluice-pod-remove does not delete")
	}
	finish := stages["sluice-pod-finish"]
	if finish.Spec.Delay == nil || finish.Spec.Delay.DurationFrom.JQ.Expression != `.metadata.annotations["`+RunForAnnotation+`"]` {
		t.Errorf("sluice-pod-finish does not take its delay from the %s annotation", RunForAnnotation)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", UID: "u",
			Annotations: map[string]string{RunForAnnotation: "5s"}},
		Spec: corev1.PodSpec{
			NodeName: "a100-spot-0",
			InitContainers: []corev1.Container{
				{Name: "init", Image: "i"},
				{Name: "side", Image: "s", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways)},
			},
			Containers:     []corev1.Container{{Name: "a", Image: "x"}, {Name: "b", Image: "y"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	startTpl := stages["sluice-pod-start"].Spec.Next.Patches[0].Template
	st := render(t, startTpl, pod)
	js, _ := json.Marshal(st)
	var running corev1.PodStatus
	_ = json.Unmarshal(js, &running)
	if running.Phase != corev1.PodRunning || running.PodIP != "10.244.0.7" || running.HostIP != "127.0.0.1" {
		t.Errorf("start: phase %s podIP %s hostIP %s", running.Phase, running.PodIP, running.HostIP)
	}
	if len(running.ContainerStatuses) != 2 || running.ContainerStatuses[1].State.Running == nil || !running.ContainerStatuses[1].Ready {
		t.Errorf("start: container statuses %+v", running.ContainerStatuses)
	}
	if len(running.InitContainerStatuses) != 2 || running.InitContainerStatuses[0].State.Terminated == nil || running.InitContainerStatuses[1].State.Running == nil {
		t.Errorf("start: init container statuses %+v", running.InitContainerStatuses)
	}
	conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range running.Conditions {
		conds[c.Type] = c.Status
	}
	if conds[corev1.PodReady] != corev1.ConditionTrue || conds["example.com/gate"] != corev1.ConditionTrue {
		t.Errorf("start: conditions %v", conds)
	}

	// A pod without init containers renders too.
	plain := pod.DeepCopy()
	plain.Spec.InitContainers = nil
	if st := render(t, startTpl, plain); st["initContainerStatuses"] != nil {
		t.Errorf("start without init containers: initContainerStatuses = %v", st["initContainerStatuses"])
	}

	pod.Status = running
	pod.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC))
	js, _ = json.Marshal(render(t, finish.Spec.Next.Patches[0].Template, pod))
	var done corev1.PodStatus
	_ = json.Unmarshal(js, &done)
	if done.Phase != corev1.PodSucceeded {
		t.Errorf("finish: phase %s", done.Phase)
	}
	for _, cs := range append(done.InitContainerStatuses, done.ContainerStatuses...) {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			t.Errorf("finish: container %s not terminated with 0: %+v", cs.Name, cs.State)
		}
	}
	if len(done.ContainerStatuses) != 2 || !done.ContainerStatuses[0].State.Terminated.StartedAt.Equal(&pod.Status.ContainerStatuses[0].State.Running.StartedAt) {
		t.Errorf("finish: container statuses %+v", done.ContainerStatuses)
	}
}

func TestComponentsStayOnLoopback(t *testing.T) {
	l := layout{"/state"}
	p := Ports{EtcdClient: 1, EtcdPeer: 2, APIServer: 3, ControllerManager: 4, Scheduler: 5, Kwok: 6}
	for _, c := range components(l, binsForTest(), "/self", p, false, false) {
		if !strings.Contains(c.health, "127.0.0.1:") {
			t.Errorf("%s: health URL %s is not on loopback", c.name, c.health)
		}
		for _, a := range c.spec.Args {
			if strings.Contains(a, "0.0.0.0") {
				t.Errorf("%s: argument %s binds all addresses", c.name, a)
			}
			if strings.HasPrefix(a, "--bind-address=") && a != "--bind-address=127.0.0.1" {
				t.Errorf("%s: %s", c.name, a)
			}
		}
		if c.name == APIServer && !slices.Contains(c.spec.Args, "--secure-port="+strconv.Itoa(p.APIServer)) {
			t.Errorf("apiserver args lack its port: %v", c.spec.Args)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func binsForTest() build.Binaries {
	return build.Paths("/cache")
}
