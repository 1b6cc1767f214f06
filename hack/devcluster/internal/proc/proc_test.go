package proc

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStartFindStop(t *testing.T) {
	sleep, err := findExe("sleep")
	if err != nil {
		t.Skip("no sleep command:", err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "sleep.log")
	id, exited, err := Start(Spec{Path: sleep, Args: []string{"300"}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Stop(context.Background(), id, time.Second) })
	if !Alive(id) {
		t.Fatal("started process is not alive")
	}
	if Alive(Identity{PID: id.PID, StartTime: id.StartTime + 1}) {
		t.Error("Alive ignores the start time (a reused pid would count as ours)")
	}
	if rss, err := RSS(id.PID); err != nil || rss <= 0 {
		t.Errorf("RSS = %d, %v", rss, err)
	}
	found, err := Find([]string{sleep}, func(args []string) bool { return slices.Equal(args, []string{"300"}) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(found, id) {
		t.Errorf("Find did not find %v among %v", id, found)
	}
	data, _ := os.ReadFile(log)
	if !strings.Contains(string(data), "devcluster starts: "+sleep+" 300") {
		t.Errorf("log has no start line: %q", data)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Stop(ctx, id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if Alive(id) {
		t.Error("process alive after Stop")
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Error("exit not reported")
	}
	if err := Stop(ctx, id, time.Second); err != nil {
		t.Errorf("Stop of a stopped process: %v", err)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	sh, err := findExe("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	// A process that ignores SIGTERM.
	id, _, err := Start(Spec{Path: sh, Args: []string{"-c", "trap '' TERM; while :; do sleep 1; done"}, Log: filepath.Join(t.TempDir(), "log")})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := Stop(ctx, id, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if Alive(id) {
		t.Error("process alive after Stop")
	}
	if time.Since(t0) > 15*time.Second {
		t.Errorf("Stop took %s", time.Since(t0))
	}
	// The group went too: no sleep child of that shell is left.
	left, _ := Find([]string{"/bin/sleep", "/usr/bin/sleep"}, func([]string) bool { return true })
	for _, l := range left {
		if st, err := readStat(l.PID); err == nil && st.pgrp == id.PID {
			t.Errorf("child %d of the stopped group still runs", l.PID)
		}
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path); err == nil {
		t.Fatal("second Lock succeeded while the first is held")
	}
	unlock()
	unlock2, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	unlock2()
}

func findExe(name string) (string, error) {
	for _, d := range []string{"/bin", "/usr/bin"} {
		p := filepath.Join(d, name)
		if p, err := filepath.EvalSymlinks(p); err == nil {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}
