package quota

import (
	"testing"
	"time"
)

// TestHorizonAdvance: settled moves to the time of the latest checkpoint
// every stop consumer has handled, never past a message still held.
func TestHorizonAdvance(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type tick struct {
		at          int
		last, floor uint64
		wantSettled time.Time
	}
	cases := []struct {
		name  string
		ticks []tick
	}{
		{
			name:  "caught up at once",
			ticks: []tick{{at: 1, last: 10, floor: 10, wantSettled: at(1)}},
		},
		{
			name: "a stuck message holds settled back until it is handled",
			ticks: []tick{
				{at: 1, last: 10, floor: 4},
				{at: 2, last: 20, floor: 4},
				{at: 3, last: 30, floor: 15, wantSettled: at(1)},
				{at: 4, last: 30, floor: 30, wantSettled: at(4)},
			},
		},
		{
			name: "settled never moves back",
			ticks: []tick{
				{at: 1, last: 10, floor: 10, wantSettled: at(1)},
				{at: 2, last: 12, floor: 11, wantSettled: at(1)},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h horizon
			for i, k := range tc.ticks {
				if got := h.advance(at(k.at), k.last, k.floor); !got.Equal(k.wantSettled) {
					t.Errorf("tick %d: settled = %v, want %v", i, got, k.wantSettled)
				}
			}
		})
	}
	var h horizon
	for i := range maxCheckpoints * 2 {
		h.advance(at(i), uint64(i+10), 0)
	}
	if len(h.checkpoints) > maxCheckpoints {
		t.Errorf("%d checkpoints kept while stuck, want at most %d", len(h.checkpoints), maxCheckpoints)
	}
}

// TestCollectEvery: fences are collected at each reconciliation, but no
// more often than a quarter of the age they are kept.
func TestCollectEvery(t *testing.T) {
	cases := []struct {
		name           string
		reconcile, age time.Duration
		wantEvery      time.Duration
	}{
		{"the default", 30 * time.Second, 2 * time.Minute, 30 * time.Second},
		{"reconciling every 5 s", 5 * time.Second, 2 * time.Minute, 30 * time.Second},
		{"a young age", 20 * time.Millisecond, time.Millisecond, 20 * time.Millisecond},
		{"reconciling seldom", 10 * time.Minute, 2 * time.Minute, 10 * time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Service{cfg: Config{Reconcile: c.reconcile, FenceAge: c.age}}
			if got := s.collectEvery(); got != c.wantEvery {
				t.Errorf("collectEvery() = %s, want %s", got, c.wantEvery)
			}
		})
	}
}
