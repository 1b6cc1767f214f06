package cluster

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/build"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/etcd"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/nodes"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/pki"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/proc"
)

//go:embed kwok-stages.yaml
var kwokStages []byte

// Controllers are the kube-controller-manager controllers a devcluster runs:
// what batch Jobs need (job, cronjob, TTL, garbage collection of finished
// pods and of owned objects), Deployments and StatefulSets (serving
// workloads Sluice queues), the ResourceClaims of pods that claim devices
// from a ResourceClaimTemplate (Dynamic Resource Allocation), namespaces
// and service accounts.
var Controllers = []string{
	"job-controller",
	"replicaset-controller",
	"deployment-controller",
	"statefulset-controller",
	"cronjob-controller",
	"ttl-after-finished-controller",
	"garbage-collector-controller",
	"pod-garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"clusterrole-aggregation-controller",
	"resourceclaim-controller",
}

const (
	// serviceRange is the Service cluster-IP range (addresses handed out,
	// never reached: there is no kube-proxy).
	serviceRange = "10.96.0.0/16"
	// podRange is where kwok takes pod IPs from (likewise never reached).
	podRange = "10.244.0.1/16"
	// clientQPS lets the controllers and the scheduler keep up with load
	// tests; the defaults (20 and 50 requests/s) would be the bottleneck.
	clientQPS   = 200
	clientBurst = 400
)

func loopback(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func healthURL(port int, path string) string { return "https://" + loopback(port) + path }

// component is a process to start and how to tell it is ready.
type component struct {
	name   string
	spec   proc.Spec
	health string // URL; etcd's is plain HTTP, the others HTTPS with our CA
	// prepare, if set, runs before the process starts.
	prepare func(context.Context) error
}

func components(l layout, bins build.Binaries, self string, p Ports, fsync, realNode bool) []component {
	f := l.pki()
	etcdArgs := []string{"etcd",
		"--data-dir=" + l.etcdData(),
		"--client-port=" + strconv.Itoa(p.EtcdClient),
		"--peer-port=" + strconv.Itoa(p.EtcdPeer),
	}
	if fsync {
		etcdArgs = append(etcdArgs, "--fsync")
	}
	serving := []string{
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + f.ServingCert(),
		"--tls-private-key-file=" + f.ServingKey(),
	}
	kcm := l.kubeconfigOf(ControllerManager)
	sched := l.kubeconfigOf(Scheduler)
	controllers := Controllers
	if realNode {
		controllers = append(append([]string(nil), Controllers...), RealNodeControllers...)
	}
	comps := []component{
		{
			name:   Etcd,
			spec:   proc.Spec{Path: self, Args: etcdArgs},
			health: etcd.ClientURL(p.EtcdClient) + "/health",
		},
		{
			name: APIServer,
			spec: proc.Spec{Path: bins.APIServer, Args: []string{
				"--etcd-servers=" + etcd.ClientURL(p.EtcdClient),
				"--bind-address=127.0.0.1",
				"--advertise-address=127.0.0.1",
				"--secure-port=" + strconv.Itoa(p.APIServer),
				// The kubernetes Service gets no endpoints: loopback
				// addresses are not allowed there, and nothing in the
				// cluster needs to reach the API server through it.
				"--endpoint-reconciler-type=none",
				"--tls-cert-file=" + f.APIServerCert(),
				"--tls-private-key-file=" + f.APIServerKey(),
				"--client-ca-file=" + f.CACert(),
				"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
				"--service-account-key-file=" + f.SAPub(),
				"--service-account-signing-key-file=" + f.SAKey(),
				"--service-cluster-ip-range=" + serviceRange,
				"--authorization-mode=Node,RBAC",
				// Front proxy, for aggregated API servers and for the
				// components' delegated authentication.
				"--requestheader-client-ca-file=" + f.CACert(),
				"--requestheader-allowed-names=" + pki.FrontProxy,
				"--requestheader-username-headers=X-Remote-User",
				"--requestheader-group-headers=X-Remote-Group",
				"--requestheader-extra-headers-prefix=X-Remote-Extra-",
				"--proxy-client-cert-file=" + f.ClientCert(pki.FrontProxy),
				"--proxy-client-key-file=" + f.ClientKey(pki.FrontProxy),
				"--allow-privileged=true",
				// That plugin taints every new node not-ready, and no node
				// lifecycle controller runs to lift the taint once kwok
				// reports the node Ready.
				"--disable-admission-plugins=TaintNodesByCondition",
				"--profiling=true",
			}},
			health: "https://" + apiServerAddr(realNode, p.APIServer) + "/readyz",
		},
		{
			name: ControllerManager,
			spec: proc.Spec{Path: bins.ControllerManager, Args: append([]string{
				"--kubeconfig=" + kcm,
				"--authentication-kubeconfig=" + kcm,
				"--authorization-kubeconfig=" + kcm,
				"--secure-port=" + strconv.Itoa(p.ControllerManager),
				"--controllers=" + strings.Join(controllers, ","),
				"--service-account-private-key-file=" + f.SAKey(),
				"--root-ca-file=" + f.CACert(),
				"--leader-elect=false",
				"--kube-api-qps=" + strconv.Itoa(clientQPS),
				"--kube-api-burst=" + strconv.Itoa(clientBurst),
				"--profiling=false",
			}, serving...)},
			health: healthURL(p.ControllerManager, "/healthz"),
		},
		{
			name: Scheduler,
			spec: proc.Spec{Path: bins.Scheduler, Args: append([]string{
				"--config=" + l.config("kube-scheduler.yaml"),
				"--authentication-kubeconfig=" + sched,
				"--authorization-kubeconfig=" + sched,
				"--secure-port=" + strconv.Itoa(p.Scheduler),
			}, serving...)},
			health: healthURL(p.Scheduler, "/healthz"),
		},
		{
			name: Kwok,
			spec: proc.Spec{Path: bins.Kwok, Args: []string{
				"--kubeconfig=" + l.kubeconfigOf(Kwok),
				"--config=" + l.config("kwok.yaml"),
				"--manage-all-nodes=false",
				"--manage-nodes-with-annotation-selector=" + nodes.KwokAnnotation + "=" + nodes.KwokAnnotationValue,
				"--server-address=" + loopback(p.Kwok),
				"--tls-cert-file=" + f.ServingCert(),
				"--tls-private-key-file=" + f.ServingKey(),
				// Nodes report a loopback address, so that anything that
				// would talk to a "kubelet" stays on this machine.
				"--node-ip=127.0.0.1",
				"--cidr=" + podRange,
			},
				// kwok reads ~/.kwok/kwok.yaml too; keep it to ours.
				Env: []string{"KWOK_WORKDIR=" + l.path("kwok")}},
			health: healthURL(p.Kwok, "/healthz"),
		},
	}
	if realNode {
		comps[1].spec.Args = realNodeAPIServerArgs(comps[1].spec.Args, f)
	}
	return comps
}

// writeConfigs writes the kubeconfigs and the config files the components
// read.
func writeConfigs(l layout, server string) error {
	f := l.pki()
	if err := pki.WriteKubeconfig(l.Kubeconfig(), server, f, "admin"); err != nil {
		return err
	}
	for _, c := range []string{ControllerManager, Scheduler, Kwok} {
		if err := pki.WriteKubeconfig(l.kubeconfigOf(c), server, f, c); err != nil {
			return err
		}
	}
	sched := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, l.kubeconfigOf(Scheduler), clientQPS, clientBurst)
	if err := os.WriteFile(l.config("kube-scheduler.yaml"), []byte(sched), 0o644); err != nil {
		return fmt.Errorf("write scheduler config: %w", err)
	}
	if err := os.MkdirAll(l.path("kwok"), 0o755); err != nil {
		return fmt.Errorf("create kwok work dir: %w", err)
	}
	if err := os.WriteFile(l.config("kwok.yaml"), kwokStages, 0o644); err != nil {
		return fmt.Errorf("write kwok config: %w", err)
	}
	return nil
}
