package convert

import (
	"bytes"
	"testing"
)

// FuzzConvert: whatever it is given, the converter ends, refuses with an
// error or converts; with DropUnsupported, what it writes converts again
// to itself (Sluice's own objects pass as written).
func FuzzConvert(f *testing.F) {
	f.Add([]byte("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec: {cohort: a, example.com/x: 1, 'q\"r': 2}\n"), true)
	f.Add([]byte("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: q, namespace: ns}\nspec: {clusterQueue: cq}\n---\nkind: List\nitems: []\n"), false)
	f.Add([]byte("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nfairSharing: {enable: true}\n"), true)
	f.Fuzz(func(t *testing.T, in []byte, drop bool) {
		res, err := Convert("in.yaml", in, Options{DropUnsupported: drop})
		if err != nil || !drop || len(res.Output) == 0 {
			return
		}
		again, err := Convert("out.yaml", res.Output, Options{DropUnsupported: true})
		if err != nil {
			t.Fatalf("the converted output does not convert again: %v\n%s", err, res.Output)
		}
		if !bytes.Equal(bytes.TrimSpace(again.Output), bytes.TrimSpace(res.Output)) {
			t.Fatalf("converting the output again changed it:\n%s\nbecame\n%s", res.Output, again.Output)
		}
	})
}
