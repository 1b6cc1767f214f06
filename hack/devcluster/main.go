// Command devcluster runs a local Kubernetes control plane for Sluice's
// development and tests: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, as background processes on loopback.
// See docs/devcluster.md in the repository.
package main

import (
	"context"
	"embed"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/cli"
)

// module holds this module's go.mod and go.sum: the Kubernetes binaries are
// built from them, wherever devcluster runs. It also holds the real node's
// CoreDNS module (coredns/), which has its own dependencies.
//
//go:embed go.mod go.sum coredns/main.go coredns/coredns.mod coredns/coredns.sum
var module embed.FS

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, module)
	stop()
	os.Exit(code)
}
