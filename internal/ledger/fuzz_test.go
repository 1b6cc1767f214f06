package ledger_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/internal/ledger"
)

// FuzzParseEntry: whatever a ledger key holds, parsing it ends in a change
// or in an error that says the key or the value is bad (never a panic,
// never a reservation without its ClusterQueue), and a reservation that
// parses writes back to the same reservation.
func FuzzParseEntry(f *testing.F) {
	f.Add("res.job.team-a.train", true, []byte(`{"clusterQueue":"cq","podSets":[{"name":"main","count":2,"flavors":{"cpu":"f"}}],"uid":"u1"}`))
	f.Add("res.job.team-a", true, []byte(`{}`))
	f.Add("tree.cq/cq", true, []byte(`{"reservations":{"job/ns/a":{"clusterQueue":"cq"}}}`))
	f.Add("res.job.ns.a", false, []byte(nil))
	f.Add("res.job.ns.a", true, []byte(`{"clusterQueue":"cq","admittedAt":"not a time"}`))
	f.Fuzz(func(t *testing.T, key string, put bool, value []byte) {
		c, err := ledger.ParseEntry(key, put, value, 7)
		if err != nil {
			if !errors.Is(err, ledger.ErrCorrupt) && !errors.Is(err, ledger.ErrKey) {
				t.Fatalf("ParseEntry(%q) error %v is neither ErrCorrupt nor ErrKey", key, err)
			}
			return
		}
		if c.Revision != 7 {
			t.Fatalf("revision %d, want 7", c.Revision)
		}
		if c.Reservation == nil {
			return
		}
		if c.Reservation.ClusterQueue == "" {
			t.Fatalf("a reservation without its ClusterQueue parsed: %+v", c.Reservation)
		}
		b, err := json.Marshal(c.Reservation)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ledger.ParseEntry(key, true, b, 7)
		if err != nil {
			t.Fatalf("a reservation written back does not parse: %v\n%s", err, b)
		}
		if d := cmp.Diff(c.Reservation, again.Reservation); d != "" {
			t.Fatalf("written back and parsed again (-first +again):\n%s", d)
		}
	})
}
