package main

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// devMemoryLimit is `sluice dev`'s soft memory limit unless GOMEMLIMIT or
// --memory-limit says otherwise. It does not bind at 15,000 Jobs (about
// 500 MB resident) and keeps 100,000 Jobs under 1 GB, where the heap would
// otherwise grow to twice its live 600 MB (docs/performance.md, stop 31).
const devMemoryLimit = "900MiB"

// defaultGCPercent is every service's GOGC unless GOGC or --gc-percent
// says otherwise. Go's own 100 lets the heap grow to twice what is live
// before it collects, and the runtime keeps about that much resident;
// at 50 `sluice dev` under Kueue's large-scale profile at 15,000 Jobs
// stayed under 499–526 MB instead of 690 MB for the same CPU, at 25
// under 457 MB for a fifth more CPU (docs/performance.md, stop 61).
const defaultGCPercent = 50

// byteUnits are the suffixes GOMEMLIMIT accepts, so a value moves between
// the flag and the environment unchanged.
var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"TiB", 1 << 40},
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// parseMemoryLimit reads a limit written as GOMEMLIMIT is: a whole number of
// bytes with an optional B, KiB, MiB, GiB or TiB suffix, or "off". It
// returns 0 for no limit: unlike GOMEMLIMIT=0, which would make the
// collector run without pause, 0 here means none.
func parseMemoryLimit(s string) (int64, error) {
	if s == "off" {
		return 0, nil
	}
	num, factor := s, int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, factor = strings.TrimSuffix(s, u.suffix), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || num == "" || num[0] == '+' {
		return 0, fmt.Errorf("%q: want a whole number of bytes, optionally with B, KiB, MiB, GiB or TiB (e.g. 900MiB), or 0 or off for none", s)
	}
	if n > math.MaxInt64/factor {
		return 0, fmt.Errorf("%q: larger than %d bytes", s, int64(math.MaxInt64))
	}
	return n * factor, nil
}

// applyMemoryLimit sets the runtime's soft memory limit from flag unless
// the environment's GOMEMLIMIT, which the runtime already applied, is set.
// It says which one is in force, for the log.
func applyMemoryLimit(flag, env string) (string, error) {
	n, err := parseMemoryLimit(flag)
	if err != nil {
		return "", usageError{Err: fmt.Errorf("--memory-limit %w", err)}
	}
	switch {
	case env != "":
		return "GOMEMLIMIT=" + env, nil
	case n == 0:
		return "none", nil
	}
	debug.SetMemoryLimit(n)
	return flag, nil
}

// applyGCPercent sets the collector's GOGC from flag unless the
// environment's GOGC, which the runtime already applied, is set. It says
// which one is in force, for the log.
func applyGCPercent(flag int, env string) (string, error) {
	if flag < 1 {
		return "", usageError{Err: fmt.Errorf("--gc-percent %d: must be 1 or more (GOGC=off in the environment turns the collector off)", flag)}
	}
	if env != "" {
		return "GOGC=" + env, nil
	}
	debug.SetGCPercent(flag)
	return strconv.Itoa(flag), nil
}
