package integration

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRecordCache(t *testing.T) {
	always := func(string, uint64) bool { return true }
	tests := []struct {
		name    string
		steps   func(c *recordCache)
		get     string
		holding uint64
		wantRaw []byte
		wantOK  bool
	}{
		{
			name:  "a record read is kept for its holding",
			steps: func(c *recordCache) { c.fill("job.a.x", 1, c.begin("job.a.x"), []byte("rec"), always) },
			get:   "job.a.x", holding: 1, wantRaw: []byte("rec"), wantOK: true,
		},
		{
			name:  "none stored is an answer too",
			steps: func(c *recordCache) { c.fill("job.a.x", 1, c.begin("job.a.x"), nil, always) },
			get:   "job.a.x", holding: 1, wantOK: true,
		},
		{
			name:  "another holding of the shard does not trust it",
			steps: func(c *recordCache) { c.fill("job.a.x", 1, c.begin("job.a.x"), []byte("rec"), always) },
			get:   "job.a.x", holding: 2,
		},
		{
			name: "a write drops it",
			steps: func(c *recordCache) {
				c.fill("job.a.x", 1, c.begin("job.a.x"), []byte("rec"), always)
				c.drop("job.a.x")
			},
			get: "job.a.x", holding: 1,
		},
		{
			name: "a read that overlapped a write is not kept",
			steps: func(c *recordCache) {
				mark := c.begin("job.a.x")
				c.drop("job.a.x")
				c.fill("job.a.x", 1, mark, []byte("old"), always)
			},
			get: "job.a.x", holding: 1,
		},
		{
			name: "a read after the write is kept",
			steps: func(c *recordCache) {
				c.drop("job.a.x")
				c.fill("job.a.x", 1, c.begin("job.a.x"), []byte("new"), always)
			},
			get: "job.a.x", holding: 1, wantRaw: []byte("new"), wantOK: true,
		},
		{
			name: "other keys are not touched by a write",
			steps: func(c *recordCache) {
				c.fill("job.a.x", 1, c.begin("job.a.x"), []byte("rec"), always)
				c.drop("job.a.y")
			},
			get: "job.a.x", holding: 1, wantRaw: []byte("rec"), wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newRecordCache()
			tt.steps(c)
			raw, ok := c.get(tt.get, tt.holding)
			if ok != tt.wantOK {
				t.Errorf("get ok = %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.wantRaw, raw); diff != "" {
				t.Errorf("get (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRecordCacheSweepsStaleHoldings: entries of shards no longer held
// under their holding go once the map has doubled.
func TestRecordCacheSweepsStaleHoldings(t *testing.T) {
	c := newRecordCache()
	current := func(rk string, holding uint64) bool { return holding == 2 }
	for i := range 1000 {
		rk := fmt.Sprintf("job.a.old-%d", i)
		c.fill(rk, 1, c.begin(rk), []byte("rec"), current)
	}
	for i := range 1025 {
		rk := fmt.Sprintf("job.a.new-%d", i)
		c.fill(rk, 2, c.begin(rk), []byte("rec"), current)
	}
	if n := len(c.entries); n != 1025 {
		t.Errorf("%d entries after the sweep, want the 1,025 of the current holding", n)
	}
	if _, ok := c.get("job.a.new-0", 2); !ok {
		t.Error("an entry of the current holding was swept")
	}
}
