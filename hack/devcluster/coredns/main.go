//go:build ignore

// Command coredns is CoreDNS with only the plugins a devcluster's real node
// needs: cluster names from the API server (kubernetes), everything else
// forwarded to the host's resolvers (forward), and what makes it observable
// and robust (bind, health, ready, log, errors, cache). A full CoreDNS
// links in dozens of plugins and their cloud SDKs, which triples the build.
//
// devcluster embeds this file with coredns.mod and coredns.sum and builds it
// as its own module (go.mod and go.sum), apart from the Kubernetes module
// graph. The "ignore" build tag keeps the devcluster module from compiling
// it and "go mod tidy" from adding CoreDNS to the devcluster's go.mod; the
// build removes that line. To update: copy the three files to an empty
// directory as main.go, go.mod and go.sum, run go get and go mod tidy there,
// and copy them back.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order in which the plugins handle a query; CoreDNS takes it from
// this list, not from the Corefile.
func init() {
	dnsserver.Directives = []string{"bind", "health", "ready", "log", "errors", "cache", "kubernetes", "forward"}
}

func main() { coremain.Run() }
