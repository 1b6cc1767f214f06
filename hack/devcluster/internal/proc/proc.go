// Package proc starts detached background processes and finds, checks and
// stops them again later, from another invocation, using Linux's /proc.
package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Identity names one process. The start time (clock ticks after boot, as in
// /proc/<pid>/stat) tells it apart from a later process that reuses the pid.
type Identity struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
}

type stat struct {
	state byte
	ppid  int
	pgrp  int
	start uint64
}

func readStat(pid int) (stat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 > len(data) {
		return stat{}, fmt.Errorf("malformed stat of pid %d", pid)
	}
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 20 {
		return stat{}, fmt.Errorf("short stat of pid %d", pid)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return stat{}, fmt.Errorf("stat of pid %d: ppid: %w", pid, err)
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return stat{}, fmt.Errorf("stat of pid %d: pgrp: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("stat of pid %d: starttime: %w", pid, err)
	}
	return stat{state: f[0][0], ppid: ppid, pgrp: pgrp, start: start}, nil
}

// Alive reports whether the process still runs (a zombie does not).
func Alive(id Identity) bool {
	if id.PID <= 0 {
		return false
	}
	st, err := readStat(id.PID)
	if err != nil || st.state == 'Z' || st.state == 'X' {
		return false
	}
	return id.StartTime == 0 || st.start == id.StartTime
}

// Spec describes a process to start.
type Spec struct {
	Path string   // executable
	Args []string // arguments, without the program name
	Env  []string // added to this process's environment
	Dir  string   // working directory
	Log  string   // file that receives stdout and stderr (appended)
}

// Start starts s detached: in a session of its own (so a terminal's signals
// and hang-up do not reach it), with stdin from /dev/null and its output
// appended to s.Log. The returned channel yields the process's exit if it
// exits while this process still runs; after this process exits the child
// goes on running.
func Start(s Spec) (Identity, <-chan error, error) {
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Identity{}, nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== %s devcluster starts: %s %s\n", time.Now().Format(time.RFC3339), s.Path, strings.Join(s.Args, " "))

	cmd := exec.Command(s.Path, s.Args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Identity{}, nil, fmt.Errorf("start %s: %w", filepath.Base(s.Path), err)
	}
	id := Identity{PID: cmd.Process.Pid}
	if st, err := readStat(id.PID); err == nil {
		id.StartTime = st.start
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return id, done, nil
}

// Stop ends the process and its process group: SIGTERM, then SIGKILL if it
// is still there after grace. It returns once the process is gone.
func Stop(ctx context.Context, id Identity, grace time.Duration) error {
	if !Alive(id) {
		return nil
	}
	signalGroup(id, syscall.SIGTERM)
	if waitGone(ctx, id, grace) {
		return nil
	}
	signalGroup(id, syscall.SIGKILL)
	if waitGone(ctx, id, 10*time.Second) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop pid %d: %w", id.PID, err)
	}
	return fmt.Errorf("pid %d still runs after SIGKILL", id.PID)
}

func signalGroup(id Identity, sig syscall.Signal) {
	if st, err := readStat(id.PID); err == nil && st.pgrp == id.PID {
		_ = syscall.Kill(-id.PID, sig)
	}
	_ = syscall.Kill(id.PID, sig)
}

func waitGone(ctx context.Context, id Identity, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !Alive(id) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RSS returns the resident memory of the process in bytes.
func RSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("status of pid %d: VmRSS: %w", pid, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// Find returns the running processes (other than this one) whose executable
// is one of exes and whose arguments (argv[1:]) match. It finds components
// whose pid record was lost.
func Find(exes []string, match func(args []string) bool) ([]Identity, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	want := map[string]bool{}
	for _, e := range exes {
		if e != "" {
			want[e] = true
		}
	}
	self := os.Getpid()
	var out []Identity
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue
		}
		if !want[strings.TrimSuffix(exe, " (deleted)")] {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
		if len(args) == 0 || !match(args[1:]) {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.state == 'Z' {
			continue
		}
		out = append(out, Identity{PID: pid, StartTime: st.start})
	}
	return out, nil
}

// Descendants returns the live processes below pid: its children, their
// children and so on. Container processes are found this way under their
// shim, which is not in the group of the process that started it.
func Descendants(pid int) ([]Identity, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	children := map[int][]Identity{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(p)
		if err != nil || st.state == 'Z' {
			continue
		}
		children[st.ppid] = append(children[st.ppid], Identity{PID: p, StartTime: st.start})
	}
	var out []Identity
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out, nil
}
