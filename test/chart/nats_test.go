package chart_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/cmd/sluice/natsperm"
)

// TestChartBundledNATS: by default the release runs its own NATS, and each
// service logs in as its own user over TLS. The server's configuration, the
// authorization block its init container writes (the real `sluice
// nats-authorization`, run here with the rendered arguments) and the
// rendered Secrets are loaded into a real nats-server: each service's user
// gets in with its password, over TLS verified with the rendered CA, and
// nothing gets in without them.
func TestChartBundledNATS(t *testing.T) {
	objs := mustRender(t, "setup.checkControllers[0]=example.com/gate", "setup.workers[0]=east")
	nsName := fullname + "-nats"
	var sts appsv1.StatefulSet
	if !find(t, objs, "StatefulSet", nsName, &sts) {
		t.Fatalf("no StatefulSet %s; have %v", nsName, names(objs, "StatefulSet"))
	}
	var users, certs corev1.Secret
	var cm corev1.ConfigMap
	if !find(t, objs, "Secret", nsName+"-users", &users) || !find(t, objs, "Secret", nsName+"-tls", &certs) || !find(t, objs, "ConfigMap", nsName+"-config", &cm) {
		t.Fatalf("Secrets %v, ConfigMaps %v: want %s-users, %s-tls and %s-config", names(objs, "Secret"), names(objs, "ConfigMap"), nsName, nsName, nsName)
	}

	// A password for every user the server's authorization names, and
	// only for those.
	want := natsperm.LoginUsers(natsperm.WithCheckControllers("example.com/gate"), natsperm.WithWorkers("hub", "east"))
	var got []string
	for k, v := range users.Data {
		got = append(got, k)
		if len(v) < 32 {
			t.Errorf("user %s: a password of %d bytes", k, len(v))
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("users with a password (-want +got):\n%s", diff)
	}

	// Each service: the server's URL, its own user and password, the CA.
	url := "tls://" + nsName + "." + namespace + ".svc:4222"
	for _, d := range []struct{ name, user string }{
		{"admission", "admission"}, {"quota", "quota"}, {"preemption", "preemption"}, {"watcher", "watcher"},
		{"integration-job", "integration"}, {"provisioning", "provisioning"}, {"multicluster", "multicluster"},
	} {
		var dep appsv1.Deployment
		if !find(t, objs, "Deployment", fullname+"-"+d.name, &dep) {
			t.Fatalf("no Deployment %s", d.name)
		}
		c := dep.Spec.Template.Spec.Containers[0]
		for _, a := range []string{"--nats=" + url, "--nats-user=" + d.user, "--nats-ca=/etc/sluice/nats-ca/ca.crt", "--startup-wait=4m"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("%s: args %q lack %s", d.name, c.Args, a)
			}
		}
		var pw *corev1.SecretKeySelector
		for _, e := range c.Env {
			if e.Name == "SLUICE_NATS_PASSWORD" && e.ValueFrom != nil {
				pw = e.ValueFrom.SecretKeyRef
			}
		}
		if pw == nil || pw.Name != nsName+"-users" || pw.Key != d.user {
			t.Errorf("%s: password from %+v, want key %s of %s-users", d.name, pw, d.user, nsName)
		}
	}
	job := setupJob(t, objs)
	if _, hook := job.Annotations["helm.sh/hook"]; hook || job.Name != fullname+"-setup-1" {
		t.Errorf("setup Job %s, annotations %v: want %s-setup-1 of the release, not a hook (the server is part of it)", job.Name, job.Annotations, fullname)
	}

	// The server as the pod runs it, its paths moved into a directory.
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc", "nats")
	write := func(path string, data []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range users.Data {
		write(filepath.Join(etc, "users", k), v)
	}
	for k, v := range certs.Data {
		write(filepath.Join(etc, "tls", k), v)
	}
	if err := os.MkdirAll(filepath.Join(etc, "auth"), 0o700); err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("/etc/nats/", etc+"/", "/data", filepath.Join(dir, "data"), "0.0.0.0:4222", "127.0.0.1:-1").Replace(cm.Data["nats.conf"])
	write(filepath.Join(etc, "config", "nats.conf"), []byte(conf))

	if len(sts.Spec.Template.Spec.InitContainers) != 1 {
		t.Fatalf("init containers %d, want the one that writes the authorization", len(sts.Spec.Template.Spec.InitContainers))
	}
	sluice := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", sluice, "../../cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	var args []string
	for _, a := range sts.Spec.Template.Spec.InitContainers[0].Args {
		args = append(args, strings.ReplaceAll(a, "/etc/nats/", etc+"/"))
	}
	if out, err := exec.Command(sluice, args...).CombinedOutput(); err != nil {
		t.Fatalf("the init container's sluice %q: %v\n%s", args, err, out)
	}

	t.Setenv("POD_NAME", nsName+"-0")
	opts, err := server.ProcessConfigFile(filepath.Join(etc, "config", "nats.conf"))
	if err != nil {
		t.Fatalf("nats-server refuses the rendered configuration: %v\n%s", err, conf)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certs.Data["ca.crt"]) {
		t.Fatal("no CA in the rendered Secret")
	}
	// The name the services dial; the server listens on loopback here.
	verified := nats.Secure(&tls.Config{RootCAs: pool, ServerName: nsName + "." + namespace + ".svc", MinVersion: tls.VersionTLS12})
	addr := "tls://" + srv.Addr().String()
	for _, tc := range []struct {
		name   string
		opts   []nats.Option
		wantIn bool
	}{
		{"admission with its password", []nats.Option{verified, nats.UserInfo("admission", string(users.Data["admission"]))}, true},
		{"a check controller of your own", []nats.Option{verified, nats.UserInfo("check-example-com-gate", string(users.Data["check-example-com-gate"]))}, true},
		{"admission with quota's password", []nats.Option{verified, nats.UserInfo("admission", string(users.Data["quota"]))}, false},
		{"no credentials", []nats.Option{verified}, false},
		{"a server name the certificate does not carry", []nats.Option{nats.Secure(&tls.Config{RootCAs: pool, ServerName: "nats.example", MinVersion: tls.VersionTLS12}),
			nats.UserInfo("admission", string(users.Data["admission"]))}, false},
		{"plaintext", []nats.Option{nats.UserInfo("admission", string(users.Data["admission"]))}, false},
	} {
		target := addr
		if tc.name == "plaintext" {
			target = "nats://" + srv.Addr().String()
		}
		nc, err := nats.Connect(target, append(tc.opts, nats.MaxReconnects(0), nats.Timeout(3*time.Second))...)
		if got := err == nil; got != tc.wantIn {
			t.Errorf("%s: err %v, want in: %t", tc.name, err, tc.wantIn)
		}
		if nc != nil {
			nc.Close()
		}
	}
}

// TestChartNATSNoneOnlyWhenAsked: without credentials only when asked,
// and a NATS of your own needs its URL and the users' Secret.
func TestChartNATSNoneOnlyWhenAsked(t *testing.T) {
	objs := mustRender(t, "nats.auth.mode=none")
	var sts appsv1.StatefulSet
	find(t, objs, "StatefulSet", fullname+"-nats", &sts)
	if n := len(sts.Spec.Template.Spec.InitContainers); n != 0 || slices.Contains(names(objs, "Secret"), fullname+"-nats-users") {
		t.Errorf("mode none: %d init containers, Secrets %v; want no users", n, names(objs, "Secret"))
	}
	for _, tc := range []struct {
		name    string
		set     []string
		wantErr string
	}{
		{"a NATS of your own without its URL", []string{"nats.install.enabled=false", "nats.auth.mode=none"}, "/nats/url"},
		{"a NATS of your own without the users' Secret", []string{"nats.install.enabled=false", "nats.url=nats://nats:4222"}, "/nats/auth/secretName"},
		{"credentials files on the bundled server", []string{"nats.auth.mode=creds", "nats.auth.secretName=x"}, "/nats/auth/mode"},
		{"a startup wait the probes cannot read", []string{"startupWait=1h"}, "/startupWait"},
	} {
		if _, err := render(t, tc.set...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.wantErr)
		}
	}
}

// TestChartBundledNATSCluster: with three replicas the servers form one
// cluster, routes over TLS to each server's stable name; nats-server
// accepts the configuration.
func TestChartBundledNATSCluster(t *testing.T) {
	objs := mustRender(t, "nats.replicas=3", "nats.auth.mode=none")
	var cm corev1.ConfigMap
	var sts appsv1.StatefulSet
	if !find(t, objs, "ConfigMap", fullname+"-nats-config", &cm) || !find(t, objs, "StatefulSet", fullname+"-nats", &sts) {
		t.Fatal("no NATS ConfigMap or StatefulSet")
	}
	if *sts.Spec.Replicas != 3 || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("StatefulSet: %d replicas, %s; want 3, Parallel", *sts.Spec.Replicas, sts.Spec.PodManagementPolicy)
	}
	var certs corev1.Secret
	find(t, objs, "Secret", fullname+"-nats-tls", &certs)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	for k, v := range certs.Data {
		if err := os.WriteFile(filepath.Join(dir, "tls", k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "nats.conf")
	text := strings.NewReplacer("/etc/nats/", dir+"/", "/data", filepath.Join(dir, "data")).Replace(cm.Data["nats.conf"])
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAME", fullname+"-nats-1")
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server refuses the configuration: %v", err)
	}
	var routes []string
	for _, r := range opts.Routes {
		routes = append(routes, r.String())
	}
	wantRoutes := []string{}
	for i := range 3 {
		wantRoutes = append(wantRoutes, "nats://"+fullname+"-nats-"+string(rune('0'+i))+"."+fullname+"-nats."+namespace+".svc:6222")
	}
	if diff := cmp.Diff(wantRoutes, routes); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	if opts.Cluster.TLSConfig == nil || opts.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("routes not verified over TLS")
	}
}
