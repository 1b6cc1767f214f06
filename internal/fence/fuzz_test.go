package fence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// memKV is one key's compare-and-set store, for the pure decisions the
// fuzz target checks (the tests in fence_test.go run on JetStream).
type memKV struct {
	value []byte
	rev   uint64
}

type memEntry struct {
	value []byte
	rev   uint64
}

func (e memEntry) Bucket() string                  { return Bucket }
func (e memEntry) Key() string                     { return "k" }
func (e memEntry) Value() []byte                   { return e.value }
func (e memEntry) Revision() uint64                { return e.rev }
func (e memEntry) Created() time.Time              { return time.Time{} }
func (e memEntry) Delta() uint64                   { return 0 }
func (e memEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

func (m *memKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	if m.rev == 0 {
		return nil, jetstream.ErrKeyNotFound
	}
	return memEntry{value: m.value, rev: m.rev}, nil
}

func (m *memKV) Create(_ context.Context, _ string, v []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	if m.rev != 0 {
		return 0, jetstream.ErrKeyExists
	}
	m.value, m.rev = v, 1
	return m.rev, nil
}

func (m *memKV) Update(_ context.Context, _ string, v []byte, rev uint64) (uint64, error) {
	if rev != m.rev {
		return 0, jetstream.ErrKeyExists
	}
	m.value = v
	m.rev++
	return m.rev, nil
}

func (m *memKV) Delete(context.Context, string, ...jetstream.KVDeleteOpt) error {
	m.value, m.rev = nil, 0
	return nil
}

// FuzzFenceValue stores any value as a fence and moves it. A value that
// does not decode fails closed: no start, no stop, and it is left as it
// is, until the job's end overwrites it. A value that decodes moves by
// the rules. Nothing panics.
func FuzzFenceValue(f *testing.F) {
	for _, st := range []State{
		{Admission: "a1", Phase: Starting}, {Admission: "a1", Phase: Started}, {Admission: "a1", Phase: Stopping, StopID: "s1"},
		{Admission: "a0", Phase: Finished, UID: "u1", End: &End{Succeeded: true}}, {Admission: "a2", Phase: "bogus"},
	} {
		b, _ := json.Marshal(st)
		f.Add(b)
	}
	f.Add([]byte(`{"admission":1}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, value []byte) {
		var want State
		corrupt := len(value) > 0 && json.Unmarshal(value, &want) != nil
		kv := &memKV{value: value, rev: 1}
		got, err := Get(ctx, kv, "k")
		if corrupt != errors.Is(err, ErrCorrupt) {
			t.Fatalf("Get of %q: %v; corrupt %t", value, err, corrupt)
		}
		if corrupt {
			if _, err := BeginStart(ctx, kv, "k", "a1", ""); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("BeginStart over an unreadable fence: %v, want ErrCorrupt", err)
			}
			if err := Stop(ctx, kv, "k", "a1", "s2"); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Stop over an unreadable fence: %v, want ErrCorrupt", err)
			}
			if !bytes.Equal(kv.value, value) || kv.rev != 1 {
				t.Fatalf("an unreadable fence was written over by a start or a stop: %q", kv.value)
			}
		} else if got.Phase != want.Phase || got.Admission != want.Admission {
			t.Fatalf("Get = %+v, want %+v", got, want)
		}
		if !corrupt {
			st, err := BeginStart(ctx, kv, "k", "a9", "")
			if err == nil && (st.Phase != Starting || st.Admission != "a9") {
				t.Fatalf("BeginStart of a later admission gave %+v", st)
			}
			if errors.Is(err, ErrCorrupt) {
				t.Fatalf("BeginStart over a readable fence: %v", err)
			}
		}
		// The end overwrites whatever was there.
		if err := Finish(ctx, kv, "k", "a9", "u9", &End{Succeeded: true}); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		end, err := Get(ctx, kv, "k")
		if err != nil || end.Phase != Finished || end.UID != "u9" {
			t.Fatalf("after Finish: %+v, %v", end, err)
		}
		if err := Stop(ctx, kv, "k", "a9", "s3", OfJob("u9")); !errors.Is(err, ErrFinished) {
			t.Fatalf("Stop after the end: %v, want ErrFinished", err)
		}
	})
}
