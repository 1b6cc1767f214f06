// Command images builds Sluice's container images without Docker or a
// registry, as image tarballs that `ctr images import` (or `docker load`)
// reads: sluice itself, nats-server from the Go module Sluice embeds, the
// pause image a containerd node needs for its pod sandboxes, and the
// workload image the end-to-end tests run. Each is one static binary on
// an empty base. The same source and Go toolchain give the same digests.
//
//	go run ./hack/images -out bin/images -sluice-tag 0.1.0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const natsModule = "github.com/nats-io/nats-server/v2"

type options struct {
	out       string
	sluiceTag string
	goarch    string
	only      map[string]bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o, err := parseFlags(os.Args[1:])
	if err == nil {
		err = run(ctx, o, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	var only string
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.StringVar(&o.out, "out", "bin/images", "directory the image tarballs are written to")
	fs.StringVar(&o.sluiceTag, "sluice-tag", "dev", "tag of the sluice image (the chart's appVersion by default in make images)")
	fs.StringVar(&o.goarch, "goarch", runtime.GOARCH, "architecture the images are built for")
	fs.StringVar(&only, "only", "", "comma-separated images to build (sluice, nats-server, pause, workload); all if empty")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			if !known[n] {
				return o, fmt.Errorf("-only: no image %q (known: sluice, nats-server, pause, workload)", n)
			}
			o.only[n] = true
		}
	}
	return o, nil
}

var known = map[string]bool{"sluice": true, "nats-server": true, "pause": true, "workload": true}

// specs lists the images, by their short names.
func specs(ctx context.Context, module string, o options) (map[string]spec, error) {
	natsVersion, err := moduleVersion(ctx, module, natsModule)
	if err != nil {
		return nil, err
	}
	return map[string]spec{
		"sluice": {ref: "sluice:" + o.sluiceTag, pkg: "./cmd/sluice", binary: "/sluice", user: nonRoot, files: nonRootFiles},
		"nats-server": {ref: "nats-server:" + strings.TrimPrefix(natsVersion, "v"), pkg: natsModule,
			binary: "/nats-server", user: nonRoot, files: nonRootFiles},
		// pause runs as root: it is the pod's init process.
		"pause":    {ref: "sluice-pause:" + o.sluiceTag, pkg: "./hack/images/pause", binary: "/pause"},
		"workload": {ref: "sluice-workload:" + o.sluiceTag, pkg: "./test/workload", binary: "/workload", user: nonRoot, files: nonRootFiles},
	}, nil
}

func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	module, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	all, err := specs(ctx, module, o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	work, err := os.MkdirTemp("", "sluice-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	b := builder{module: module, goarch: o.goarch, work: work, log: stderr}
	for _, short := range []string{"sluice", "nats-server", "pause", "workload"} {
		if o.only != nil && !o.only[short] {
			continue
		}
		s := all[short]
		img, err := b.image(ctx, s)
		if err != nil {
			return err
		}
		tag, err := name.NewTag(s.ref)
		if err != nil {
			return fmt.Errorf("image %s: %w", s.ref, err)
		}
		path := filepath.Join(o.out, short+".tar")
		if err := tarball.WriteToFile(path, tag, img); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return fmt.Errorf("image %s: %w", s.ref, err)
		}
		fmt.Fprintf(stdout, "%s\t%s\t%s\n", s.ref, digest, path)
	}
	return nil
}

// moduleRoot is the directory of the main module (go.mod's directory).
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the sluice module: run from the repository")
	}
	return filepath.Dir(gomod), nil
}

// moduleVersion is the version of a module the main module requires.
func moduleVersion(ctx context.Context, dir, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", module)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}
