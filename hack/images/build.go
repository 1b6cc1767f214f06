package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// spec is one image: a single static Go binary on an empty base.
type spec struct {
	// ref names the image, e.g. sluice:0.1.0.
	ref string
	// pkg is the Go package built into the binary (a path inside the main
	// module, or a package of a module it requires).
	pkg string
	// binary is the binary's path in the image; the image's entrypoint.
	binary string
	// user runs the entrypoint: uid:gid, or "" for root.
	user string
	// files are further files in the image, by path.
	files map[string][]byte
}

// nonRoot is the user of every image but pause, a user entry for it in
// /etc/passwd and /etc/group, so that tools that look the uid up find it.
const nonRoot = "65532:65532"

var nonRootFiles = map[string][]byte{
	"/etc/passwd": []byte("nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n"),
	"/etc/group":  []byte("nonroot:x:65532:\n"),
}

// epoch is every file's and the image's time: a build at another moment
// gives the same bytes.
var epoch = time.Unix(0, 0).UTC()

// builder compiles binaries and assembles images.
type builder struct {
	// module is the directory of the main module, where go build runs.
	module string
	goarch string
	// work holds the compiled binaries.
	work string
	log  io.Writer
}

// compile builds a static binary of pkg for linux/goarch. Nothing of the
// machine or the moment goes into it: no paths (-trimpath), no VCS stamp
// (a clean and a dirty tree of the same source agree), no build id.
func (b builder) compile(ctx context.Context, pkg string) ([]byte, error) {
	out := filepath.Join(b.work, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Dir = b.module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+b.goarch, "GOFLAGS=-mod=readonly")
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %w", pkg, err)
	}
	return os.ReadFile(out)
}

// image builds s's binary and puts it, with s's files, in one layer.
func (b builder) image(ctx context.Context, s spec) (v1.Image, error) {
	bin, err := b.compile(ctx, s.pkg)
	if err != nil {
		return nil, err
	}
	files := map[string]file{s.binary: {data: bin, mode: 0o755}}
	for p, data := range s.files {
		files[p] = file{data: data, mode: 0o644}
	}
	layerTar, err := layerOf(files)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.ref, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", s.ref, err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "go build " + s.pkg, Comment: "sluice hack/images"},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.ref, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", s.ref, err)
	}
	cfg = cfg.DeepCopy()
	// Without the platform, containerd's import filters the image out.
	cfg.OS, cfg.Architecture = "linux", b.goarch
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{s.binary}
	cfg.Config.User = s.user
	cfg.Config.Env = []string{"PATH=/"}
	return mutate.ConfigFile(img, cfg)
}

type file struct {
	data []byte
	mode int64
}

// layerOf writes files, and the directories above them, as a tar stream in
// path order, owned by root, every time the epoch.
func layerOf(files map[string]file) ([]byte, error) {
	dirs := map[string]bool{}
	for p := range files {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("file %q: not an absolute path", p)
		}
		for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	type entry struct {
		name string
		dir  bool
	}
	var entries []entry
	for d := range dirs {
		entries = append(entries, entry{name: strings.TrimPrefix(d, "/") + "/", dir: true})
	}
	for p := range files {
		entries = append(entries, entry{name: strings.TrimPrefix(p, "/")})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, ModTime: epoch}
		if e.dir {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		} else {
			f := files["/"+e.name]
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, f.mode, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !e.dir {
			if _, err := tw.Write(files["/"+e.name].data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
