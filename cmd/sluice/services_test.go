package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/services/admission"
	"github.com/sluice-dev/sluice/services/integration"
	"github.com/sluice-dev/sluice/services/multicluster"
	"github.com/sluice-dev/sluice/services/provisioning"
	"github.com/sluice-dev/sluice/services/watcher"
)

// Each command refuses bad settings with status 2, naming what is wrong,
// before it connects to anything (the NATS URL given answers nothing).
func TestServiceCommandsRefuseBadSettingsBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	queues := writeFile(t, dir, "queues.yaml", baseScenario)
	nowhere := []string{"--nats", "nats://127.0.0.1:1"}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"quota with no reconciliation", []string{"quota", "--reconcile", "0s"}, []string{"--reconcile", "positive"}},
		{"watcher with no resync", []string{"watcher", "--resync", "0s"}, []string{"--resync", "positive"}},
		{"admission's pending API without a certificate", []string{"admission", "--visibility-address", ":8443"}, []string{"--visibility-cert-dir"}},
		{"admission's --config with queues", []string{"admission", "--config", queues}, []string{"--config", "only a Configuration document"}},
		{"integration with no workers", []string{"integration", "job", "--workers", "0"}, []string{"workers", "at least 1"}},
		{"integration of an unknown kind", []string{"integration", "mxjob"}, []string{"mxjob", "pytorchjob"}},
		{"provisioning for an unknown kind", []string{"provisioning", "--integrations", "job,mxjob"}, []string{"mxjob"}},
		{"multicluster for an unknown kind", []string{"multicluster", "--integrations", "mxjob"}, []string{"mxjob"}},
		{"a worker without a name", []string{"worker"}, []string{"needs its name"}},
		// The pending API needs Kubernetes: the kubeconfig is read (and
		// here refused) because of a flag parsed after the builder was made.
		{"admission's pending API with a missing kubeconfig", []string{"admission", "--visibility-address", ":8443", "--visibility-cert-dir", dir,
			"--kubeconfig", dir + "/no-such-kubeconfig"}, []string{"kubeconfig", "no-such-kubeconfig"}},
		{"dev with an unknown kind", []string{"dev", "--integrations", "mxjob"}, []string{"mxjob"}},
		{"dev with queues as --config", []string{"dev", "--config", queues}, []string{"--config", "only a Configuration document"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			began := time.Now()
			code, out, errOut := runSluice(t, append(c.args, nowhere...)...)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitBadInput, errOut)
			}
			if out != "" {
				t.Errorf("stdout not empty:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if strings.Contains(errOut, "connect") {
				t.Errorf("it tried to connect before refusing:\n%s (after %s)", errOut, time.Since(began))
			}
		})
	}
}

// In `sluice dev` one flag serves every service that takes it; its value
// reaches each one's options.
func TestDevFlagsReachEveryServiceThatTakesThem(t *testing.T) {
	w, a, in := watcher.DefaultOptions(), admission.DefaultOptions(), integration.DefaultOptions()
	prov, disp := provisioning.DefaultOptions(), multicluster.DefaultDispatcherOptions()
	fs := pflag.NewFlagSet("dev", pflag.ContinueOnError)
	share := bindShared(fs, []builder{watcherBuilder(&w), admissionBuilder(&a), integrationBuilder(&in), provisioningBuilder(&prov),
		dispatcherBuilder(&disp)})
	if err := fs.Parse([]string{"--resync=3m", "--config=/etc/sluice/config.yaml", "--integrations=job,pod", "--workers=7"}); err != nil {
		t.Fatal(err)
	}
	if err := share(); err != nil {
		t.Fatal(err)
	}
	type got struct {
		WatcherResync, IntegrationResync   time.Duration
		AdmissionConfig, IntegrationConfig string
		ProvisioningKinds, DispatcherKinds []string
		Workers                            int
	}
	want := got{3 * time.Minute, 3 * time.Minute, "/etc/sluice/config.yaml", "/etc/sluice/config.yaml", []string{"job", "pod"}, []string{"job", "pod"}, 7}
	if diff := cmp.Diff(want, got{w.Resync, in.Config.Resync, a.ConfigFile, in.ConfigFile, prov.Kinds, disp.Kinds, in.Config.Workers}); diff != "" {
		t.Errorf("options after parsing (-want +got):\n%s", diff)
	}
}

// A builder checks the options as the flags left them, not as they were
// when it was made.
func TestBuildersReadTheParsedOptions(t *testing.T) {
	a := admission.DefaultOptions()
	b := admissionBuilder(&a)
	if b.kube() || b.validate() != nil {
		t.Fatalf("defaults: kube %v, validate %v; want no Kubernetes and valid", b.kube(), b.validate())
	}
	a.Visibility.Addr = ":8443"
	if !b.kube() {
		t.Error("with --visibility-address the builder does not ask for Kubernetes")
	}
	if b.validate() == nil {
		t.Error("--visibility-address without a certificate directory passes validation")
	}
}
