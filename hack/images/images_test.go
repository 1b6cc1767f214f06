package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestSameSourceSameDigest builds the pause image twice, each time from a
// fresh compile, and reads the tarball back as a node would import it.
func TestSameSourceSameDigest(t *testing.T) {
	ctx := context.Background()
	module, err := moduleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := spec{ref: "sluice-pause:test", pkg: "./hack/images/pause", binary: "/pause", user: nonRoot, files: nonRootFiles}
	var digests []string
	for i := range 2 {
		b := builder{module: module, goarch: "amd64", work: t.TempDir(), log: io.Discard}
		img, err := b.image(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "pause.tar")
		tag, _ := name.NewTag(s.ref)
		if err := tarball.WriteToFile(path, tag, img); err != nil {
			t.Fatal(err)
		}
		read, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("build %d: read the tarball back: %v", i, err)
		}
		d, err := read.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())

		cfg, err := read.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		got := []string{cfg.OS, cfg.Architecture, cfg.Config.User, cfg.Created.UTC().Format(time.RFC3339)}
		if diff := cmp.Diff([]string{"linux", "amd64", "65532:65532", "1970-01-01T00:00:00Z"}, got); diff != "" {
			t.Errorf("config: os, architecture, user, created (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"/pause"}, cfg.Config.Entrypoint); diff != "" {
			t.Errorf("entrypoint (-want +got):\n%s", diff)
		}
		layers, err := read.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("layers = %d, %v; want one", len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var entries []string
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s: time %s, owner %d:%d; want the epoch and root", h.Name, h.ModTime, h.Uid, h.Gid)
			}
			entries = append(entries, h.Name+" "+os.FileMode(h.Mode).String())
		}
		rc.Close()
		want := []string{"etc/ -rwxr-xr-x", "etc/group -rw-r--r--", "etc/passwd -rw-r--r--", "pause -rwxr-xr-x"}
		if diff := cmp.Diff(want, entries); diff != "" {
			t.Errorf("layer entries (-want +got):\n%s", diff)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same source: digests %s and %s", digests[0], digests[1])
	}
}

func TestLayerRefusesRelativePaths(t *testing.T) {
	_, err := layerOf(map[string]file{"etc/passwd": {data: []byte("x")}})
	if err == nil || err.Error() != `file "etc/passwd": not an absolute path` {
		t.Fatalf("layerOf = %v, want the relative path named", err)
	}
}

func TestFlags(t *testing.T) {
	if _, err := parseFlags([]string{"-only", "sluice,kubelet"}); err == nil || err.Error() != `-only: no image "kubelet" (known: sluice, nats-server, pause, workload)` {
		t.Errorf("unknown image: %v", err)
	}
	o, err := parseFlags([]string{"-only", "pause", "-sluice-tag", "0.1.0"})
	if err != nil || !o.only["pause"] || o.only["sluice"] || o.sluiceTag != "0.1.0" {
		t.Errorf("parseFlags = %+v, %v", o, err)
	}
}
